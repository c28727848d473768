"""ELECTRA (Clark et al. 2020). Importing this package registers the "electra" architecture."""

from lmfactory.models import registry
from lmfactory.models.electra.electra_backbone import ElectraBackbone
from lmfactory.models.electra.electra_classifier import ElectraClassifier
from lmfactory.models.electra.electra_converters import (
    from_huggingface,
    pretrainer_from_huggingface,
)
from lmfactory.models.electra.electra_generator import ElectraGenerator
from lmfactory.models.electra.electra_presets import ELECTRA_GENERATOR_SIZES, ELECTRA_PRESETS
from lmfactory.models.electra.electra_pretrainer import ElectraPretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="electra",
        family="encoder",
        backbone_cls=ElectraBackbone,
        presets=ELECTRA_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"mlm": ElectraPretrainer},
        heads={"classification": ElectraClassifier},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters={"huggingface": from_huggingface},
        hf_model_types=("electra",),
        paper="Clark et al. 2020, ELECTRA: Pre-training Text Encoders as Discriminators "
              "Rather Than Generators (ICLR), arXiv:2003.10555",
    )
)

__all__ = ["ARCHITECTURE", "ELECTRA_GENERATOR_SIZES", "ELECTRA_PRESETS", "ElectraBackbone",
           "ElectraClassifier", "ElectraGenerator", "ElectraPretrainer", "from_huggingface",
           "pretrainer_from_huggingface"]
