"""An ALBERT Transformer block assembled from given sub-layers, so blocks can share one of
them (Lan et al. 2020 §3.1 "Cross-layer parameter sharing", Table 4)."""

import keras
from keras import ops


def self_attention_mask(padding_mask):
    """bool [batch, seq_len, seq_len] from a padding mask [batch, seq_len] (1 = real token):
    every position may attend to every real token, never to padding."""
    keys = ops.cast(ops.expand_dims(padding_mask, axis=1), "int32")  # [B, 1, T]
    queries = ops.expand_dims(ops.ones_like(padding_mask, dtype="int32"), axis=2)  # [B, T, 1]
    return ops.cast(queries * keys, "bool")


@keras.saving.register_keras_serializable(package="lmfactory")
class AlbertTransformerBlock(keras.layers.Layer):
    """A post-LN Transformer block whose attention and feed-forward sub-layers are given.

    §3.1: ALBERT shares parameters across layers; besides sharing everything, the paper
    studies sharing only the feed-forward network ("shared-FFN") or only the attention
    parameters ("shared-attention", Table 4). keras-nlp's `TransformerEncoder` creates its
    sub-layers itself, so two blocks can share all of it or nothing; this layer is the
    mechanism keras-nlp lacks: it takes an `AlbertAttentionSublayer` and an
    `AlbertFeedForwardSublayer` as arguments, and passing the same instance to every block
    shares that sub-layer (one set of variables, used at every depth). The computation is
    that of `TransformerEncoder(normalize_first=False)`:
    ``x = LayerNorm(x + Attention(x)); x = LayerNorm(x + FFN(x))``.

    Call arguments:
        inputs: [batch, seq_len, hidden_dim].
        padding_mask: [batch, seq_len], 1 = real token, 0 = padding (or None).
        return_attention_scores: also return the attention probabilities
            [batch, num_heads, seq_len, seq_len].

    Args:
        attention_sublayer: an `AlbertAttentionSublayer` (possibly used by other blocks).
        feedforward_sublayer: an `AlbertFeedForwardSublayer` (possibly used by other blocks).
    """

    def __init__(self, attention_sublayer, feedforward_sublayer, **kwargs):
        super().__init__(**kwargs)
        self.attention_sublayer = attention_sublayer
        self.feedforward_sublayer = feedforward_sublayer
        self.supports_masking = True

    def build(self, inputs_shape):
        # A shared sub-layer is built by the first block that uses it.
        if not self.attention_sublayer.built:
            self.attention_sublayer.build(inputs_shape)
        if not self.feedforward_sublayer.built:
            self.feedforward_sublayer.build(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, training=None, return_attention_scores=False):
        attention_mask = None if padding_mask is None else self_attention_mask(padding_mask)
        x = self.attention_sublayer(inputs, attention_mask=attention_mask, training=training,
                                    return_attention_scores=return_attention_scores)
        if return_attention_scores:
            x, scores = x
        x = self.feedforward_sublayer(x, training=training)
        if return_attention_scores:
            return x, scores
        return x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        # Standalone (de)serialisation gives the block its own copies of the sub-layers;
        # `AlbertBackbone` rebuilds the sharing from its `sharing` argument instead.
        config = super().get_config()
        config.update({
            "attention_sublayer": keras.layers.serialize(self.attention_sublayer),
            "feedforward_sublayer": keras.layers.serialize(self.feedforward_sublayer),
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("attention_sublayer", "feedforward_sublayer"):
            if isinstance(config.get(key), dict):
                config[key] = keras.layers.deserialize(config[key])
        return cls(**config)
