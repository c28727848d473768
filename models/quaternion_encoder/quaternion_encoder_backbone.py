"""The Quaternion Transformer encoder (Tay et al. 2019, "Quaternion Transformer") for
sentence classification: the Transformer's encoder stack (Vaswani et al. 2017 §3.1) with
quaternion blocks."""

import math

import keras
import keras_nlp
from keras import ops

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.encoder_utils import encoder_graph
from lmfactory.models.quaternion_transformer.quaternion_blocks import (
    QuaternionTransformerEncoder, check_quaternion_config, check_quaternion_sizes)
from lmfactory.models.transformer.transformer_backbone import embedding_initializer

INPUT_NAMES = ("token_ids", "padding_mask")


class QuaternionEncoderBackbone(Backbone):
    """The encoder of the Quaternion Transformer, trained from scratch on a task.

    * Embeddings and positions as the Transformer's encoder (Vaswani et al. 2017 §3.4,
      §3.5): a learned token embedding [V, d_model] multiplied by sqrt(d_model) plus the
      fixed sinusoids (keras-nlp `SinePositionEncoding`), then dropout. The d_model real
      numbers of each embedding are read as d_model / 4 quaternions [r | x | y | z].
    * N blocks (`QuaternionTransformerEncoder`, Tay et al., "Quaternion Transformer"):
      quaternion self-attention (quaternion Q, K, V and output projections,
      Hamilton-product scores with one softmax per component, "Quaternion Attention") and
      the quaternion feed-forward network with the split activation, quaternion weights
      initialised in Parcollet et al.'s polar form (the paper's initialisation); real
      LayerNorm and residuals, post-LN as the paper's Transformer (pre-LN with a final
      LayerNorm if ``normalize_first``).
    * ``quaternion=False`` builds the same network with keras-nlp's real blocks: the
      real-valued baseline of the comparison, through the same code.

    Inputs (dict, int32 [B, T]): `token_ids`, `padding_mask` (1 = real token; padded keys
        are masked in every block).
    Outputs (dict): `sequence_output` [B, T, hidden_dim].

    Args:
        vocabulary_size: V.
        num_layers: N.
        num_heads: h (hidden_dim / h a multiple of 4).
        hidden_dim: d_model (a multiple of 4).
        intermediate_dim: d_ff (a multiple of 4).
        dropout: dropout on the embeddings, sub-layer outputs and attention probabilities.
        max_sequence_length: the longest input the recipes may pack (the sinusoids
            themselves have no limit).
        normalize_first: False for post-LN blocks, True for pre-LN.
        layer_norm_epsilon: the LayerNorms' epsilon.
        activation: the feed-forward activation (element-wise; split over components).
        quaternion: True for quaternion blocks, False for the real-valued Transformer.
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=512, normalize_first=False,
                 layer_norm_epsilon=1e-6, activation="relu", quaternion=True, dtype=None,
                 **kwargs):
        check_head_split(hidden_dim, num_heads)
        for key, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                           ("intermediate_dim", intermediate_dim),
                           ("max_sequence_length", max_sequence_length)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        for key, value in (("normalize_first", normalize_first), ("quaternion", quaternion)):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be True or False, got {value!r}")
        if quaternion:
            check_quaternion_sizes(hidden_dim, num_heads, intermediate_dim)
        block = (QuaternionTransformerEncoder if quaternion
                 else keras_nlp.layers.TransformerEncoder)
        # === Layers ===
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size, hidden_dim,
            embeddings_initializer=embedding_initializer(hidden_dim), dtype=dtype,
            name="token_embedding")
        self.position_encoding = keras_nlp.layers.SinePositionEncoding(
            dtype=dtype, name="position_encoding")
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                      name="embedding_dropout")
        self.transformer_layers = [
            block(intermediate_dim=intermediate_dim, num_heads=num_heads, dropout=dropout,
                  activation=activation, layer_norm_epsilon=layer_norm_epsilon,
                  normalize_first=normalize_first, dtype=dtype, name=f"transformer_layer_{i}")
            for i in range(num_layers)]
        self.final_layer_norm = None
        if normalize_first:
            self.final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name="final_layer_norm")

        # === Functional model ===
        inputs, x = encoder_graph(self, INPUT_NAMES,
                                  lambda inputs: self.embed(inputs["token_ids"]))
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    @classmethod
    def check_arguments(cls, config: dict) -> None:
        """Checks a recipe's backbone config before any stage runs (recipe/document.py): with
        ``quaternion`` on, hidden_dim, intermediate_dim and the head width must be multiples
        of 4. Raises ValueError."""
        check_quaternion_config(config)

    def embed(self, token_ids, training=None):
        """dropout(E[token] * sqrt(d_model) + PE(position)) (Vaswani et al. §3.4, §3.5)."""
        x = self.token_embedding(token_ids)
        x = x * ops.cast(math.sqrt(self.token_embedding.output_dim), x.dtype)
        return self.embedding_dropout(x + self.position_encoding(x), training=training)
