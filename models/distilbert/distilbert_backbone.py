"""DistilBERT student network (Sanh et al. 2019, "DistilBERT, a distilled version of BERT:
smaller, faster, cheaper and lighter", arXiv:1910.01108)."""

import keras
import keras_nlp

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.encoder_utils import (add_embeddings_normalization, encoder_graph,
                                            encoder_states,
                                            normalize_embeddings, post_ln_encoder_blocks,
                                            require_inputs)

DISTILBERT_BACKBONE_INPUTS = ("token_ids", "padding_mask")


def distilbert_kernel_initializer(stddev=0.02):
    """Normal, stddev 0.02: the released code's `initializer_range` (the student is normally
    initialised from its teacher anyway, §3 "Student initialization")."""
    return keras.initializers.RandomNormal(stddev=stddev)


class DistilBertBackbone(Backbone):
    """The DistilBERT encoder: BERT's Transformer with half the layers, no token types and no
    pooler.

    §3 "Student architecture": "the student - DistilBERT - has the same general architecture
    as BERT. The token-type embeddings and the pooler are removed while the number of layers
    is reduced by a factor of 2." So a token is embedded as the sum of its (WordPiece) token
    embedding and a position embedding, then LayerNorm and dropout; each block is BERT's
    post-LayerNorm block (multi-head self-attention, Add & LayerNorm, a GELU feed-forward
    network, Add & LayerNorm). Positions are learned as in the released model; the released
    code's optional fixed sinusoidal positions (Vaswani et al. 2017 §3.5; interleaved sine on
    even and cosine on odd features, keras-nlp's `SinePositionEncoding`) are
    `sinusoidal_positions=True`.

    Inputs (dict of int32 [batch, seq_len], seq_len variable up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token, 0 = padding).
    Outputs (dict): `sequence_output` [batch, seq_len, H].

    `call_with_states` runs the same layers and also returns every hidden state and
    attention map (used by distillation and feature extraction).

    Args:
        vocabulary_size: WordPiece vocabulary size (30522 for the released English model).
        num_layers: number of Transformer blocks (6 in the released model: BERT-base's 12 / 2).
        num_heads: attention heads.
        hidden_dim: hidden size H.
        intermediate_dim: feed-forward inner size (4H).
        dropout: dropout rate on embeddings, attention probabilities and sub-layer outputs.
        max_sequence_length: number of positions.
        sinusoidal_positions: fixed sinusoidal instead of learned positions.
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
        sinusoidal_positions=False,
        dtype=None,
        **kwargs,
    ):
        check_head_split(hidden_dim, num_heads)
        if sinusoidal_positions and hidden_dim % 2:
            raise ValueError(f"sinusoidal positions need an even hidden_dim, got {hidden_dim}")
        # === Layers ===
        # The masked-LM head ties its output projection to this matrix.
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            embeddings_initializer=distilbert_kernel_initializer(),
            dtype=dtype,
            name="token_embedding",
        )
        if sinusoidal_positions:
            self.position_embedding = keras_nlp.layers.SinePositionEncoding(
                dtype=dtype, name="position_embedding"
            )
        else:
            self.position_embedding = keras_nlp.layers.PositionEmbedding(
                sequence_length=max_sequence_length,
                initializer=distilbert_kernel_initializer(),
                dtype=dtype,
                name="position_embedding",
            )
        add_embeddings_normalization(self, layer_norm_epsilon=1e-12, dropout=dropout,
                                     dtype=dtype)
        # BERT's post-LN blocks, exact (erf) GELU as BERT and the released DistilBERT.
        self.transformer_layers = post_ln_encoder_blocks(
            num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            kernel_initializer=distilbert_kernel_initializer,
            dtype=dtype,
        )

        # === Functional model ===
        inputs, x = encoder_graph(self, DISTILBERT_BACKBONE_INPUTS,
                                  lambda inputs: self._embed(inputs["token_ids"]))
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    def _embed(self, token_ids, training=None):
        tokens = self.token_embedding(token_ids)
        return normalize_embeddings(self, [tokens, self.position_embedding(tokens)],
                                    training=training)

    def call_with_states(self, inputs, training=False):
        """The forward pass, also returning every layer's hidden states and attention maps.

        Calls the very layers of the functional graph (same weights), so `sequence_output`
        equals `self(inputs)["sequence_output"]`.

        Args:
            inputs: dict with `token_ids`, `padding_mask`, int [batch, seq_len] (other keys,
                e.g. `segment_ids` of a BERT batch, are ignored: DistilBERT has none).
            training: whether dropout is active.

        Returns:
            dict with `sequence_output` [B, T, H], `hidden_states`: list of L + 1 tensors
            [B, T, H] (the embedding output after its LayerNorm and dropout, then each
            block's output) and `attention_scores`: list of L tensors [B, A, T, T] (each
            block's softmax attention probabilities; padding keys get probability 0).
        """
        require_inputs("DistilBertBackbone.call_with_states", inputs,
                       DISTILBERT_BACKBONE_INPUTS)
        token_ids = keras.ops.convert_to_tensor(inputs["token_ids"], dtype="int32")
        padding_mask = keras.ops.convert_to_tensor(inputs["padding_mask"], dtype="int32")
        x = self._embed(token_ids, training=training)
        return encoder_states(self.transformer_layers, x, padding_mask, training=training)
