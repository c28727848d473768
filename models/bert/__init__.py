"""BERT (Devlin et al. 2019). Importing this package registers the "bert" architecture."""

from lmfactory.models import registry
from lmfactory.models.bert.bert_backbone import BertBackbone
from lmfactory.models.bert.bert_classifier import BertClassifier
from lmfactory.models.bert.bert_converters import from_huggingface, from_tf_checkpoint
from lmfactory.models.bert.bert_presets import BERT_PRESETS
from lmfactory.models.bert.bert_pretrainer import BertPretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="bert",
        family="encoder",
        backbone_cls=BertBackbone,
        presets=BERT_PRESETS,
        tokenizer_kind="wordpiece",
        pretrainers={"bert_mlm_nsp": BertPretrainer},
        heads={"classification": BertClassifier},
        special_tokens={"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                        "mask": "[MASK]"},
        segment_layout="bert",
        converters={"huggingface": from_huggingface, "tf_checkpoint": from_tf_checkpoint},
        hf_model_types=("bert",),
        paper="Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers "
              "for Language Understanding (NAACL), arXiv:1810.04805",
    )
)

__all__ = ["ARCHITECTURE", "BERT_PRESETS", "BertBackbone", "BertClassifier", "BertPretrainer"]
