"""ALBERT (Lan et al. 2020). Importing this package registers the "albert" architecture."""

from lmfactory.models import registry
from lmfactory.models.albert.albert_backbone import SHARING_MODES, AlbertBackbone
from lmfactory.models.albert.albert_classifier import AlbertClassifier
from lmfactory.models.albert.albert_converters import from_huggingface, load_huggingface_heads
from lmfactory.models.albert.albert_presets import ALBERT_PRESETS
from lmfactory.models.albert.albert_pretrainer import AlbertPretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="albert",
        family="encoder",
        backbone_cls=AlbertBackbone,
        presets=ALBERT_PRESETS,
        tokenizer_kind="sentencepiece",
        pretrainers={"albert_mlm_sop": AlbertPretrainer},
        heads={"classification": AlbertClassifier},
        special_tokens={"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters={"huggingface": from_huggingface},
        hf_model_types=("albert",),
        paper="Lan et al. 2020, ALBERT: A Lite BERT for Self-supervised Learning of Language "
              "Representations (ICLR), arXiv:1909.11942",
    )
)

__all__ = ["ALBERT_PRESETS", "ARCHITECTURE", "SHARING_MODES", "AlbertBackbone",
           "AlbertClassifier", "AlbertPretrainer", "from_huggingface",
           "load_huggingface_heads"]
