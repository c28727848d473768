"""ALBERT encoder network (Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised
Learning of Language Representations", ICLR)."""

import keras
import keras_nlp

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.albert.albert_attention_sublayer import AlbertAttentionSublayer
from lmfactory.models.albert.albert_common import (
    ACTIVATIONS,
    albert_kernel_initializer,
    get_activation,
)
from lmfactory.models.albert.albert_feedforward_sublayer import AlbertFeedForwardSublayer
from lmfactory.models.albert.albert_transformer_block import AlbertTransformerBlock
from lmfactory.models.encoder_utils import (add_pooler, add_segment_embeddings,
                                            embed_with_segments, encoder_graph, encoder_states,
                                            pooled_outputs, require_inputs)

# §3.1 / Table 4: which parameters the L Transformer blocks share.
SHARING_MODES = ("all-shared", "shared-attention", "shared-FFN", "not-shared")
BACKBONE_INPUTS = ("token_ids", "padding_mask", "segment_ids")


class AlbertBackbone(Backbone):
    """The ALBERT encoder: BERT's Transformer with a factorised embedding and cross-layer
    parameter sharing, without a task head.

    §3.1 "Factorized embedding parameterization": tokens are embedded in a space of size
    E (`embedding_dim`), then projected to the hidden size H, so the vocabulary costs
    O(V·E + E·H) parameters instead of O(V·H). As in the released code, the position and
    segment embeddings also have size E, are added to the token embedding and normalised
    (LayerNorm, dropout) before the projection; the E -> H projection is kept even when
    E == H (the released models always have it).

    §3.1 "Cross-layer parameter sharing": `sharing` selects what the L blocks share
    (Table 4): "all-shared" (ALBERT's default; one `TransformerEncoder` applied L times),
    "shared-attention" (one attention sub-layer, L feed-forward sub-layers),
    "shared-FFN" (one feed-forward sub-layer, L attention sub-layers) or "not-shared"
    (L independent `TransformerEncoder`s, i.e. BERT's encoder). The partial modes use
    `AlbertTransformerBlock`, which assembles a block from given sub-layers.

    Everything else follows BERT (§3.1 "we follow the BERT notation"): post-LayerNorm
    blocks, feed-forward size 4H and H/64 heads in the presets, a Dense(H, tanh) pooler on
    the first token (`[CLS]`), truncated-normal(0.02) initialisation. The activation is GELU
    with the tanh approximation, as in the released ALBERT code (Hugging Face `gelu_new`);
    ``activation="gelu"`` selects the exact form (the Hugging Face v1 configs ask for it).
    Dropout defaults to 0: §4.9 finds removing it helps, and the released v2 models have none.

    Inputs (dict of int32 [batch, seq_len], seq_len up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding), `segment_ids` (0 / 1).
    Outputs (dict): `sequence_output` [batch, seq_len, H], `pooled_output` [batch, H].

    Args:
        vocabulary_size: SentencePiece vocabulary size (30000 for the released models).
        num_layers: L, the number of Transformer blocks.
        num_heads: number of attention heads.
        hidden_dim: H, the hidden size.
        embedding_dim: E, the size of the token / position / segment embeddings.
        intermediate_dim: feed-forward inner size (4H in the paper).
        sharing: one of `SHARING_MODES`.
        activation: "gelu_approximate" (ALBERT) or "gelu" (exact).
        dropout: dropout rate on embeddings, attention probabilities and sub-layer outputs.
        max_sequence_length: number of learned positions.
        num_segments: number of segment (sentence A / B) embeddings.
        dtype: Keras dtype policy for the layers, e.g. "mixed_bfloat16".
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        embedding_dim,
        intermediate_dim,
        sharing="all-shared",
        activation="gelu_approximate",
        dropout=0.0,
        max_sequence_length=512,
        num_segments=2,
        dtype=None,
        **kwargs,
    ):
        if sharing not in SHARING_MODES:
            raise ValueError(f"ALBERT sharing must be one of {SHARING_MODES}, got {sharing!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"ALBERT activation must be one of {ACTIVATIONS}, "
                             f"got {activation!r}")
        check_head_split(hidden_dim, num_heads)
        for name, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                            ("embedding_dim", embedding_dim),
                            ("intermediate_dim", intermediate_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ALBERT {name} must be a positive integer, got {value!r}")
        activation_fn = get_activation(activation)

        # === Layers ===
        # §3.1 factorised embedding: BERT's token, position and segment embeddings at size
        # E (`embeddings`, `segment_embedding`), summed, LayerNorm, dropout. The masked-LM
        # head ties its output projection to the [V, E] `token_embedding`.
        add_segment_embeddings(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            embedding_dim=embedding_dim,
            num_segments=num_segments,
            dropout=dropout,
            kernel_initializer=albert_kernel_initializer,
            dtype=dtype,
        )
        # ... then projected from E to H (the released code's `embedding_hidden_mapping_in`).
        self.embedding_projection = keras.layers.Dense(
            hidden_dim,
            kernel_initializer=albert_kernel_initializer(),
            dtype=dtype,
            name="embedding_projection",
        )
        # §3.1 cross-layer sharing: the block applied at each of the L depths.
        self.transformer_layers = self._make_blocks(
            sharing, num_layers, num_heads, intermediate_dim, activation_fn, dropout, dtype)
        add_pooler(self, hidden_dim=hidden_dim, kernel_initializer=albert_kernel_initializer,
                   dtype=dtype)

        # === Functional model ===
        inputs, x = encoder_graph(
            self, BACKBONE_INPUTS,
            lambda inputs: self._embed(inputs["token_ids"], inputs["segment_ids"]))
        super().__init__(inputs=inputs, outputs=pooled_outputs(self, x), dtype=dtype,
                         arguments=locals(), **kwargs)

    @staticmethod
    def _make_blocks(sharing, num_layers, num_heads, intermediate_dim, activation, dropout,
                     dtype):
        """The L blocks, in order; shared parameters are the same layer object."""
        initializer = albert_kernel_initializer()

        def encoder(name):
            return keras_nlp.layers.TransformerEncoder(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=activation,
                layer_norm_epsilon=1e-12,
                kernel_initializer=initializer,
                normalize_first=False,
                dtype=dtype,
                name=name,
            )

        def attention(name):
            return AlbertAttentionSublayer(num_heads=num_heads, dropout=dropout,
                                           kernel_initializer=initializer, dtype=dtype,
                                           name=name)

        def feedforward(name):
            return AlbertFeedForwardSublayer(intermediate_dim=intermediate_dim,
                                             activation=activation, dropout=dropout,
                                             kernel_initializer=initializer, dtype=dtype,
                                             name=name)

        if sharing == "all-shared":
            shared = encoder("shared_transformer_layer")
            return [shared] * num_layers
        if sharing == "not-shared":
            return [encoder(f"transformer_layer_{i}") for i in range(num_layers)]
        if sharing == "shared-attention":
            shared = attention("shared_attention")
            return [AlbertTransformerBlock(shared, feedforward(f"feedforward_{i}"),
                                           dtype=dtype, name=f"transformer_layer_{i}")
                    for i in range(num_layers)]
        shared = feedforward("shared_feedforward")  # "shared-FFN"
        return [AlbertTransformerBlock(attention(f"attention_{i}"), shared,
                                       dtype=dtype, name=f"transformer_layer_{i}")
                for i in range(num_layers)]

    def _embed(self, token_ids, segment_ids, training=None):
        """§3.1: E-sized token + position + segment embeddings, LayerNorm, dropout, then the
        E -> H projection (the hidden state entering the first block)."""
        x = embed_with_segments(self, token_ids, segment_ids, training=training)
        return self.embedding_projection(x)

    def call_with_states(self, inputs, training=False):
        """The forward pass with every intermediate state, through the same layers.

        Returns a dict: `sequence_output`, `pooled_output`, `hidden_states` (L+1 tensors
        [batch, seq_len, H]: the projected embedding, then each block's output) and
        `attention_scores` (L tensors [batch, num_heads, seq_len, seq_len], softmax
        probabilities). Under "all-shared" the same block produces every entry.
        """
        require_inputs("AlbertBackbone.call_with_states", inputs, BACKBONE_INPUTS)
        x = self._embed(inputs["token_ids"], inputs["segment_ids"], training=training)
        states = encoder_states(self.transformer_layers, x, inputs["padding_mask"],
                                training=training)
        return {**states, **pooled_outputs(self, states["sequence_output"])}
