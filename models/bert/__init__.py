"""BERT (Devlin et al. 2019). Importing this package registers the "bert" architecture."""

from lmfactory.models import registry
from lmfactory.models.bert.bert_backbone import BertBackbone
from lmfactory.models.bert.bert_classifier import BertClassifier
from lmfactory.models.bert.bert_presets import BERT_PRESETS
from lmfactory.models.bert.bert_pretrainer import BertPretrainer

ARCHITECTURE = registry.register(
    registry.Architecture(
        name="bert",
        family="encoder",
        backbone_cls=BertBackbone,
        presets=BERT_PRESETS,
        tokenizer_kind="wordpiece",
        objectives=("bert_mlm_nsp",),
        pretrainer_cls=BertPretrainer,
        classifier_cls=BertClassifier,
        causal_lm_cls=None,
        paper="Devlin et al. 2019, BERT: Pre-training of Deep Bidirectional Transformers "
              "for Language Understanding (NAACL), arXiv:1810.04805",
    )
)

__all__ = ["ARCHITECTURE", "BERT_PRESETS", "BertBackbone", "BertClassifier", "BertPretrainer"]
