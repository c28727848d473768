"""One XLNet layer (Yang et al. 2019 §2.3-2.4; the reference code's `two_stream_rel_attn`
then `positionwise_ffn`): two-stream relative attention, then the same position-wise
feed-forward network applied to each stream, both post-LN (residual, then LayerNorm)."""

import keras

from lmfactory.models.xlnet.xlnet_relative_attention import XLNetTwoStreamAttention

ACTIVATIONS = {"gelu": lambda x: keras.activations.gelu(x, approximate=False),
               "gelu_approximate": lambda x: keras.activations.gelu(x, approximate=True),
               "relu": keras.activations.relu}


@keras.saving.register_keras_serializable(package="lmfactory")
class XLNetBlock(keras.layers.Layer):
    """`XLNetTwoStreamAttention` followed by the feed-forward network
    ``LayerNorm(x + Dropout(W2 Dropout(act(W1 x + b1)) + b2))``, shared by the content and
    the query stream (the reference applies one `positionwise_ffn` scope to both).

    Call arguments: as `XLNetTwoStreamAttention`. Returns the content [B, T, H], or
    (content, query) when a query stream is given.

    Args:
        hidden_dim, num_heads, intermediate_dim: sizes (head size hidden_dim / num_heads).
        dropout: the reference's single `dropout` rate (attention probabilities, outputs,
            feed-forward).
        activation: "gelu" (exact erf, as Hugging Face's published configs), 
            "gelu_approximate" (the reference code's tanh form) or "relu".
        layer_norm_epsilon, initializer_range: 1e-12 and 0.02 in the reference.
    """

    def __init__(self, hidden_dim, num_heads, intermediate_dim, dropout=0.1, activation="gelu",
                 layer_norm_epsilon=1e-12, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got "
                             f"{activation!r}")
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.intermediate_dim = int(intermediate_dim)
        self.dropout = float(dropout)
        self.activation = activation
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.initializer_range = float(initializer_range)
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        self.attention = XLNetTwoStreamAttention(
            hidden_dim, num_heads, hidden_dim // num_heads, dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon, initializer_range=initializer_range,
            dtype=self.dtype_policy, name="attention")
        self.layer_1 = keras.layers.Dense(intermediate_dim, kernel_initializer=init,
                                          dtype=self.dtype_policy, name="layer_1")
        self.layer_2 = keras.layers.Dense(hidden_dim, kernel_initializer=init,
                                          dtype=self.dtype_policy, name="layer_2")
        self.inner_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.ffn_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.ffn_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="ffn_layer_norm")

    def build(self, *args, **kwargs):
        self.attention.build()
        self.layer_1.build((None, None, self.hidden_dim))
        self.layer_2.build((None, None, self.intermediate_dim))
        self.ffn_layer_norm.build((None, None, self.hidden_dim))
        self.built = True

    def feed_forward(self, x, training=None):
        hidden = ACTIVATIONS[self.activation](self.layer_1(x))
        hidden = self.layer_2(self.inner_dropout(hidden, training=training))
        return self.ffn_layer_norm(x + self.ffn_dropout(hidden, training=training))

    def call(self, content, query=None, content_allowed=None, query_allowed=None,
             position_encoding=None, segment_matrix=None, memory=None, target_mapping=None,
             training=None):
        outputs = self.attention(
            content, query, content_allowed=content_allowed, query_allowed=query_allowed,
            position_encoding=position_encoding, segment_matrix=segment_matrix,
            memory=memory, target_mapping=target_mapping, training=training)
        if query is None:
            return self.feed_forward(outputs, training=training)
        content, query = outputs
        return (self.feed_forward(content, training=training),
                self.feed_forward(query, training=training))

    def compute_output_spec(self, content, query=None, **kwargs):
        """Each stream keeps its shape. Given explicitly because a backend that infers it by
        tracing with stand-in sizes for the unknown axes (JAX) cannot see that the
        relative encodings are tied to the sequence length."""
        def spec(stream):
            return keras.KerasTensor(stream.shape, dtype=self.compute_dtype)

        return spec(content) if query is None else (spec(content), spec(query))

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim, "num_heads": self.num_heads,
                       "intermediate_dim": self.intermediate_dim, "dropout": self.dropout,
                       "activation": self.activation,
                       "layer_norm_epsilon": self.layer_norm_epsilon,
                       "initializer_range": self.initializer_range})
        return config
