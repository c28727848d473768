"""The Quaternion Transformer encoder-decoder (Tay et al. 2019, "Quaternion Transformer"):
the Transformer of Vaswani et al. 2017 (`TransformerBackbone`: embeddings, positions,
stacks, decoding state) with quaternion blocks."""

import keras_nlp

from lmfactory.models.backbone import Backbone
from lmfactory.models.quaternion_transformer.quaternion_blocks import (
    QuaternionTransformerDecoder, QuaternionTransformerEncoder, check_quaternion_config,
    check_quaternion_sizes)
from lmfactory.models.transformer.transformer_backbone import TransformerBackbone


class QuaternionTransformerBackbone(TransformerBackbone):
    """`TransformerBackbone` whose encoder and decoder blocks are the quaternion blocks of
    `quaternion_blocks` (Tay et al. 2019, "Quaternion Transformer"):

    * every attention projection (Q, K, V, output; self- and cross-attention) and both
      feed-forward layers are quaternion linear layers (Hamilton product): 1/4 of the
      real model's weights in those layers;
    * attention scores are Hamilton products of query and key quaternions, one softmax per
      component ("Quaternion Attention");
    * the feed-forward activation is the split (component-wise) ReLU;
    * quaternion weights start from Parcollet et al.'s polar initialisation.

    The token embeddings (one matrix shared by both stacks and the pre-softmax projection,
    §3.4 of Vaswani et al.), the sinusoidal positions, LayerNorm and the residuals are the
    real Transformer's: the paper's model makes the Transformer's projections quaternion, and
    its d_model-wide embeddings are read as d_model / 4 quaternions.

    Inputs, outputs and the decoding state: as `TransformerBackbone`.

    Args: those of `TransformerBackbone` (hidden_dim, intermediate_dim and the head width
        hidden_dim / num_heads multiples of 4), plus
        quaternion: True for the quaternion blocks; False builds the real-valued
            Transformer through this same code (keras-nlp's blocks), for side-by-side
            comparisons at equal sizes and seeds.
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=256, normalize_first=False,
                 layer_norm_epsilon=1e-6, quaternion=True, dtype=None, **kwargs):
        if not isinstance(quaternion, bool):
            raise ValueError(f"quaternion must be True or False, got {quaternion!r}")
        if quaternion:
            check_quaternion_sizes(hidden_dim, num_heads, intermediate_dim)
            blocks = (QuaternionTransformerEncoder, QuaternionTransformerDecoder)
        else:
            blocks = (keras_nlp.layers.TransformerEncoder, keras_nlp.layers.TransformerDecoder)
        inputs, outputs = self._build_network(
            vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, dropout,
            max_sequence_length, normalize_first, layer_norm_epsilon, dtype,
            encoder_block=blocks[0], decoder_block=blocks[1])
        # TransformerBackbone.__init__ would build the real network: skip to Backbone's.
        Backbone.__init__(self, inputs=inputs, outputs=outputs, dtype=dtype,
                          arguments=locals(), **kwargs)

    @classmethod
    def check_arguments(cls, config: dict) -> None:
        """Checks a recipe's backbone config before any stage runs (recipe/document.py): with
        ``quaternion`` on, hidden_dim, intermediate_dim and the head width must be multiples
        of 4. Raises ValueError."""
        check_quaternion_config(config)
