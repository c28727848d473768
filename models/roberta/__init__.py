"""RoBERTa (Liu et al. 2019). Importing this package registers the "roberta" architecture."""

from lmfactory.models import registry
from lmfactory.models.roberta.roberta_backbone import RobertaBackbone
from lmfactory.models.roberta.roberta_classifier import RobertaClassifier
from lmfactory.models.roberta.roberta_converters import (from_huggingface,
                                                         pretrainer_from_huggingface)
from lmfactory.models.roberta.roberta_position_embedding import RobertaPositionEmbedding
from lmfactory.models.roberta.roberta_presets import ROBERTA_PRESETS
from lmfactory.models.roberta.roberta_pretrainer import RobertaPretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="roberta",
        family="encoder",
        backbone_cls=RobertaBackbone,
        presets=ROBERTA_PRESETS,
        tokenizer_kind="bpe",
        pretrainers={"mlm": RobertaPretrainer},
        heads={"classification": RobertaClassifier},
        special_tokens={"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                        "mask": "<mask>"},
        segment_layout="roberta",
        converters={"huggingface": from_huggingface},
        hf_model_types=("roberta",),
        paper="Liu et al. 2019, RoBERTa: A Robustly Optimized BERT Pretraining Approach, "
              "arXiv:1907.11692",
    )
)

__all__ = ["ARCHITECTURE", "ROBERTA_PRESETS", "RobertaBackbone", "RobertaClassifier",
           "RobertaPositionEmbedding", "RobertaPretrainer", "from_huggingface",
           "pretrainer_from_huggingface"]
