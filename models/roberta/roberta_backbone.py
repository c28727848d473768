"""RoBERTa encoder network (Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT
Pretraining Approach")."""

import keras
import keras_nlp
from keras import ops

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.encoder_utils import (add_embeddings_normalization, encoder_graph,
                                            encoder_states,
                                            model_inputs, normalize_embeddings,
                                            post_ln_encoder_blocks)
from lmfactory.models.roberta.roberta_position_embedding import RobertaPositionEmbedding

# fairseq's dictionary puts <s>=0, <pad>=1, </s>=2, <unk>=3; position ids start past <pad>.
PADDING_INDEX = 1
ROBERTA_BACKBONE_INPUTS = ("token_ids", "padding_mask")


def roberta_kernel_initializer(stddev=0.02):
    """Truncated normal, stddev 0.02: BERT's initialisation, which RoBERTa keeps (§2.1)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


class RobertaBackbone(Backbone):
    """The bidirectional Transformer encoder of RoBERTa, without a task head.

    §2.1 / §3.1: RoBERTa keeps BERT's architecture (Devlin et al. 2019 §3): L post-LayerNorm
    Transformer blocks (Vaswani et al. 2017), hidden size H, A attention heads, feed-forward
    size 4H with exact GELU, dropout 0.1, weights from a truncated normal (stddev 0.02).
    What changes is the input:
    - §4.2: no next-sentence prediction, hence no segment (sentence A / B) embeddings and no
      NSP pooler: a token's input representation is its token embedding plus its position
      embedding, then LayerNorm and dropout. (The released checkpoint carries a single
      "token type" row added to every token; the converter folds it into the position
      table, see `roberta_converters.py`.)
    - §4.4: a byte-level BPE vocabulary of 50K units (50265 ids in the release).
    - Positions follow the released fairseq model: ids start past the padding index and
      count real tokens only (`RobertaPositionEmbedding`), so 512 tokens use 514 rows.
    LayerNorm epsilon is 1e-5 as in the released model (fairseq's default; BERT used 1e-12).

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding). Other entries of the
        dict (e.g. an all-zero `segment_ids`) are ignored.
    Outputs (dict): `sequence_output` [batch, seq_len, H]. There is no `pooled_output`;
        `RobertaClassifier` has its own dense + tanh on the first token `<s>`.

    `call_with_states(inputs)` also returns every layer's hidden states and attention
    probabilities (for feature extraction and distillation).

    Args:
        vocabulary_size: byte-level BPE vocabulary size (50265 for the released models).
        num_layers: L, the number of Transformer blocks.
        num_heads: A, the number of attention heads.
        hidden_dim: H, the hidden size.
        intermediate_dim: feed-forward inner size (4H).
        dropout: dropout rate on embeddings, attention probabilities and sub-layer outputs.
        max_sequence_length: T, the most real tokens a sequence can hold (512); the
            position table has T + 2 rows.
        layer_norm_epsilon: epsilon of every LayerNorm (1e-5 in the released model).
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
        check_head_split(hidden_dim, num_heads)
        # === Layers ===
        # The MLM head ties its output projection to this matrix (as BERT and fairseq do).
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            tie_weights=True,
            embeddings_initializer=roberta_kernel_initializer(),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = RobertaPositionEmbedding(
            sequence_length=max_sequence_length,
            embedding_dim=hidden_dim,
            padding_index=PADDING_INDEX,
            initializer=roberta_kernel_initializer(),
            dtype=dtype,
            name="position_embedding",
        )
        add_embeddings_normalization(self, layer_norm_epsilon=layer_norm_epsilon,
                                     dropout=dropout, dtype=dtype)
        # Post-LN blocks with exact GELU, as BERT.
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=roberta_kernel_initializer,
            dtype=dtype,
        )

        # === Functional model ===
        inputs, x = encoder_graph(
            self, ROBERTA_BACKBONE_INPUTS,
            lambda inputs: self._embed(inputs["token_ids"], inputs["padding_mask"]))
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    def _embed(self, token_ids, padding_mask, training=None):
        return normalize_embeddings(
            self, [self.token_embedding(token_ids), self.position_embedding(padding_mask)],
            training=training)

    def call_with_states(self, inputs, training=False):
        """The forward pass, also returning every layer's output and attention map.

        Runs the same layers as `call` (shared weights). Returns a dict:
        `sequence_output` [B, T, H]; `hidden_states`: L + 1 tensors [B, T, H] (the
        embedding output, then each block's output); `attention_scores`: L tensors
        [B, heads, T, T], the softmax attention probabilities of each block.
        """
        inputs = model_inputs(self, inputs)
        token_ids = ops.convert_to_tensor(inputs["token_ids"], "int32")
        padding_mask = ops.convert_to_tensor(inputs["padding_mask"], "int32")
        x = self._embed(token_ids, padding_mask, training=training)
        return encoder_states(self.transformer_layers, x, padding_mask, training=training)
