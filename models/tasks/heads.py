"""The fine-tuning heads every encoder gets (registered as the encoder family's defaults, so
an architecture registers a head of its own only where its paper defines one):

* ``tagging``: `tagger` — BERT §4.3's fine-tuned `TokenClassifier`, or, with
  ``feature_mode`` in the recipe's ``finetuning.task_args``, §5.3's feature-based
  `FeatureBasedTagger` (frozen encoder -> BiLSTM);
* ``span_qa``: `SpanExtractor` (BERT §4.2 start / end vectors);
* ``multiple_choice``: `MultipleChoice` (BERT §4.4, one score per choice).
"""

from lmfactory.models import registry
from lmfactory.models.tasks.feature_based_tagger import FeatureBasedTagger
from lmfactory.models.tasks.multiple_choice_head import MultipleChoice
from lmfactory.models.tasks.span_extractor import SpanExtractor
from lmfactory.models.tasks.token_classifier import TokenClassifier


def tagger(backbone, num_labels, feature_mode=None, **task_args):
    """The tagger of ``finetuning.task_args``: feature-based with a ``feature_mode`` (and
    its BiLSTM settings), else fine-tuned (``dropout`` only)."""
    if feature_mode:
        return FeatureBasedTagger(backbone, num_labels=num_labels, mode=feature_mode,
                                  **task_args)
    unknown = sorted(set(task_args) - {"dropout"})
    if unknown:
        raise ValueError(f"finetuning.task_args {unknown} go with feature_mode (the "
                         f"feature-based tagger)")
    return TokenClassifier(backbone, num_labels=num_labels, **task_args)


registry.register_family_head("encoder", "tagging", tagger)
registry.register_family_head("encoder", "span_qa", SpanExtractor)
registry.register_family_head("encoder", "multiple_choice", MultipleChoice)

__all__ = ["tagger"]
