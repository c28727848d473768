"""The Reformer's reversible residual stack (Kitaev et al. 2020 §3, "Reversible
Transformer", after RevNets, Gomez et al. 2017).

The activations are split into two streams (x1, x2), both the embeddings at the input.
Each layer computes

    y1 = x1 + Attention(x2),        y2 = x2 + FeedForward(y1),

and its inputs follow from its outputs: x2 = y2 - FeedForward(y1), x1 = y1 - Attention(x2).
In training the whole stack is one `tf.custom_gradient`: the forward pass keeps only the
final (y1, y2), and the backward pass walks the layers from the top, recomputing each
layer's inputs from its outputs and the layer's gradients with a local tape (§3: "we do not
need to store activations in each layer"). Dropout masks and LSH rotations are functions
of per-layer seeds drawn once per forward pass, so the recomputation replays them exactly.
Activation memory is therefore flat in depth (in graph mode, i.e. `tf.function` / `fit`;
an eager outer tape still records the forward ops). ``reversible=False`` runs the same
layers as plain autodiff (the standard-residual reference of the tests and benchmark).

A mechanism keras-nlp lacks, hence a layer of our own.
"""

import keras

from lmfactory.models.backend import tf
from lmfactory.models.reformer import reformer_attention_utils as utils
from lmfactory.models.reformer.reformer_chunked_feed_forward import ReformerChunkedFeedForward
from lmfactory.models.reformer.reformer_local_attention import ReformerLocalAttention
from lmfactory.models.reformer.reformer_lsh_attention import ReformerLSHAttention

ATTENTION_TYPES = ("local", "lsh")


