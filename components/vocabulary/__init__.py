"""Vocabulary learning (WordPiece, byte-level BPE, SentencePiece, whole words; or the
fixed byte vocabulary) as a Beam-powered TFX component."""

from lmfactory.components.vocabulary.component import VocabularyGen, VocabularyGenSpec
from lmfactory.components.vocabulary.executor import (Executor, VocabularyConfig,
                                                      add_vocabulary_pipeline,
                                                      learn_vocabulary)

__all__ = ["Executor", "VocabularyConfig", "VocabularyGen", "VocabularyGenSpec",
           "add_vocabulary_pipeline", "learn_vocabulary"]
