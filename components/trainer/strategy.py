"""Distribution-strategy factory: one function picks the strategy for the hardware present.

Batch sizes in recipes are GLOBAL; Keras splits each batch across the replicas.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

import tensorflow as tf

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "default")


def _tf_config_has_workers() -> bool:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from error
    return len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1


def make_strategy(kind: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    """Returns the strategy for ``kind``.

    ``auto`` chooses, in order: TPUStrategy when a TPU address is configured (``tpu`` argument
    or the ``TPU_NAME`` environment variable, as Cloud TPU VMs and Vertex set it),
    MultiWorkerMirroredStrategy when TF_CONFIG names several workers, MirroredStrategy when
    more than one GPU is visible, else the default (single-device) strategy.
    """
    if kind not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {kind!r}")
    tpu = tpu or os.environ.get("TPU_NAME")
    if kind == "tpu" or (kind == "auto" and tpu):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif kind == "multi_worker" or (kind == "auto" and _tf_config_has_workers()):
        from lmfactory.components.trainer import keras_multi_worker

        keras_multi_worker.apply()  # Keras 3's fit under this strategy needs two fixes
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored" or (kind == "auto" and len(tf.config.list_logical_devices("GPU")) > 1):
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    logging.info("Distribution strategy: %s with %d replica(s)",
                 type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's checkpoints and outputs: always on one machine;
    under MultiWorkerMirroredStrategy the chief (TF_CONFIG's ``chief``, else ``worker`` 0)."""
    return bool(getattr(strategy.extended, "should_checkpoint", True))


def worker_role() -> str:
    """``"worker-1"`` (TF_CONFIG's task type and index) for log lines and folder names."""
    try:
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    except json.JSONDecodeError:
        task = {}
    return f"{task.get('type', 'worker')}-{task.get('index', 0)}"


def private_copy(shared_dir: str) -> str:
    """A non-chief worker's own temporary folder holding a copy of the files of
    ``shared_dir`` (the chief's training backup), so that it resumes from the same checkpoint
    while everything it writes (every worker runs the same saving code, as the collective
    ops of MultiWorkerMirroredStrategy require) stays out of the chief's folder. The caller
    removes it at the end."""
    local = tempfile.mkdtemp(prefix=f"lmfactory-{worker_role()}-")
    if tf.io.gfile.isdir(shared_dir):
        for name in tf.io.gfile.listdir(shared_dir):
            source = os.path.join(shared_dir, name)
            if not tf.io.gfile.isdir(source):
                tf.io.gfile.copy(source, os.path.join(local, name.rstrip("/")), overwrite=True)
    return local


def split_cpu_into_logical_devices(count: int) -> None:
    """Splits the host CPU into ``count`` logical devices (for testing MirroredStrategy).

    Must run before TensorFlow initialises its devices.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
