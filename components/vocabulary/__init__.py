"""Vocabulary learning (WordPiece, byte-level BPE, SentencePiece, whole words; or the
fixed byte vocabulary) as a Beam-powered TFX component.

The names below are imported on first use: a Beam SDK worker unpickling the counting step
(``counting.py``) imports this package, and must not pay for TFX and TensorFlow.
"""

import importlib

_EXPORTS = {"VocabularyGen": "component", "VocabularyGenSpec": "component",
            "Executor": "executor", "VocabularyConfig": "executor",
            "add_vocabulary_pipeline": "executor", "finish_vocabulary": "executor",
            "learn_vocabulary": "executor"}


def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
