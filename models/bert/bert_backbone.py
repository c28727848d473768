"""BERT encoder network (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding")."""

import keras

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.encoder_utils import (add_pooler, add_segment_embeddings,
                                            embed_with_segments, encoder_graph, encoder_states,
                                            post_ln_encoder_blocks,
                                            pooled_outputs, require_inputs)

BERT_BACKBONE_INPUTS = ("token_ids", "padding_mask", "segment_ids")


def bert_kernel_initializer(stddev=0.02):
    """Truncated normal, stddev 0.02 (the released BERT code's `initializer_range`)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


class BertBackbone(Backbone):
    """The bidirectional Transformer encoder of BERT, without a task head.

    §3 "Model Architecture": a multi-layer bidirectional Transformer encoder (Vaswani et al.
    2017) with L layers, hidden size H and A attention heads, feed-forward size 4H.
    §3 "Input/Output Representations" (Figure 2): the input representation of a token is the
    sum of its token (WordPiece) embedding, a learned segment embedding (sentence A / B) and
    a learned position embedding (up to 512 positions). The final hidden state of the
    first token, `[CLS]`, is the aggregate sequence representation; as in the released
    code, it goes through a Dense(H, tanh) "pooler" (the model's `pooled_output`).

    Activation is exact GELU (§3.1 / Appendix A.2, following OpenAI GPT), blocks are
    post-LayerNorm (Vaswani et al.), dropout 0.1 everywhere (Appendix A.2), and weights are
    initialised from a truncated normal with stddev 0.02.

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding), `segment_ids` (0 / 1).
    Outputs (dict):
        `sequence_output` [batch, seq_len, H], `pooled_output` [batch, H].

    Args:
        vocabulary_size: WordPiece vocabulary size (30522 for the released English models).
        num_layers: L, the number of Transformer blocks.
        num_heads: A, the number of attention heads.
        hidden_dim: H, the hidden size.
        intermediate_dim: feed-forward inner size (4H in the paper).
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
        dropout=0.1,
        max_sequence_length=512,
        num_segments=2,
        dtype=None,
        **kwargs,
    ):
        check_head_split(hidden_dim, num_heads)
        # === Layers ===
        # §3 Figure 2: `embeddings` (token + position), `segment_embedding`, their sum,
        # LayerNorm and dropout. The MLM head ties its output projection to
        # `token_embedding` (§3.1, as in the code).
        add_segment_embeddings(
            self,
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            embedding_dim=hidden_dim,
            num_segments=num_segments,
            dropout=dropout,
            kernel_initializer=bert_kernel_initializer,
            dtype=dtype,
        )
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            kernel_initializer=bert_kernel_initializer,
            dtype=dtype,
        )
        add_pooler(self, hidden_dim=hidden_dim, kernel_initializer=bert_kernel_initializer,
                   dtype=dtype)

        # === Functional model ===
        inputs, x = encoder_graph(self, BERT_BACKBONE_INPUTS, lambda inputs: embed_with_segments(
            self, inputs["token_ids"], inputs["segment_ids"]))
        super().__init__(inputs=inputs, outputs=pooled_outputs(self, x), dtype=dtype,
                         arguments=locals(), **kwargs)

    def call_with_states(self, inputs, training=False):
        """The forward pass, also returning every layer's hidden states and attention maps.

        Calls the very layers of the functional graph (same weights), so `sequence_output`
        and `pooled_output` equal `self(inputs)`'s. Feature-based use of BERT (§5.3,
        Table 7) and distillation read the intermediate states from here.

        Args:
            inputs: dict with `token_ids`, `padding_mask`, `segment_ids`, int [batch, seq_len].
            training: whether dropout is active.

        Returns:
            dict with `sequence_output` [B, T, H], `pooled_output` [B, H],
            `hidden_states`: list of L + 1 tensors [B, T, H] (the embedding output after its
            LayerNorm and dropout, then the output of each of the L blocks), and
            `attention_scores`: list of L tensors [B, A, T, T] (each block's softmax
            attention probabilities; padding keys get probability 0).
        """
        require_inputs("BertBackbone.call_with_states", inputs,
                       ("token_ids", "padding_mask", "segment_ids"))
        token_ids = keras.ops.convert_to_tensor(inputs["token_ids"], dtype="int32")
        padding_mask = keras.ops.convert_to_tensor(inputs["padding_mask"], dtype="int32")
        segment_ids = keras.ops.convert_to_tensor(inputs["segment_ids"], dtype="int32")

        x = embed_with_segments(self, token_ids, segment_ids, training=training)
        states = encoder_states(self.transformer_layers, x, padding_mask, training=training)
        return {**states, **pooled_outputs(self, states["sequence_output"])}
