"""Loss and metric pieces shared by the task models' `compute_loss`.

Every task model computes its whole loss itself (it compiles with an optimizer and no
`loss`). Under a `tf.distribute` strategy each replica returns its share of the GLOBAL
batch's loss: sums run over the replica's examples and are divided by counts summed over
all replicas (`sum_over_replicas`), so the gradients summed across replicas are exactly
those of one device seeing the whole batch, even when replicas hold different numbers of
real predictions. Outside a strategy (or with one replica) every helper is the plain mean.

* `masked_lm_loss`: BERT's masked-LM loss (Devlin et al. 2019 Appendix A.2, the released
  `get_masked_lm_output`): the mean negative log-likelihood over the real predictions,
  weighted by `masked_lm_weights` (padding predictions carry weight 0),
  ``sum(w * nll) / (sum(w) + 1e-5)``.
* `sentence_loss`: the mean negative log-likelihood of a sentence-level classifier (BERT's
  next-sentence prediction, ALBERT's sentence-order prediction).
* `masked_lm_objective` / `sentence_objective`: the same plus their metrics.
* `next_token_loss`: the language models' mean NLL of the target ids over the real
  positions (causal LMs, encoder-decoders).
* `track_loss`: a loss metric records the global value, not a replica's share.
* `with_regularization`: adds the losses that layers register (`model.losses`,
  e.g. kernel regularisers a caller adds), averaged over replicas the way Keras's own
  `compute_loss` does.
* `SparseCategoricalAccuracy`: keras' metric of that name with a plain TensorFlow argmax
  (the masked-LM accuracy over vocabulary logits).
* `sparse_softmax_nll`: the per-position negative log-likelihood -log softmax(logits)[label]
  that every loss here is built on, computed in fewer passes over the [N, V] logits than
  TensorFlow's fused cross-entropy kernel.
"""

import functools

import keras
from keras import ops

from lmfactory.models import backend
from lmfactory.models.backend import tf


def _softmax_nll_rows_tf(logits, labels):
    """-log softmax(logits)[label] for logits [N, V] (float32) and labels [N] (int32), and
    its gradient softmax(logits) - onehot(label) (module docstring of `sparse_softmax_nll`).
    TensorFlow backend only; wrapped in `tf.custom_gradient` on first use."""
    shift = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
    shifted = logits - shift
    exponentials = tf.exp(shifted)
    totals = tf.reduce_sum(exponentials, axis=-1)
    nll = tf.math.log(totals) - tf.gather(shifted, labels, batch_dims=1)

    def gradient(upstream):
        scaled = exponentials * (upstream / totals)[:, None]
        rows = tf.range(tf.shape(labels)[0], dtype=labels.dtype)
        return tf.tensor_scatter_nd_sub(scaled, tf.stack([rows, labels], axis=1),
                                        upstream), None

    return nll, gradient


@functools.cache
def _softmax_nll_rows():
    """`_softmax_nll_rows_tf` with its gradient, made on first use (importing this module
    needs no TensorFlow)."""
    return tf.custom_gradient(_softmax_nll_rows_tf)


def _sparse_softmax_nll_ops(labels, logits):
    """`sparse_softmax_nll` on a backend other than TensorFlow, in `keras.ops`: XLA fuses
    the log-sum-exp and the gather, and autodiff gives the same gradient."""
    logits = ops.cast(logits, "float32")
    labels = ops.cast(labels, "int32")
    if len(labels.shape) == len(logits.shape) and labels.shape[-1] == 1:
        labels = ops.squeeze(labels, -1)
    picked = ops.take_along_axis(logits, ops.expand_dims(labels, -1), axis=-1)[..., 0]
    return ops.logsumexp(logits, axis=-1) - picked


