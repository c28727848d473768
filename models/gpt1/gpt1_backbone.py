"""GPT-1 decoder network (Radford et al. 2018, "Improving Language Understanding by
Generative Pre-Training")."""

import keras
import keras_nlp

from lmfactory.models import decoder_cache
from lmfactory.models.gpt2.gpt2_backbone import gelu_approximate


@keras.saving.register_keras_serializable(package="lmfactory")
class Gpt1Backbone(keras.Model):
    """The GPT-1 Transformer decoder, without the language-model output layer.

    §3.1: a multi-layer Transformer decoder (Liu et al. 2018): masked multi-headed
    self-attention over the input tokens, then position-wise feed-forward layers,

        h_0 = U W_e + W_p,   h_l = transformer_block(h_{l-1}),   P(u) = softmax(h_n W_e^T),

    with W_e the token embedding matrix and W_p the learned position embeddings. Each block
    is the original Transformer's (Vaswani et al. 2017): LayerNorm AFTER each residual sum
    (post-LN, `normalize_first=False`), unlike GPT-2's pre-LN blocks, and no LayerNorm after
    the last block. §4.1 "Model specifications": 12 layers, 768-dimensional states, 12
    heads, 3072-dimensional inner states, GELU, learned position embeddings, dropout 0.1 on
    residuals, embeddings and attention, weights from N(0, 0.02) ("since layernorm is used
    extensively throughout the model"). The blocks are keras-nlp `TransformerDecoder`s
    without cross-attention; the GELU is the tanh form of the released code (shared with
    GPT-2, `gelu_approximate`).

    The output layer is the transposed token embedding (`token_embedding(h, reverse=True)`),
    see `Gpt1CausalLM`.

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding at the end).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim], the last block's output.

    Args:
        vocabulary_size: BPE vocabulary size (40478 for the released model).
        num_layers: number of Transformer blocks.
        num_heads: number of attention heads.
        hidden_dim: model width.
        intermediate_dim: feed-forward inner size (4 * hidden_dim).
        dropout: dropout rate on embeddings, attention probabilities and residuals.
        max_sequence_length: number of learned positions (512 for GPT-1).
        layer_norm_epsilon: LayerNorm epsilon (1e-5 as in the released code).
        dtype: Keras dtype policy for the layers, e.g. "mixed_bfloat16".
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.1,
        max_sequence_length=512,
        layer_norm_epsilon=1e-5,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim ({hidden_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        # === Layers ===
        # h_0 = U W_e + W_p (§3.1).
        self.embeddings = keras_nlp.layers.TokenAndPositionEmbedding(
            vocabulary_size=vocabulary_size,
            sequence_length=max_sequence_length,
            embedding_dim=hidden_dim,
            tie_weights=True,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype=dtype,
            name="embeddings",
        )
        self.token_embedding = self.embeddings.token_embedding
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.transformer_layers = [
            keras_nlp.layers.TransformerDecoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=gelu_approximate,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
                normalize_first=False,
                dtype=dtype,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]

        # === Functional model ===
        token_id_input = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask_input = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
        x = self.embeddings_dropout(self.embeddings(token_id_input))
        for block in self.transformer_layers:
            x = block(x, decoder_padding_mask=padding_mask_input)
        super().__init__(
            inputs={"token_ids": token_id_input, "padding_mask": padding_mask_input},
            outputs={"sequence_output": x},
            **kwargs,
        )
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon

    def call_with_states(self, inputs, training=False):
        """The forward pass keeping every block's output, with the same layers.

        Returns a dict: `sequence_output` [B, T, H] and `hidden_states` (list of
        num_layers + 1 tensors [B, T, H]: h_0 after dropout, then each block's output h_l;
        the last equals `sequence_output`)."""
        x = self.embeddings_dropout(self.embeddings(inputs["token_ids"]), training=training)
        hidden_states = [x]
        for block in self.transformer_layers:
            x = block(x, decoder_padding_mask=inputs["padding_mask"], training=training)
            hidden_states.append(x)
        return {"sequence_output": x, "hidden_states": hidden_states}

    def initial_state(self, batch_size, max_length):
        """The decoding state before any token (the protocol of `models/generation.py`): a
        zero key/value cache [batch, num_layers, 2, max_length, num_heads, head_dim]
        (`models/decoder_cache.py`)."""
        return decoder_cache.initial_state(self.transformer_layers, batch_size, max_length,
                                           self.num_heads, self.hidden_dim // self.num_heads)

    def call_with_state(self, token_ids, state, index):
        """Runs `token_ids` (the tokens at positions `index`, ...) through the network at
        inference, reusing the keys/values of earlier positions from `state`; the
        decoding-state protocol `CausalLMGeneration.generate_ids` decodes with.

        Args:
            token_ids: int [batch, n] (n = 1 while generating, or the whole padded prompt
                with `index = 0` to fill the cache).
            state: float [batch, num_layers, 2, max_length, num_heads, head_dim].
            index: int scalar (may be a tensor), position of `token_ids[:, 0]`.

        Returns:
            (hidden [batch, n, hidden_dim], the last block's output; updated state).
        """
        x = self.embeddings(token_ids, start_index=index)
        return decoder_cache.call_blocks_with_state(self.transformer_layers, x, state, index)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "dtype": self.dtype_policy.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
