"""Fine-tuning task models that work on any encoder backbone in the registry (keras-hub's
Task split): one class per file, each taking ``backbone`` and returning the task's outputs.

Importing the package registers every task class and preprocessing layer with Keras, so a
saved ``model.keras`` of any task loads, and registers them as their families' default heads
(``heads.py``: the encoders'; ``seq2seq_lm.py``: the encoder-decoders' ``seq2seq_lm``)."""

from lmfactory.models.tasks.feature_based_tagger import FeatureBasedTagger
from lmfactory.models.tasks.fold_choices import FoldChoices
from lmfactory.models.tasks.heads import tagger
from lmfactory.models.tasks.multiple_choice_head import MultipleChoice
from lmfactory.models.tasks.multiple_choice_preprocessor import MultipleChoicePreprocessor
from lmfactory.models.tasks.seq2seq_lm import Seq2SeqLM
from lmfactory.models.tasks.span_extractor import SpanExtractor
from lmfactory.models.tasks.span_preprocessor import SpanPreprocessor
from lmfactory.models.tasks.token_classification_preprocessor import (
    TokenClassificationPreprocessor)
from lmfactory.models.tasks.token_classifier import TokenClassifier

__all__ = ["FeatureBasedTagger", "FoldChoices", "MultipleChoice", "MultipleChoicePreprocessor",
           "Seq2SeqLM", "SpanExtractor", "SpanPreprocessor", "TokenClassificationPreprocessor",
           "TokenClassifier", "tagger"]
