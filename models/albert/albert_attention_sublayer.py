"""The self-attention sub-layer of an ALBERT block, as a layer of its own so several blocks
can share it (Lan et al. 2020 §3.1 "Cross-layer parameter sharing")."""

import keras

from lmfactory.models.albert.albert_common import albert_kernel_initializer, clone_initializer


@keras.saving.register_keras_serializable(package="lmfactory")
class AlbertAttentionSublayer(keras.layers.Layer):
    """Post-LN multi-head self-attention: ``LayerNorm(x + Dropout(MultiHeadAttention(x, x)))``.

    This is the first half of keras-nlp's `TransformerEncoder` (with ``normalize_first=False``,
    BERT/ALBERT's post-LN placement), split out because the partial sharing modes of §3.1 /
    Table 4 ("shared-attention", "shared-FFN") share this sub-layer across blocks while the
    other one is not shared, which `TransformerEncoder` cannot do. It owns the query, key,
    value and output projections and the LayerNorm after the residual connection.

    Call arguments:
        inputs: [batch, seq_len, hidden_dim].
        attention_mask: bool [batch, seq_len, seq_len] (True = may attend), or None.
        return_attention_scores: also return the softmax attention probabilities
            [batch, num_heads, seq_len, seq_len].

    Args:
        num_heads: number of attention heads; the head size is hidden_dim / num_heads.
        dropout: dropout rate on the attention probabilities and the sub-layer output.
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: initialiser of the projection kernels.
    """

    def __init__(self, num_heads, dropout=0.0, layer_norm_epsilon=1e-12,
                 kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or albert_kernel_initializer())
        self.supports_masking = True

    def build(self, inputs_shape):
        hidden_dim = inputs_shape[-1]
        if hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim ({hidden_dim}) must be divisible by num_heads "
                             f"({self.num_heads})")
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_dim // self.num_heads,
            dropout=self.dropout,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self.attention.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self.output_dropout = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="output_dropout")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.layer_norm.build(inputs_shape)
        self.built = True

    def call(self, inputs, attention_mask=None, training=None, return_attention_scores=False):
        attended = self.attention(
            query=inputs, value=inputs, attention_mask=attention_mask,
            return_attention_scores=return_attention_scores, training=training)
        if return_attention_scores:
            attended, scores = attended
        outputs = self.layer_norm(inputs + self.output_dropout(attended, training=training))
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        })
        return config
