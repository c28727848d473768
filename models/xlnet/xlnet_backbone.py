"""XLNet network (Yang et al. 2019, "XLNet: Generalized Autoregressive Pretraining for
Language Understanding", NeurIPS).

§2.3 two-stream self-attention (content stream h, query stream g started from a learned
vector w), §2.4 Transformer-XL's relative positional attention and segment recurrence
(memory), §2.5 relative segment encodings; post-LN blocks, GELU, dropout as the reference
code (`modeling.transformer_xl`). Weights are laid out as the reference (and Hugging Face's
XLNetModel) so `xlnet_converters` copies them one to one.
"""

import keras
from keras import ops

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.xlnet.xlnet_attention_inputs import XLNetAttentionInputs
from lmfactory.models.xlnet.xlnet_block import XLNetBlock
from lmfactory.models.xlnet.xlnet_stream_embedding import XLNetStreamEmbedding

INPUTS = ("token_ids", "padding_mask", "segment_ids")


def _check_rank3(name, value, length):
    shape = tuple(value.shape)
    if len(shape) != 3 or (shape[2] is not None and length is not None
                           and shape[2] != length):
        raise ValueError(f"{name} must be [batch, rows, {length}] (the last axis the "
                         f"sequence), got shape {shape}")


class XLNetBackbone(Backbone):
    """XLNet encoder. Bidirectional when fine-tuned (no permutation mask: every position
    sees every real token), permutation-LM pre-trained through `call_two_stream`.

    The functional graph (inputs `token_ids`, `padding_mask`, `segment_ids`, int32
    [B, T]) runs the content stream only and returns ``{"sequence_output": h}`` [B, T, H],
    Hugging Face's ``last_hidden_state`` without a target mapping. XLNet's own layout puts
    `<sep> <cls>` at the end and pads on the left; relative attention makes the outputs of
    real tokens independent of where the padding is.

    `call_two_stream(inputs, permutation_mask=..., target_mapping=..., memory=...)` runs
    both streams (§2.3) with Transformer-XL memory (§2.4) through the same layers.

    Args:
        vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim: sizes.
        dropout: the one dropout rate of the reference (0.1).
        activation: the feed-forward activation, "gelu" (see `XLNetBlock`).
        layer_norm_epsilon: 1e-12 (reference).
        clamp_len: relative distances beyond it share an encoding (-1: no clamping).
        bi_data: the reference's bidirectional data pipeline: the second half of a batch
            reads the relative distances negated (pre-training option, §3.1 / code).
        memory_length: how many previous content states `call_two_stream` returns as the
            next segment's memory (the reference's `mem_len`; 0: all of them).
        dtype: Keras dtype policy.
    """

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, activation="gelu", layer_norm_epsilon=1e-12, clamp_len=-1,
                 bi_data=False, memory_length=0, dtype=None, **kwargs):
        check_head_split(hidden_dim, num_heads)
        # === Layers ===
        self.stream_embedding = XLNetStreamEmbedding(vocabulary_size, hidden_dim, dtype=dtype,
                                                     name="stream_embedding")
        self.token_embedding = self.stream_embedding.token_embedding  # tied output layer
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                       name="embeddings_dropout")
        self.query_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="query_dropout")
        self.position_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                     name="position_dropout")
        self.attention_inputs = XLNetAttentionInputs(hidden_dim, clamp_len=clamp_len,
                                                     bi_data=bi_data, dtype=dtype,
                                                     name="attention_inputs")
        self.transformer_layers = [
            XLNetBlock(hidden_dim, num_heads, intermediate_dim, dropout=dropout,
                       activation=activation, layer_norm_epsilon=layer_norm_epsilon,
                       dtype=dtype, name=f"transformer_layer_{index}")
            for index in range(num_layers)]
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="output_dropout")

        # === Functional model: the content stream ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUTS}
        content = self.embeddings_dropout(self.stream_embedding(inputs["token_ids"]))
        extras = self.attention_inputs(inputs["padding_mask"], inputs["segment_ids"])
        position = self.position_dropout(extras["position_encoding"])
        for layer in self.transformer_layers:
            content = layer(content, content_allowed=extras["content_allowed"],
                            position_encoding=position,
                            segment_matrix=extras["segment_matrix"])
        outputs = {"sequence_output": self.output_dropout(content)}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def call_two_stream(self, inputs, permutation_mask=None, target_mapping=None,
                        memory=None, training=False):
        """Both streams of §2.3 with memory (§2.4), through the functional graph's layers.

        Args:
            inputs: dict of `token_ids`, `padding_mask`, `segment_ids` [B, T].
            permutation_mask: [B, T, T] or None; 1 at [b, i, j]: i may not attend to j.
            target_mapping: [B, K, T] or None; one-hot rows, the positions predicted. The
                query stream runs only with one (as Hugging Face's XLNetModel).
            memory: None or a list of `num_layers` tensors [B, M, H] (no gradient flows
                into them), the previous segment's `memory` output.
        Returns a dict: `sequence_output` (the content stream [B, T, H]), `query_output`
            ([B, K, H], Hugging Face's last_hidden_state given a target mapping) when a
            target mapping is given, and `memory`: per layer the states it read
            (memory and this segment), the last `memory_length` kept, stop-gradient.
        """
        token_ids = ops.convert_to_tensor(inputs["token_ids"])
        length = token_ids.shape[1]
        if permutation_mask is not None:
            permutation_mask = ops.convert_to_tensor(permutation_mask)
            _check_rank3("permutation_mask", permutation_mask, length)
        if target_mapping is not None:
            target_mapping = ops.convert_to_tensor(target_mapping)
            _check_rank3("target_mapping", target_mapping, length)
        if memory is not None and len(memory) != len(self.transformer_layers):
            raise ValueError(f"memory must hold one tensor per layer "
                             f"({len(self.transformer_layers)}), got {len(memory)}")
        query = None
        if target_mapping is None:
            content = self.stream_embedding(token_ids)
        else:
            content, query = self.stream_embedding(token_ids, target_mapping)
            query = self.query_dropout(query, training=training)
        content = self.embeddings_dropout(content, training=training)
        extras = self.attention_inputs(inputs["padding_mask"], inputs["segment_ids"],
                                       permutation_mask=permutation_mask,
                                       memory=None if memory is None else memory[0])
        position = self.position_dropout(extras["position_encoding"], training=training)
        new_memory = []
        for index, layer in enumerate(self.transformer_layers):
            previous = None if memory is None else ops.stop_gradient(memory[index])
            new_memory.append(self._cache(content, previous))
            outputs = layer(content, query, content_allowed=extras["content_allowed"],
                            query_allowed=extras["query_allowed"],
                            position_encoding=position,
                            segment_matrix=extras["segment_matrix"], memory=previous,
                            target_mapping=target_mapping, training=training)
            content, query = outputs if query is not None else (outputs, None)
        result = {"sequence_output": self.output_dropout(content, training=training),
                  "memory": new_memory}
        if query is not None:
            result["query_output"] = self.output_dropout(query, training=training)
        return result

    def _cache(self, content, previous):
        """The reference's `_cache_mem`: memory + this segment's states, the last
        `memory_length` of them (all with 0), without gradient."""
        states = content if previous is None else ops.concatenate([previous, content], axis=1)
        if self.memory_length > 0:
            states = states[:, -self.memory_length:]
        return ops.stop_gradient(states)
