"""Two fixes that let Keras 3 (3.12 here, with TF 2.16) train under
MultiWorkerMirroredStrategy; without them ``fit`` fails before or at its first step
(tensorflow/tensorflow#72388, "Invalid reduction dimension 0 for input with 0 dimensions").

1. Step outputs: Keras reduces each logged value of a multi-worker step with
   ``strategy.reduce("MEAN", value, axis=0)``; the logs are scalars (metric results), which
   have no axis 0. For a scalar the fix reduces with ``axis=None``: the mean over the
   replicas of each replica's metric result, i.e. the metric of the global batch when the
   replicas hold equal shares of it (the loss tracker and accuracy are means). Anything else
   keeps Keras's reduction.
2. Symbolic build: before its first step Keras builds the model from one distributed batch,
   first merged with ``strategy.reduce("MEAN", batch)``, which fails for a nested batch
   (features, labels) under MultiWorkerMirroredStrategy. Only the batch's structure and shapes
   matter there, so the fix hands Keras the first local replica's batch (Keras re-creates the
   input iterator afterwards: no batch is lost).

Both wrap private functions of ``keras.src.backend.tensorflow.trainer`` and change nothing
unless the strategy is a multi-worker MultiWorkerMirroredStrategy. `apply` is idempotent;
strategy.make_strategy calls it when it creates that strategy.
"""

from __future__ import annotations

import tensorflow as tf

_APPLIED = False


def _multi_worker(strategy) -> bool:
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())


def _local(strategy, value):
    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer as keras_trainer

    original_reduce = keras_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not _multi_worker(strategy):
            return original_reduce(values, strategy, reduction)

        def reduce(value):
            local = _local(strategy, value)
            if getattr(local, "shape", None) is not None and local.shape.rank == 0:
                return strategy.reduce("MEAN", value, axis=None)
            return original_reduce(value, strategy, reduction)

        return tree.map_structure(reduce, values)

    original_build = keras_trainer.TensorFlowTrainer._maybe_symbolic_build

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is not None and data_batch is None and strategy is not None \
                and _multi_worker(strategy):
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(lambda v: _local(strategy, v),
                                                   next(iter(batches)))
                break
            iterator = None
        return original_build(self, iterator=iterator, data_batch=data_batch)

    keras_trainer.reduce_per_replica = reduce_per_replica
    keras_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    _APPLIED = True
