"""lmfactory: pre-trained language models in Keras, run as TFX pipeline components."""

import os as _os

# Keras 3 on the TensorFlow backend is the only supported backend (TFX, tf.data, SavedModel).
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"


def __getattr__(name):
    """``lmfactory.Vocabulary``: the artifact class named by its TFX type name, which the
    Kubeflow v2 container entrypoint imports (components/artifacts.py). Imported on first
    use only, so ``import lmfactory`` stays free of TensorFlow."""
    if name == "Vocabulary":
        from lmfactory.components.artifacts import Vocabulary

        return Vocabulary
    raise AttributeError(f"module 'lmfactory' has no attribute {name!r}")
