"""The Transformer-XL network (Dai et al. 2019, "Transformer-XL: Attentive Language Models
Beyond a Fixed-Length Context", ACL), without its adaptive softmax."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.backbone import Backbone, check_head_split
from lmfactory.models.task_model import int_inputs
from lmfactory.models.transformer_xl.transformer_xl_adaptive_embedding import (
    AdaptiveEmbedding, check_cutoffs)
from lmfactory.models.transformer_xl.transformer_xl_block import TransformerXLBlock
from lmfactory.models.transformer_xl.transformer_xl_context import TransformerXLContext
from lmfactory.models.transformer_xl.transformer_xl_shared_biases import SharedRelativeBiases

BACKBONE_INPUTS = ("token_ids", "padding_mask")


def _tiny_cutoffs(overrides):
    """The conformance harness shrinks the vocabulary to 100 words; one cutoff inside it
    keeps the adaptive input exercised."""
    return {"cutoffs": [int(overrides.get("vocabulary_size", 100)) // 2]}


class TransformerXLBackbone(Backbone):
    """Segment-level recurrence with relative positional encodings (§3.2, §3.3, App. B).

    * Words: adaptive input (`AdaptiveEmbedding`: ``cutoffs``, ``div_val``, width
      ``embedding_dim`` projected to ``hidden_dim``, times sqrt(hidden_dim)), then dropout.
    * Each of ``num_layers`` `TransformerXLBlock`s attends over [memory; segment] with the
      relative score of §3.3 (content, content-dependent position, global u and v; the
      sinusoid R and the relative shift). u and v are per layer with ``untie_biases`` (the
      published model's ``untie_r``) or one pair for all layers (`SharedRelativeBiases`).
      Post-norm by default; ``pre_norm`` is the reference's ``pre_lnorm``. Dropout on the
      word embeddings, on R, inside each block and on the output, as the reference.
    * Memory (§3.2): the memory of layer n for the next segment is this segment's input to
      layer n (the output of layer n - 1; the word embeddings for n = 1) appended to its
      current memory, the last ``mem_len`` positions kept, under a stop-gradient.
      ``clamp_len`` (> 0) clamps relative distances; ``same_length`` lets every query see
      the same number (``mem_len``) of positions.

    The functional model (``backbone(inputs)``) runs one segment with an empty memory.
    `call_with_memory` runs a segment after given memories and returns the new ones (for
    training and evaluation over a stream); the decoding state carries every decoded
    position's layer inputs (models/generation.py), so generation reuses them as memory.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask` (1 = real token;
        padded keys are masked, so padding on either side leaves real positions unchanged).
    Outputs (dict): `sequence_output` [batch, seq_len, hidden_dim], the last layer's output
        (Hugging Face's ``last_hidden_state``).

    Args:
        vocabulary_size, num_layers, num_heads, hidden_dim (d_model), intermediate_dim
            (d_inner): sizes.
        head_dim: d_head (None: hidden_dim // num_heads).
        embedding_dim: d_embed (None: hidden_dim).
        cutoffs, div_val: adaptive input / softmax clusters (empty: one softmax); cutoffs
            at or past ``vocabulary_size`` are dropped (a learned vocabulary smaller than
            the preset's), the rest must increase.
        mem_len, clamp_len, same_length: memory length, distance clamp (0 = none) and the
            same-length attention option.
        pre_norm: pre-LayerNorm blocks (the reference's pre_lnorm; post-norm by default).
        untie_biases: u, v per layer (True, the published model's untie_r) or shared.
        dropout, attention_dropout: dropout and dropatt.
        tie_weights, tie_projections: the adaptive softmax's tying (read by
            `TransformerXLCausalLM`; tie_projections None = all but the head cluster).
        layer_norm_epsilon: 1e-5 as the reference.
        max_sequence_length: the longest sequence generation and serving take.
        dtype: Keras dtype policy.
    """

    conformance_overrides = staticmethod(_tiny_cutoffs)

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 head_dim=None, embedding_dim=None, cutoffs=(), div_val=1, mem_len=0,
                 clamp_len=0, same_length=False, pre_norm=False, untie_biases=True,
                 dropout=0.1, attention_dropout=0.0, tie_weights=True, tie_projections=None,
                 layer_norm_epsilon=1e-5, max_sequence_length=512, dtype=None, **kwargs):
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if head_dim is None:
            check_head_split(hidden_dim, num_heads)
            head_dim = hidden_dim // num_heads
        if hidden_dim % 2:
            raise ValueError(f"hidden_dim must be even (sines and cosines), got {hidden_dim}")
        embedding_dim = hidden_dim if embedding_dim is None else int(embedding_dim)
        cutoffs = [int(c) for c in cutoffs]
        check_cutoffs(max([vocabulary_size, *cutoffs]) + 1, cutoffs, div_val)
        # A learned vocabulary smaller than the preset's: its clusters past the end vanish.
        cutoffs = [c for c in cutoffs if c < vocabulary_size]
        if tie_projections is not None:
            tie_projections = list(tie_projections)[:len(cutoffs) + 1]
        if int(mem_len) < 0:
            raise ValueError(f"mem_len must be >= 0, got {mem_len}")
        if same_length and int(mem_len) < 1:
            raise ValueError("same_length needs mem_len >= 1")
        tie_projections = None if tie_projections is None else [bool(t) for t in
                                                                 tie_projections]
        weights = keras.initializers.RandomNormal(stddev=0.02)
        projections = keras.initializers.RandomNormal(stddev=0.01)
        # === Layers ===
        self.token_embedding = AdaptiveEmbedding(
            vocabulary_size, embedding_dim, hidden_dim, cutoffs, div_val,
            embeddings_initializer=weights, projection_initializer=projections, dtype=dtype,
            name="token_embedding")
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                      name="embedding_dropout")
        self.context = TransformerXLContext(hidden_dim, clamp_len, mem_len, same_length,
                                            dtype=dtype, name="context")
        self.position_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                     name="position_dropout")
        self.shared_biases = None if untie_biases else SharedRelativeBiases(
            num_heads, head_dim, weights, dtype=dtype, name="shared_biases")
        self.transformer_layers = [
            TransformerXLBlock(num_heads, head_dim, hidden_dim, intermediate_dim, dropout,
                               attention_dropout, pre_norm, untie_biases, layer_norm_epsilon,
                               weights, dtype=dtype, name=f"transformer_layer_{index}")
            for index in range(num_layers)]
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype, name="output_dropout")

        # === Functional model: one segment, empty memory ===
        inputs = int_inputs(BACKBONE_INPUTS)
        x = self.embedding_dropout(self.token_embedding(inputs["token_ids"]))
        position, mask = self.context(inputs["token_ids"], inputs["padding_mask"])
        position = self.position_dropout(position)
        biases = None if self.shared_biases is None else self.shared_biases(x)
        for block in self.transformer_layers:
            x = block(x, position, mask, biases=biases)
        x = self.output_dropout(x)
        super().__init__(inputs=inputs, outputs={"sequence_output": x}, dtype=dtype,
                         arguments=locals(), **kwargs)

    # ------------------------------------------------------------------ memory

    def empty_memory(self, batch_size):
        """Zero-length memories: ``num_layers`` tensors [batch, 0, hidden_dim]."""
        return [ops.zeros((batch_size, 0, self.hidden_dim), self.compute_dtype)
                for _ in self.transformer_layers]

    def call_with_memory(self, token_ids, memory=None, padding_mask=None,
                         valid_memory_length=None, training=False):
        """Runs one segment after ``memory`` and returns the new memory (§3.2).

        Args:
            token_ids: int [B, T].
            memory: ``num_layers`` tensors [B, M, hidden_dim] (layer n's: the inputs of layer
                n over the previous positions), or None (an empty memory, M = 0).
            padding_mask: [B, T], 1 = real token (None: all real).
            valid_memory_length: how many of the M slots (the last ones) hold states (None:
                all); the rest are masked, e.g. a fixed-size memory not yet full.
            training: dropout on.

        Returns:
            dict: `sequence_output` [B, T, hidden_dim]; `memory`: per layer the last
            ``mem_len`` of [memory; this segment's layer inputs], under a stop-gradient;
            `hidden_states`: the ``num_layers`` layer inputs of this segment.
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        if len(token_ids.shape) != 2:
            raise ValueError(f"token_ids must be [batch, seq_len], got shape "
                             f"{tuple(token_ids.shape)}")
        if memory is None:
            memory = self.empty_memory(ops.shape(token_ids)[0])
        if len(memory) != len(self.transformer_layers):
            raise ValueError(f"memory needs one tensor per layer ({len(self.transformer_layers)}),"
                             f" got {len(memory)}")
        memory = [ops.stop_gradient(ops.cast(m, self.compute_dtype)) for m in memory]
        x = self.embedding_dropout(self.token_embedding(token_ids), training=training)
        position, mask = self.context(token_ids, padding_mask,
                                      memory_length=ops.shape(memory[0])[1],
                                      valid_memory_length=valid_memory_length)
        position = self.position_dropout(position, training=training)
        biases = None if self.shared_biases is None else self.shared_biases(x)
        hidden_states = []
        for block, layer_memory in zip(self.transformer_layers, memory):
            hidden_states.append(x)
            x = block(x, position, mask, memory=layer_memory, biases=biases, training=training)
        x = self.output_dropout(x, training=training)
        return {"sequence_output": x, "hidden_states": hidden_states,
                "memory": [self.update_memory(m, h) for m, h in zip(memory, hidden_states)]}

    def update_memory(self, memory, hidden):
        """The last ``mem_len`` positions of [memory; hidden], gradient stopped (§3.2 SG)."""
        joined = ops.concatenate([memory, ops.cast(hidden, memory.dtype)], axis=1)
        total = ops.shape(joined)[1]
        start = ops.maximum(total - self.mem_len, 0)
        return ops.stop_gradient(joined[:, start:])

    # ------------------------------------------------------------------ decoding state

    def initial_state(self, batch_size, max_length):
        """[batch, num_layers, max_length, hidden_dim] zeros: slot p of layer n will hold
        the input of layer n at position p (models/generation.py)."""
        return ops.zeros((batch_size, len(self.transformer_layers), max_length,
                          self.hidden_dim), self.compute_dtype)

    def call_with_state(self, token_ids, state, index):
        """Runs ``token_ids`` [B, n] at positions ``index, ...`` with every earlier decoded
        position as memory, and writes their layer inputs at slots ``index, ...``.

        The buffer is rolled so that its last slot is position ``index - 1`` (relative
        distances then follow from the slot, as the shift needs); slots of positions < 0
        (not yet decoded) are masked. Returns (hidden [B, n, hidden_dim], state).
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        max_length = state.shape[2] if state.shape[2] is not None else ops.shape(state)[2]
        x = self.token_embedding(token_ids)
        position, mask = self.context(token_ids, None, memory_length=max_length,
                                      valid_memory_length=index)
        biases = None if self.shared_biases is None else self.shared_biases(x)
        layers = []
        for layer, block in enumerate(self.transformer_layers):
            buffer = state[:, layer]
            memory = ops.roll(buffer, -index, axis=1)
            layers.append(ops.slice_update(buffer, [0, index, 0], ops.cast(x, buffer.dtype)))
            x = block(x, position, mask, memory=memory, biases=biases)
        return x, ops.stack(layers, axis=1)


__all__ = ["BACKBONE_INPUTS", "TransformerXLBackbone"]