def sparse_softmax_nll(labels, logits):
    """Per-position negative log-likelihood of integer ``labels`` [...] under ``logits``
    [..., V]: ``logsumexp(logits) - logits[label]`` (the cross-entropy of BERT's masked LM,
    Devlin et al. 2019 Appendix A.2, and of the language models' next-token prediction,
    GPT-1 §3.1 L1), as float32 [...] with the gradient ``softmax(logits) - onehot(label)``.

    Why not keras' `sparse_categorical_crossentropy` (which keras-nlp's tasks use): on the
    TensorFlow backend it runs TensorFlow's `SparseSoftmaxCrossEntropyWithLogits` kernel,
    which writes the full [N, V] gradient in the forward pass and is scaled by the upstream
    gradient in another pass; on a CPU it took about 2.4x the CPU time of this version at
    BERT's masked-LM shape (640 x 30522: 74 vs 31 ms, benchmarks/pretraining.py). Here the
    forward pass keeps exp(logits - max) and the backward pass is one scaling pass plus a
    scatter of the N label entries. The values agree to float rounding
    (tests/test_task_losses.py). Labels out of [0, V) fail as TensorFlow's gather does.
    On another backend it is the plain log-sum-exp form (`_sparse_softmax_nll_ops`)."""
    if not backend.is_tensorflow():
        return _sparse_softmax_nll_ops(labels, logits)
    logits = tf.convert_to_tensor(logits)
    if logits.dtype != tf.float32:
        logits = tf.cast(logits, tf.float32)
    labels = tf.cast(tf.convert_to_tensor(labels), tf.int32)
    if labels.shape.rank == logits.shape.rank and labels.shape[-1] == 1:
        labels = tf.squeeze(labels, -1)
    nll = _softmax_nll_rows()(tf.reshape(logits, (-1, tf.shape(logits)[-1])),
                            tf.reshape(labels, (-1,)))
    return tf.reshape(nll, tf.shape(labels))


def argmax_accuracy(y_true, y_pred):
    """1.0 where the integer label ``y_true`` ([...] or [..., 1]) is the argmax of the
    logits or probabilities ``y_pred`` [..., classes] (first maximum on ties), else 0.0."""
    if not backend.is_tensorflow():
        y_true, y_pred = ops.convert_to_tensor(y_true), ops.convert_to_tensor(y_pred)
        if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
            y_true = ops.squeeze(y_true, -1)
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        return ops.cast(ops.equal(ops.cast(y_true, "int32"), predicted), "float32")
    y_true, y_pred = tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred)
    if y_true.shape.rank == y_pred.shape.rank and y_true.shape[-1] == 1:
        y_true = tf.squeeze(y_true, -1)
    predicted = tf.math.argmax(y_pred, axis=-1, output_type=tf.int32)
    return tf.cast(tf.equal(tf.cast(y_true, tf.int32), predicted), "float32")


@keras.saving.register_keras_serializable(package="lmfactory")
class SparseCategoricalAccuracy(keras.metrics.MeanMetricWrapper):
    """keras' `SparseCategoricalAccuracy` (the weighted mean of label == argmax, same name,
    state, results and config) computing the argmax with TensorFlow's `ArgMax` kernel.

    Why: `keras.ops.argmax` on the TensorFlow backend first rewrites every -0.0 among
    float inputs as the smallest negative normal (a flush-to-zero fix for JAX's ordering of
    signed zeros), six extra element-wise passes (Bitcast, BitwiseAnd, Less, Equal,
    LogicalAnd, SelectV2) over the whole [B, P, V] logits tensor. On BERT's masked-LM logits
    (32 x 20 predictions x 30522 words) those passes cost more than the argmax itself and
    several percent of a training step (profile in benchmarks/pretraining.py's findings);
    they change the result only when a maximum is a signed zero. keras and keras-nlp have
    no metric without them."""

    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(fn=argmax_accuracy, name=name, dtype=dtype)
        # Maximised in model checkpointing and early stopping, as keras' metric is.
        self._direction = "up"

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}


def sum_over_replicas(value):
    """`value` summed over the replicas of a `tf.distribute` strategy (itself outside one).

    Losses divide by global counts, so each replica returns its share of the global
    batch's loss; the gradients summed across replicas are then exactly those of one
    device seeing the whole batch, even when replicas hold different numbers of real
    masked-LM predictions. On another backend the step is one global SPMD program
    (keras.distribution shards the batch under jit), so the plain value is already global."""
    if not backend.is_tensorflow():
        return value
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def weighted_mean(values, weights, epsilon=1e-5):
    """``sum(w * v) / (sum(w) + epsilon)``, the denominator summed over the global batch
    (this replica's share of the global weighted mean)."""
    return ops.sum(weights * values) / (sum_over_replicas(ops.sum(weights)) + epsilon)


def batch_mean(values):
    """The mean of per-example ``values`` [B] over the global batch (this replica's share)."""
    return ops.sum(values) / sum_over_replicas(ops.cast(ops.shape(values)[0], "float32"))


