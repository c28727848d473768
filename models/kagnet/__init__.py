"""KagNet (Lin et al. 2019). Importing this package registers the "kagnet" architecture."""

from lmfactory.models import registry
from lmfactory.models.bert.bert_presets import BERT_PRESETS
from lmfactory.models.bert.bert_pretrainer import BertPretrainer
from lmfactory.models.kagnet.kagnet_backbone import KagNetTextEncoder
from lmfactory.models.kagnet.kagnet_converters import from_huggingface, from_tf_checkpoint
from lmfactory.models.kagnet.kagnet_multiple_choice import KagNetMultipleChoice, knowledge_init
from lmfactory.models.kagnet.kagnet_preprocessor import kagnet_preprocessor

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="kagnet",
        family="encoder",
        backbone_cls=KagNetTextEncoder,
        presets=BERT_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"bert_mlm_nsp": BertPretrainer},
        heads={"multiple_choice": KagNetMultipleChoice},
        preprocessors={"multiple_choice": kagnet_preprocessor},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters={"huggingface": from_huggingface, "tf_checkpoint": from_tf_checkpoint},
        knowledge_init=knowledge_init,
        concept_paths=True,
        paper="Lin et al. 2019, KagNet: Knowledge-Aware Graph Networks for Commonsense "
              "Reasoning (EMNLP), arXiv:1909.02151",
    )
)

__all__ = ["ARCHITECTURE", "KagNetMultipleChoice", "KagNetTextEncoder", "knowledge_init"]
