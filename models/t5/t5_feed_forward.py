"""T5's feed-forward sub-layer (Raffel et al. 2020, §2.1): "a dense layer with an output
dimensionality of d_ff followed by a ReLU nonlinearity and another dense layer", no
biases; dropout after the nonlinearity (the released code's ``dropout_rate`` inside the
dense-ReLU-dense block).

T5.1.1 (the released "v1.1" checkpoints) replaces ReLU by a gated GELU (Shazeer 2020,
"GLU Variants Improve Transformer"): GELU(x W_0) * (x W_1), then W_o. keras-nlp's
Transformer blocks have biases and no gated variant, so this block is written here.
"""

import keras
from keras import ops

FEED_FORWARD_KINDS = ("relu", "gated-gelu")


class T5FeedForward(keras.layers.Layer):
    """x -> wo(dropout(act(wi(x)))) (``"relu"``) or wo(dropout(gelu(wi_0 x) * wi_1 x))
    (``"gated-gelu"``, GELU's tanh approximation as the reference ``gelu_new``).

    Args:
        hidden_dim: d_model.  intermediate_dim: d_ff.
        feed_forward: one of ``FEED_FORWARD_KINDS``.  dropout: the inner dropout rate.
    """

    def __init__(self, hidden_dim, intermediate_dim, feed_forward="relu", dropout=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        if feed_forward not in FEED_FORWARD_KINDS:
            raise ValueError(f"feed_forward must be one of {FEED_FORWARD_KINDS}, got "
                             f"{feed_forward!r}")
        self.hidden_dim, self.intermediate_dim = int(hidden_dim), int(intermediate_dim)
        self.feed_forward, self.dropout = feed_forward, float(dropout)
        normal = keras.initializers.RandomNormal

        def dense(units, stddev, name):
            return keras.layers.Dense(units, use_bias=False, kernel_initializer=normal(
                stddev=stddev), dtype=self.dtype_policy, name=name)

        inward = self.hidden_dim ** -0.5
        self.input_dense = dense(self.intermediate_dim, inward, "wi")  # wi / wi_0
        self.gate_dense = (dense(self.intermediate_dim, inward, "wi_1")
                           if feed_forward == "gated-gelu" else None)
        self.output_dense = dense(self.hidden_dim, self.intermediate_dim ** -0.5, "wo")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)


    def call(self, x, training=False):
        if self.gate_dense is None:
            hidden = ops.relu(self.input_dense(x))
        else:
            hidden = ops.gelu(self.input_dense(x), approximate=True) * self.gate_dense(x)
        return self.output_dense(self.dropout_layer(hidden, training=training))

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_dim": self.hidden_dim,
                       "intermediate_dim": self.intermediate_dim,
                       "feed_forward": self.feed_forward, "dropout": self.dropout})
        return config
