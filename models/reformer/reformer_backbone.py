"""The Reformer decoder network (Kitaev, Kaiser & Levskaya 2020, "Reformer: The Efficient
Transformer"), as a causal LM (the reference's ReformerModelWithLMHead with
``is_decoder=True``), without its output layer.

Token embeddings (dropout) plus axial position embeddings, then `num_layers` reversible
layers (§3: y1 = x1 + Attention(x2), y2 = x2 + FeedForward(y1), both streams starting from
the embeddings), each with LSH attention (§2) or local chunked attention
(`attention_layers`, cycled over the layers, e.g. ["local", "lsh"]) and a chunked
feed-forward (§3); the two streams are concatenated, layer-normalised over 2 * hidden_dim
and dropped out. Pre-LN sub-blocks (a LayerNorm at the input of each attention and
feed-forward), no biases in the attention projections, N(0, 0.02) kernels and embeddings,
N(0, 1) axial tables, as the reference.
"""

import keras
from keras import ops

from lmfactory.models.backbone import Backbone
from lmfactory.models.backend import tf
from lmfactory.models.reformer.reformer_axial_position_embedding import \
    ReformerAxialPositionEmbedding
from lmfactory.models.reformer.reformer_reversible_stack import ReformerReversibleStack


def reformer_conformance_overrides(overrides):
    """The tiny configuration of the conformance harness (tests/conformance/tiny.py reads
    this hook): LSH chunks as long as the longest tiny input, so that LSH layers attend
    within one chunk. Why: the harness checks strict causality, and with several chunks LSH
    attention is not strictly causal (§2: which keys share a query's chunk depends on the
    buckets, hence on the tokens, of later positions through the sort); padding invariance
    holds either way (padded positions go to their own bucket and are masked). Local
    chunks stay short (4) so the chunked path is exercised; axial shape and widths follow
    the tiny positions and width. The LSH mechanism itself is tested in
    tests/test_reformer.py."""
    positions = overrides.get("max_sequence_length", 32)
    hidden = overrides.get("hidden_dim", 16)
    columns = 8
    return {"lsh_attn_chunk_length": positions, "local_attn_chunk_length": 4,
            "axial_pos_shape": [-(-positions // columns), columns],
            "axial_pos_embds_dim": [hidden // 2, hidden - hidden // 2],
            "num_buckets": 4, "head_dim": hidden // overrides.get("num_heads", 2)}


class ReformerBackbone(Backbone):
    """The Reformer without its language-model head.

    Inputs (dict of int32 [batch, seq_len], seq_len up to `max_sequence_length`):
        `token_ids`, `padding_mask` (1 = real token).
    Outputs (dict): `sequence_output` [batch, seq_len, 2 * hidden_dim], the two reversible
        streams concatenated after the final LayerNorm (the reference's last_hidden_state).

    Args:
        vocabulary_size: tokens (258 for byte-level enwik8: 256 bytes + 2).
        num_layers: reversible layers.
        num_heads: attention heads; head_dim: their size (num_heads * head_dim may differ
            from hidden_dim, as in the reference).
        hidden_dim: width d_model of each of the two streams.
        intermediate_dim: feed-forward inner width.
        attention_layers: attention kinds ("local" / "lsh") cycled over the layers.
        max_sequence_length: longest input; axial_pos_shape (n1, n2) with n1 * n2 >= it and
            axial_pos_embds_dim (d1, d2) summing to hidden_dim: the axial position tables.
        lsh_attn_chunk_length, num_hashes, num_buckets (even), lsh_num_chunks_before /
            _after: LSH attention (§2).
        local_attn_chunk_length, local_num_chunks_before / _after: local attention.
        chunk_size_feed_forward: feed-forward chunk (0: unchunked).
        activation: feed-forward activation.
        dropout: on embeddings, sub-block outputs, feed-forward, final output;
            lsh_attention_dropout, local_attention_dropout: on attention probabilities.
        layer_norm_epsilon: LayerNorm epsilon (1e-12 as the reference).
        hash_seed: seed of the LSH rotations used in inference (training draws new ones
            every step, §2).
        reversible: run the stack's backward pass as a reversible recomputation (§3); False
            stores activations as a standard residual network.
        dtype: Keras dtype policy.
    """

    conformance_overrides = staticmethod(reformer_conformance_overrides)

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 head_dim=None, attention_layers=("local", "lsh"), max_sequence_length=512,
                 axial_pos_shape=(16, 32), axial_pos_embds_dim=None,
                 lsh_attn_chunk_length=64, local_attn_chunk_length=64, num_hashes=1,
                 num_buckets=16, lsh_num_chunks_before=1, lsh_num_chunks_after=0,
                 local_num_chunks_before=1, local_num_chunks_after=0,
                 chunk_size_feed_forward=0, activation="relu", dropout=0.05,
                 lsh_attention_dropout=0.0, local_attention_dropout=0.05,
                 layer_norm_epsilon=1e-12, hash_seed=0, reversible=True, dtype=None,
                 **kwargs):
        head_dim = head_dim if head_dim is not None else hidden_dim // num_heads
        attention_layers = list(attention_layers)
        axial_pos_shape = [int(n) for n in axial_pos_shape]
        if axial_pos_embds_dim is None:
            axial_pos_embds_dim = [hidden_dim // 2, hidden_dim - hidden_dim // 2]
        axial_pos_embds_dim = [int(d) for d in axial_pos_embds_dim]
        if sum(axial_pos_embds_dim) != hidden_dim:
            raise ValueError(f"axial_pos_embds_dim {axial_pos_embds_dim} must sum to "
                             f"hidden_dim ({hidden_dim})")
        if len(axial_pos_shape) != 2 or axial_pos_shape[0] * axial_pos_shape[1] \
                < max_sequence_length:
            raise ValueError(f"axial_pos_shape {axial_pos_shape} must be two factors whose "
                             f"product covers max_sequence_length ({max_sequence_length})")
        initializer = keras.initializers.RandomNormal(stddev=0.02)
        # === Layers ===
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size, hidden_dim, embeddings_initializer=initializer, dtype=dtype,
            name="token_embedding")
        self.position_embedding = ReformerAxialPositionEmbedding(
            axial_pos_shape, axial_pos_embds_dim, dtype=dtype, name="position_embedding")
        self.embeddings_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                       name="embeddings_dropout")
        self.reversible_stack = ReformerReversibleStack(
            num_layers=num_layers, attention_layers=attention_layers, hidden_dim=hidden_dim,
            num_heads=num_heads, head_dim=head_dim, intermediate_dim=intermediate_dim,
            lsh_attn_chunk_length=lsh_attn_chunk_length,
            local_attn_chunk_length=local_attn_chunk_length, num_hashes=num_hashes,
            num_buckets=num_buckets, lsh_num_chunks_before=lsh_num_chunks_before,
            lsh_num_chunks_after=lsh_num_chunks_after,
            local_num_chunks_before=local_num_chunks_before,
            local_num_chunks_after=local_num_chunks_after,
            chunk_size_feed_forward=chunk_size_feed_forward, activation=activation,
            dropout=dropout, lsh_attention_dropout=lsh_attention_dropout,
            local_attention_dropout=local_attention_dropout,
            layer_norm_epsilon=layer_norm_epsilon, hash_seed=hash_seed,
            reversible=reversible, kernel_initializer=initializer, dtype=dtype,
            name="reversible_stack")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="layer_norm")
        self.output_dropout = keras.layers.Dropout(dropout, dtype=dtype,
                                                   name="output_dropout")

        # === Functional model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ("token_ids", "padding_mask")}
        outputs = {"sequence_output": self._sequence_output(inputs)}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, arguments=locals(),
                         **kwargs)

    def _sequence_output(self, inputs, training=None, rotations=None, reversible=None):
        token_ids, padding_mask = inputs["token_ids"], inputs["padding_mask"]
        x = self.embeddings_dropout(self.token_embedding(token_ids), training=training)
        x = x + self.position_embedding(token_ids)
        kwargs = {} if rotations is None else {"rotations": rotations}
        if reversible is not None:
            kwargs["reversible"] = reversible
        y1, y2 = self.reversible_stack(x, padding_mask, training=training, **kwargs)
        hidden = self.layer_norm(ops.concatenate([y1, y2], axis=-1))
        return self.output_dropout(hidden, training=training)

    @property
    def sequence_output_dim(self):
        """Width of `sequence_output`: the two streams, 2 * hidden_dim."""
        return 2 * self.hidden_dim

    def call_with_rotations(self, inputs, rotations, training=False, reversible=None):
        """The forward pass with given LSH rotations (a list with one entry per layer:
        [num_heads, head_dim, num_hashes, num_buckets / 2] for LSH layers, None for local
        ones), e.g. the reference implementation's draws in the parity test. Returns the
        outputs dict."""
        inputs = {key: tf.convert_to_tensor(value) for key, value in inputs.items()}
        return {"sequence_output": self._sequence_output(
            inputs, training=training, rotations=rotations, reversible=reversible)}

    # === Decoding-state protocol (models/generation.py) ===
    # LSH buckets depend on the whole prefix through the sort, so the state is the token
    # ids decoded so far and every step re-runs the prefix (no key/value or bucket cache).

    def initial_state(self, batch_size, max_length, **context):
        """The decoding state: the token ids so far, int32 [batch, max_length]."""
        return ops.zeros((batch_size, max_length), dtype="int32")

    def call_with_state(self, token_ids, state, index):
        """Writes ``token_ids`` [B, n] at positions index.. of the state, re-runs the
        prefix [0, index + n) and returns (hidden [B, n, 2 * hidden_dim], state)."""
        token_ids = ops.cast(token_ids, "int32")
        # A static n (1 per step) keeps the step's output shape known inside the sampler.
        n = token_ids.shape[1] if token_ids.shape[1] is not None else ops.shape(token_ids)[1]
        state = ops.slice_update(state, (0, index), token_ids)
        prefix = state[:, :index + n]
        hidden = self({"token_ids": prefix, "padding_mask": ops.ones_like(prefix)},
                      training=False)["sequence_output"]
        hidden = ops.slice(hidden, (0, index, 0),
                           (ops.shape(hidden)[0], n, self.sequence_output_dim))
        return hidden, state