def masked_lm_weights(sample_weight, shape):
    """The float32 weights of the masked-LM predictions: ``sample_weight["mlm"]`` (or the
    tensor itself; CONTRACTS §3 gives them as ``{"mlm": [B, P]}``), ones of ``shape`` when
    there are none."""
    if isinstance(sample_weight, dict):
        sample_weight = sample_weight.get("mlm")
    if sample_weight is None:
        return ops.ones(shape, dtype="float32")
    return ops.cast(sample_weight, "float32")


def masked_lm_loss(labels, logits, weights):
    """Mean masked-LM negative log-likelihood over the real predictions:
    ``sum(w * nll) / (sum(w) + 1e-5)``. ``labels`` [B, P] ids, ``logits`` [B, P, V]
    (float32), ``weights`` [B, P] (0 for padding predictions)."""
    nll = sparse_softmax_nll(labels, logits)
    return weighted_mean(nll, weights)


def sentence_loss(labels, logits):
    """Mean negative log-likelihood of a sentence-level classifier: ``labels`` [B],
    ``logits`` [B, classes] (float32)."""
    nll = sparse_softmax_nll(labels, logits)
    return batch_mean(nll)


def next_token_loss(labels, logits, sample_weight, nll_tracker):
    """The language models' loss: the mean negative log-likelihood of the target ids
    ``labels`` [B, T] under ``logits`` [B, T, V] over the real positions of the global
    batch (``sample_weight`` [B, T], 0 on padding; None = every position); a batch that is
    all padding contributes 0, not NaN. Records the per-token NLL in ``nll_tracker``."""
    logits = ops.cast(logits, "float32")
    nll = sparse_softmax_nll(labels, logits)
    if sample_weight is None:
        weights = ops.ones(ops.shape(nll), dtype="float32")
    else:
        weights = ops.cast(sample_weight, "float32")
    nll_tracker.update_state(nll, sample_weight=weights)
    return ops.sum(weights * nll) / ops.maximum(sum_over_replicas(ops.sum(weights)), 1e-9)


def track_loss(tracker, loss):
    """Records a replica's share of a loss in the `keras.metrics.Mean` ``tracker`` as the
    global value (the shares summed over replicas), without a gradient."""
    tracker.update_state(sum_over_replicas(ops.stop_gradient(loss)))


def masked_lm_objective(labels, logits, sample_weight, loss_tracker, accuracy):
    """`masked_lm_loss` of the masked-LM ``logits`` [B, P, V] against ``labels`` [B, P],
    weighted by `masked_lm_weights(sample_weight)`; updates ``loss_tracker`` (`track_loss`)
    and the weighted ``accuracy`` metric. Returns the loss (this replica's share)."""
    logits = ops.cast(logits, "float32")
    weights = masked_lm_weights(sample_weight, ops.shape(labels))
    loss = masked_lm_loss(labels, logits, weights)
    track_loss(loss_tracker, loss)
    accuracy.update_state(labels, logits, sample_weight=weights)
    return loss


def sentence_objective(labels, logits, loss_tracker, accuracy):
    """`sentence_loss` of the sentence-level ``logits`` [B, classes] against ``labels``
    ([B] or [B, 1]); updates ``loss_tracker`` (`track_loss`) and ``accuracy``. Returns the
    loss (this replica's share)."""
    logits = ops.cast(logits, "float32")
    labels = ops.reshape(labels, (-1,))
    loss = sentence_loss(labels, logits)
    track_loss(loss_tracker, loss)
    accuracy.update_state(labels, logits)
    return loss


def with_regularization(model, loss):
    """``loss`` plus the losses ``model``'s layers register (``model.losses``, e.g.
    regularisers a caller adds), divided by the number of replicas as Keras does."""
    if model.losses:
        regularization = ops.cast(ops.sum(model.losses), "float32")
        loss = loss + regularization / backend.replicas_in_sync()
    return loss


__all__ = ["SparseCategoricalAccuracy", "argmax_accuracy", "batch_mean", "masked_lm_loss",
           "masked_lm_objective", "masked_lm_weights", "next_token_loss", "sentence_loss",
           "sentence_objective", "sparse_softmax_nll", "sum_over_replicas", "track_loss",
           "weighted_mean", "with_regularization"]
