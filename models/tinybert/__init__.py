"""TinyBERT (Jiao et al. 2020). Importing this package registers the "tinybert" architecture:
a small BERT trained by Transformer distillation from a BERT teacher (general distillation on
the objective `mlm`; task-specific distillation with `TinyBertTaskDistiller`)."""

from lmfactory.models import registry
from lmfactory.models.bert.bert_classifier import BertClassifier
from lmfactory.models.tinybert.tinybert_backbone import TinyBertBackbone
from lmfactory.models.tinybert.tinybert_distiller import (
    TinyBertDistillation, TinyBertGeneralDistiller, TinyBertTaskDistiller)
from lmfactory.models.tinybert.tinybert_presets import TINYBERT_PRESETS

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="tinybert",
        family="encoder",
        backbone_cls=TinyBertBackbone,
        presets=TINYBERT_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"mlm": TinyBertGeneralDistiller},
        heads={"classification": BertClassifier, "classification_distillation": TinyBertTaskDistiller},
        # The student is a BERT: it is fine-tuned (or task-distilled) with BERT's head.
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        paper="Jiao et al. 2020, TinyBERT: Distilling BERT for Natural Language "
              "Understanding (Findings of EMNLP), arXiv:1909.10351",
    )
)

__all__ = ["ARCHITECTURE", "TINYBERT_PRESETS", "TinyBertBackbone", "TinyBertDistillation",
           "TinyBertGeneralDistiller", "TinyBertTaskDistiller"]
