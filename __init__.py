"""lmfactory: pre-trained language models in Keras, run as TFX pipeline components."""

import os as _os

# Keras 3 on the TensorFlow backend is the only supported backend (TFX, tf.data, SavedModel).
_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