class ReformerReversibleStack(keras.layers.Layer):
    """`num_layers` reversible layers, layer i with attention
    ``attention_layers[i % len(attention_layers)]`` ("local" or "lsh") and a chunked
    feed-forward.

    Call: ``(hidden [B, T, H], padding_mask [B, T])`` -> (y1, y2), each [B, T, H].
    ``rotations``: optional list (one entry per layer, None for local layers) of LSH
    rotations overriding the drawn ones. ``reversible``: None = the layer's setting.

    Args: the backbone's sizes (see `ReformerBackbone`), plus ``seed`` for the training
        seeds and ``kernel_initializer``.
    """

    def __init__(self, num_layers, attention_layers, hidden_dim, num_heads, head_dim,
                 intermediate_dim, lsh_attn_chunk_length, local_attn_chunk_length,
                 num_hashes, num_buckets, lsh_num_chunks_before=1, lsh_num_chunks_after=0,
                 local_num_chunks_before=1, local_num_chunks_after=0,
                 chunk_size_feed_forward=0, activation="relu", dropout=0.0,
                 lsh_attention_dropout=0.0, local_attention_dropout=0.0,
                 layer_norm_epsilon=1e-12, hash_seed=0, reversible=True, seed=None,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        attention_layers = list(attention_layers)
        unknown = [kind for kind in attention_layers if kind not in ATTENTION_TYPES]
        if unknown or not attention_layers:
            raise ValueError(f"attention_layers must be a non-empty list of {ATTENTION_TYPES}, "
                             f"got {attention_layers}")
        self._args = {key: value for key, value in locals().items()
                      if key not in ("self", "kwargs", "__class__")}
        self._args["attention_layers"] = attention_layers
        self.num_layers, self.reversible = num_layers, reversible
        self.seed_generator = keras.random.SeedGenerator(seed)
        initializer = keras.initializers.get(kernel_initializer)
        common = dict(hidden_dim=hidden_dim, num_heads=num_heads, head_dim=head_dim,
                      dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
                      kernel_initializer=initializer, dtype=self.dtype_policy)
        self.attention_blocks, self.feed_forward_blocks = [], []
        for i in range(num_layers):
            kind = attention_layers[i % len(attention_layers)]
            if kind == "lsh":
                attention = ReformerLSHAttention(
                    chunk_length=lsh_attn_chunk_length, num_hashes=num_hashes,
                    num_buckets=num_buckets, num_chunks_before=lsh_num_chunks_before,
                    num_chunks_after=lsh_num_chunks_after,
                    attention_dropout=lsh_attention_dropout, hash_seed=hash_seed + i,
                    name=f"layer_{i}_lsh_attention", **common)
            else:
                attention = ReformerLocalAttention(
                    chunk_length=local_attn_chunk_length,
                    num_chunks_before=local_num_chunks_before,
                    num_chunks_after=local_num_chunks_after,
                    attention_dropout=local_attention_dropout,
                    name=f"layer_{i}_local_attention", **common)
            self.attention_blocks.append(attention)
            self.feed_forward_blocks.append(ReformerChunkedFeedForward(
                hidden_dim=hidden_dim, intermediate_dim=intermediate_dim,
                chunk_size_feed_forward=chunk_size_feed_forward, activation=activation,
                dropout=dropout, layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=initializer, dtype=self.dtype_policy,
                name=f"layer_{i}_feed_forward"))

    def build(self, input_shape):
        for attention, feed_forward in zip(self.attention_blocks, self.feed_forward_blocks):
            attention.build(input_shape)
            feed_forward.build(input_shape)
        self.built = True

    # ------------------------------------------------------------------ one layer

    def _attention(self, i, x, mask, seeds, rotations, training):
        return self.attention_blocks[i](x, mask, seed=utils.fold_seed(seeds[i], 0),
                                        rotations=rotations[i], training=training)

    def _feed_forward(self, i, x, seeds, training):
        return self.feed_forward_blocks[i](x, seed=utils.fold_seed(seeds[i], 1),
                                           training=training)

    def _forward(self, x1, x2, mask, seeds, rotations, training):
        for i in range(self.num_layers):
            x1 = x1 + self._attention(i, x2, mask, seeds, rotations, training)
            x2 = x2 + self._feed_forward(i, x1, seeds, training)
        return x1, x2

    def _reversible_forward(self, x1, x2, mask, seeds, rotations, training):
        @tf.custom_gradient
        def run(x1, x2):
            y1, y2 = self._forward(x1, x2, mask, seeds, rotations, training)

            def backward(dy1, dy2, variables=None):
                variables = list(variables or [])
                totals = [tf.zeros_like(v) for v in variables]
                out1, out2 = tf.stop_gradient(y1), tf.stop_gradient(y2)
                for i in reversed(range(self.num_layers)):
                    # In a graph nothing else orders the recomputation: without this the
                    # executor may rebuild every layer's inputs (and keep their
                    # activations) before the gradients reach them.
                    with tf.control_dependencies([dy1, dy2]):
                        out1, out2 = tf.identity(out1), tf.identity(out2)
                    with tf.GradientTape() as tape:
                        tape.watch(out1)
                        g = self._feed_forward(i, out1, seeds, training)
                    grads = tape.gradient(g, [out1] + variables, output_gradients=dy2,
                                          unconnected_gradients="zero")
                    in2 = tf.stop_gradient(out2 - g)
                    dy1 = dy1 + grads[0]
                    totals = [t + g_ for t, g_ in zip(totals, grads[1:])]
                    with tf.GradientTape() as tape:
                        tape.watch(in2)
                        f = self._attention(i, in2, mask, seeds, rotations, training)
                    grads = tape.gradient(f, [in2] + variables, output_gradients=dy1,
                                          unconnected_gradients="zero")
                    in1 = tf.stop_gradient(out1 - f)
                    dy2 = dy2 + grads[0]
                    totals = [t + g_ for t, g_ in zip(totals, grads[1:])]
                    out1, out2 = in1, in2
                return (dy1, dy2), totals

            return (y1, y2), backward

        return run(x1, x2)

    def layer_seeds(self, training):
        """Per-layer seeds [2]: fresh ones in training (from the seed generator), fixed
        ones otherwise."""
        if training:
            base = tf.cast(self.seed_generator.next(), "int64")
        else:
            base = tf.constant([0, 0], "int64")
        return [utils.fold_seed(base, i) for i in range(self.num_layers)]

    def call(self, hidden, padding_mask, rotations=None, reversible=None, seeds=None,
             training=False):
        training = bool(training)
        rotations = list(rotations) if rotations is not None else [None] * self.num_layers
        if seeds is None:
            seeds = self.layer_seeds(training)
        reversible = self.reversible if reversible is None else reversible
        if training and reversible:
            return self._reversible_forward(hidden, hidden, padding_mask, seeds, rotations,
                                            training)
        return self._forward(hidden, hidden, padding_mask, seeds, rotations, training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape), tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({key: value for key, value in self._args.items()
                       if key != "kernel_initializer"})
        config["kernel_initializer"] = keras.initializers.serialize(
            keras.initializers.get(self._args["kernel_initializer"]))
        return config
