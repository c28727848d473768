"""ELECTRA's discriminator network (Clark et al. 2020, "ELECTRA: Pre-training Text Encoders
as Discriminators Rather Than Generators", ICLR)."""

import keras

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.encoder_utils import (add_segment_embeddings, embed_with_segments,
                                            encoder_graph, encoder_states,
                                            post_ln_encoder_blocks,
                                            require_inputs)

ELECTRA_BACKBONE_INPUTS = ("token_ids", "padding_mask", "segment_ids")


class ElectraBackbone(Backbone):
    """The Transformer encoder of ELECTRA: the discriminator, which is what fine-tuning keeps.

    §2: both networks are Transformer encoders; "our model architecture and most
    hyperparameters are the same as BERT's" (§3.1). The encoder is therefore BERT's: a token
    embedding, a learned position embedding and a learned segment embedding are summed,
    layer-normalised (epsilon 1e-12) and dropped out, then go through L post-LayerNorm
    Transformer blocks with exact GELU, dropout 0.1 and truncated-normal(0.02) weights.

    The one difference is the embedding size E (Table 6 "Embedding Size"): the embeddings
    are E wide, so they can be shared with a generator narrower than the discriminator
    (§3.2 "Weight Sharing"). When E differs from the hidden size H (ELECTRA-Small: E=128,
    H=256) a dense layer projects the embedding output to H before the first block (the
    released code's `embeddings_project`); when E == H there is no projection.

    ELECTRA has no pooler: the classification head reads the first token's hidden state
    (`ElectraClassifier`).

    Inputs (dict of int32 [batch, seq_len], seq_len up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding), `segment_ids` (0 / 1).
    Outputs (dict): `sequence_output` [batch, seq_len, H].

    `call_with_states(inputs)` runs the same layers and also returns `hidden_states` (the
    projected embedding output then each block's output: L + 1 tensors [B, T, H]) and
    `attention_scores` (L tensors [B, heads, T, T] of attention probabilities).
    `embed(inputs)` is the shared embedding part alone ([B, T, E], before the projection):
    the ELECTRA generator reads its input through it.

    Args:
        vocabulary_size: WordPiece vocabulary size (30522 for the released English models).
        num_layers: L, the number of Transformer blocks.
        num_heads: A, the number of attention heads.
        hidden_dim: H, the hidden size.
        intermediate_dim: feed-forward inner size (4H in the paper).
        embedding_dim: E, the embedding size; None means E = H.
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
        intermediate_dim,
        embedding_dim=None,
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        dtype=None,
        **kwargs,
    ):
        check_head_split(hidden_dim, num_heads)
        embedding_dim = hidden_dim if embedding_dim is None else int(embedding_dim)
        if embedding_dim <= 0:
            raise ValueError(f"embedding_dim must be positive, got {embedding_dim}")
        # === Layers ===
        # BERT's embedding block, E wide: `embeddings` (token + position),
        # `segment_embedding`, their sum, LayerNorm and dropout. `token_embedding` is shared
        # with the generator and tied to its masked-LM output layer (§3.2).
        add_segment_embeddings(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            embedding_dim=embedding_dim,
            num_segments=num_segments,
            dropout=dropout,
            kernel_initializer=bert_kernel_initializer,
            dtype=dtype,
        )
        self.embeddings_projection = None
        if embedding_dim != hidden_dim:
            self.embeddings_projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=bert_kernel_initializer(),
                dtype=dtype,
                name="embeddings_projection",
            )
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            kernel_initializer=bert_kernel_initializer,
            dtype=dtype,
        )

        # === Functional model ===
        inputs, x = encoder_graph(self, ELECTRA_BACKBONE_INPUTS,
                                  lambda inputs: self._project(self.embed(inputs)))
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    def embed(self, inputs, training=None):
        """The shared embedding block: token + position + segment embeddings, LayerNorm,
        dropout -> [batch, seq_len, E] (no projection to H)."""
        return embed_with_segments(self, inputs["token_ids"], inputs["segment_ids"],
                                   training=training)

    def _project(self, x):
        if self.embeddings_projection is None:
            return x
        return self.embeddings_projection(x)

    def call_with_states(self, inputs, training=False):
        """Like calling the backbone, with every layer's output and attention probabilities.

        Returns a dict: `sequence_output` [B, T, H], `hidden_states` (list of L + 1 [B, T, H]:
        the projected embedding output, then each block's output) and `attention_scores`
        (list of L [B, heads, T, T]).
        """
        require_inputs("ElectraBackbone", inputs, ELECTRA_BACKBONE_INPUTS)
        x = self._project(self.embed(inputs, training=training))
        return encoder_states(self.transformer_layers, x, inputs["padding_mask"],
                              training=training)
