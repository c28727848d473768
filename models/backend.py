"""Which Keras backend the models run on, and TensorFlow imported only where it is used.

The backbones and pretraining task models are written on ``keras.ops`` and keras-nlp's
layers, so they run on any Keras 3 backend: TensorFlow (the pipeline: tf.data, TFX,
SavedModel) or JAX (jit on GPUs and TPUs, where TensorFlow is not installed). The pieces
that only TensorFlow has (tf-text tokenizers and packers, tf.data readers, the serving
export, checkpoint converters) import it through `tf` / `tf_text` below: module proxies
that import the real module on first attribute access. A module that holds such pieces
therefore imports without TensorFlow, and only calling one of them needs it; then the
error is one line that names what needed it.
"""

from __future__ import annotations

import importlib
import types

import keras


class TensorFlowMissing(ImportError):
    """A TensorFlow-only piece was used where TensorFlow is not importable."""


class _LazyModule(types.ModuleType):
    """Stands for the module ``module_name`` and imports it on first attribute access."""

    def __init__(self, module_name: str, needed_for: str):
        super().__init__(module_name)
        self._module_name = module_name
        self._needed_for = needed_for
        self._module = None

    def _load(self):
        if self._module is None:
            try:
                self._module = importlib.import_module(self._module_name)
            except ImportError as error:
                raise TensorFlowMissing(
                    f"{self._module_name} is not importable ({error}); it is needed for "
                    f"{self._needed_for}, which run on TensorFlow only (Keras backend "
                    f"{keras.backend.backend()!r})") from None
        return self._module

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self._load(), name)

    def __repr__(self):
        state = "loaded" if self._module is not None else "not loaded yet"
        return f"<lazy module {self._module_name!r} ({state})>"


tf = _LazyModule("tensorflow", "tokenizers, tf.data readers, serving export and "
                               "checkpoint converters")
tf_text = _LazyModule("tensorflow_text", "tokenizers and text preprocessing")


def name() -> str:
    """The Keras backend in use: ``"tensorflow"``, ``"jax"``, ..."""
    return keras.backend.backend()


def is_tensorflow() -> bool:
    return name() == "tensorflow"


def replicas_in_sync() -> int:
    """How many replicas share a training step's global batch: the `tf.distribute`
    strategy's on TensorFlow; 1 on JAX, where keras.distribution runs one global SPMD
    program under jit and per-replica shares do not arise."""
    if not is_tensorflow():
        return 1
    return tf.distribute.get_strategy().num_replicas_in_sync


def scan_stacked(step, elements, initializer):
    """``tf.scan``'s contract on every backend: ``step(carry, element) -> carry`` over the
    leading axis of ``elements`` (a tensor or a tuple of them), returning every step's
    carry stacked. On TensorFlow it is ``tf.scan``, which takes unknown batch and time
    sizes (a serving signature's), where keras.ops.scan's TensorFlow version needs static
    ones; elsewhere ``keras.ops.scan`` (``jax.lax.scan``), stacking the carry as output."""
    if is_tensorflow():
        return tf.scan(step, elements, initializer=initializer)

    def carry_and_output(carry, element):
        carry = step(carry, element)
        return carry, carry

    _, stacked = keras.ops.scan(carry_and_output, initializer, elements)
    return stacked
