"""DistilBERT (Sanh et al. 2019). Importing this package registers the "distilbert"
architecture: a 6-layer BERT student without token types or pooler, pre-trained by
distilling a BERT teacher (objective `mlm`)."""

from lmfactory.models import registry
from lmfactory.models.distilbert.distilbert_backbone import DistilBertBackbone
from lmfactory.models.distilbert.distilbert_classifier import DistilBertClassifier
from lmfactory.models.distilbert.distilbert_converters import CONVERTERS, MODEL_TYPES
from lmfactory.models.distilbert.distilbert_distiller import DistilBertDistiller
from lmfactory.models.distilbert.distilbert_presets import DISTILBERT_PRESETS

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="distilbert",
        family="encoder",
        backbone_cls=DistilBertBackbone,
        presets=DISTILBERT_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"mlm": DistilBertDistiller},
        heads={"classification": DistilBertClassifier},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters=CONVERTERS,
        hf_model_types=MODEL_TYPES,
        paper="Sanh et al. 2019, DistilBERT, a distilled version of BERT: smaller, faster, "
              "cheaper and lighter (NeurIPS EMC^2 workshop), arXiv:1910.01108",
    )
)

__all__ = ["ARCHITECTURE", "DISTILBERT_PRESETS", "DistilBertBackbone", "DistilBertClassifier",
           "DistilBertDistiller"]
