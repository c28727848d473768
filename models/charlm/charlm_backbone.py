"""The character Transformer network of Al-Rfou et al. 2018, "Character-Level Language
Modeling with Deeper Self-Attention" (AAAI 2019, arXiv:1808.04444)."""

import math

import keras
import keras_nlp
from keras import ops

from lmfactory.models import decoder_cache
from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.decoder_utils import (DECODER_INPUTS, decoder_blocks, decoder_graph,
                                            decoder_states)
from lmfactory.models.encoder_utils import require_inputs


class CharTransformerBackbone(decoder_cache.KeyValueCacheDecoding, Backbone):
    """A deep causal Transformer over characters, without its output classifiers.

    §2: `num_layers` Transformer layers, each a multi-head self-attention sub-layer followed
    by a feed-forward network of two fully connected sub-layers (Vaswani et al. 2017), with
    causal attention: every position attends only leftward, so a prediction is conditioned
    on earlier characters only (keras-nlp's `TransformerDecoder` without cross-attention
    applies this mask, and the padding mask, itself).

    §2, "Positional Embeddings": the sinusoidal timing signal of the basic Transformer,
    added once before the first layer, is replaced by a learned per-layer positional
    embedding added to the input of EACH Transformer layer: a unique `hidden_dim` vector
    for each of the `max_sequence_length` context positions within each of the
    `num_layers` layers (L x N x 512 extra parameters for T64). Here one keras-nlp
    `PositionEmbedding` per layer, `position_embeddings[i]`, is added to the input of
    `transformer_layers[i]`; positions cannot extend past `max_sequence_length` (the paper
    does not need to generalise to longer contexts).

    The paper leaves the layer internals to Vaswani et al. and the tensor2tensor library it
    used; from those: token embeddings multiplied by sqrt(hidden_dim) (Vaswani §3.4) and
    drawn from N(0, hidden_dim^-1/2) like the positional embeddings, dropout on the
    embeddings and on each sub-layer's output before its residual sum, ReLU in the
    feed-forward network, and tensor2tensor's default LayerNorm placement: each sub-layer
    normalises its input (`normalize_first=True`) and a final LayerNorm follows the last
    layer. keras-nlp's `TransformerDecoder` applies its single `dropout` rate to the
    attention probabilities too. §3: dropout 0.55 in the published models.

    The output classifier is the transposed token embedding (`token_embedding(h,
    reverse=True)`, tensor2tensor's shared embedding and softmax weights); the per-layer
    classifiers of the auxiliary losses (§2, "Auxiliary Losses") live in the task model
    (`CharTransformerLM`), which reads every layer's output from `call_with_states`.

    Inputs (dict of int32 [batch, seq_len], seq_len <= `max_sequence_length`):
        `token_ids` (byte ids, see `charlm_vocabulary`), `padding_mask` (1 = real).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim], after the final
        LayerNorm.

    Args:
        vocabulary_size: number of character ids (256: bytes).
        num_layers: number of Transformer layers (12 for T12, 64 for T64).
        num_heads: attention heads (8).
        hidden_dim: model width (512).
        intermediate_dim: inner size of the feed-forward network (2048).
        dropout: dropout rate (0.55 in the paper).
        max_sequence_length: context length L, the number of learned positions per layer
            (512).
        layer_norm_epsilon: LayerNorm epsilon (tensor2tensor's 1e-6).
        dtype: Keras dtype policy for the layers, e.g. "mixed_bfloat16".
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        dropout=0.55,
        max_sequence_length=512,
        layer_norm_epsilon=1e-6,
        dtype=None,
        **kwargs,
    ):
        for key, value in (("vocabulary_size", vocabulary_size), ("num_layers", num_layers),
                           ("num_heads", num_heads), ("hidden_dim", hidden_dim),
                           ("intermediate_dim", intermediate_dim),
                           ("max_sequence_length", max_sequence_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive integer, got {value!r}")
        check_head_split(hidden_dim, num_heads)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout!r}")
        embedding_initializer = keras.initializers.RandomNormal(stddev=hidden_dim ** -0.5)

        # === Layers ===
        self.token_embedding = keras_nlp.layers.ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            tie_weights=True,
            embeddings_initializer=embedding_initializer,
            dtype=dtype,
            name="token_embedding",
        )
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        self.position_embeddings = [
            keras_nlp.layers.PositionEmbedding(
                sequence_length=max_sequence_length,
                initializer=embedding_initializer,
                dtype=dtype,
                name=f"position_embedding_{i}",
            )
            for i in range(num_layers)
        ]
        self.transformer_layers = decoder_blocks(
            num_layers,
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            activation="relu",
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=True,
            dtype=dtype,
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="layer_norm"
        )

        # === Functional model ===
        inputs, outputs = decoder_graph(
            self,
            embed=lambda token_ids: self.embeddings_dropout(self._embed(token_ids)),
            block_input=self._add_position_embedding,
            final_layer_norm=self.layer_norm,
        )
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def _embed(self, token_ids):
        """Token embeddings scaled by sqrt(hidden_dim) (Vaswani et al. 2017 §3.4)."""
        return self.token_embedding(token_ids) * math.sqrt(self.token_embedding.output_dim)

    def _add_position_embedding(self, i, x):
        """§2 "Positional Embeddings": layer i's own learned embedding of each position,
        added to the input of layer i."""
        return ops.add(x, self.position_embeddings[i](x))

    def _check_length(self, token_ids):
        length = token_ids.shape[-1]
        if isinstance(length, int) and length > self.max_sequence_length:
            raise ValueError(f"Sequences of {length} characters exceed the model's context "
                             f"max_sequence_length={self.max_sequence_length} (it has a "
                             f"learned embedding per position)")

    def call_with_states(self, inputs, training=False):
        """The forward pass, also returning the output of every layer.

        Calls the very layers of the functional graph (same weights), so `sequence_output`
        equals `self(inputs)`'s. The intermediate-layer losses (§2) classify
        `hidden_states[l]`, the output of layer l.

        Args:
            inputs: dict with `token_ids`, `padding_mask`, int [batch, seq_len].
            training: whether dropout is active.

        Returns:
            dict with `sequence_output` [B, T, H] (after the final LayerNorm) and
            `hidden_states`: list of L + 1 tensors [B, T, H], the scaled token embeddings
            (after dropout, before layer 1's positional embedding) then the output of each
            of the L layers (the residual stream, before any LayerNorm).
        """
        require_inputs("CharTransformerBackbone.call_with_states", inputs, DECODER_INPUTS)
        token_ids = ops.convert_to_tensor(inputs["token_ids"], dtype="int32")
        padding_mask = ops.convert_to_tensor(inputs["padding_mask"], dtype="int32")
        self._check_length(token_ids)
        x = self.embeddings_dropout(self._embed(token_ids), training=training)
        states = decoder_states(self.transformer_layers, x, padding_mask, training=training,
                                block_input=self._add_position_embedding)
        states["sequence_output"] = self.layer_norm(states["sequence_output"])
        return states

    def embed_positions(self, token_ids, index):
        """The characters' embeddings only: every layer adds its own positional embeddings
        (`block_input_at`)."""
        del index
        return self._embed(ops.convert_to_tensor(token_ids, dtype="int32"))

    def block_input_at(self, index):
        """Each layer adds its own positional embeddings of the positions ``index, ...``
        (§2, "Positional Embeddings"), so the cached keys and values of layer i were
        computed from inputs that carried layer i's embedding of their position."""
        def add_position_embedding(i, x):
            return ops.add(x, self.position_embeddings[i](x, start_index=index))

        return add_position_embedding
