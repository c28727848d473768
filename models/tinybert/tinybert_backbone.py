"""TinyBERT student network (Jiao et al. 2020, "TinyBERT: Distilling BERT for Natural
Language Understanding", Findings of EMNLP, arXiv:1909.10351)."""

from lmfactory.models.bert.bert_backbone import BertBackbone


class TinyBertBackbone(BertBackbone):
    """TinyBERT's student: BERT's architecture at a smaller size (§4.1 "TinyBERT settings").

    The network is exactly `BertBackbone` (token + segment + position embeddings, post-LN
    Transformer blocks, GELU, a tanh pooler; same inputs, outputs and `call_with_states`);
    only the sizes differ (TinyBERT-4: M=4 layers, d'=312 hidden, d'_i=1200 feed-forward,
    h=12 heads). It is a separate class so that the registry tells a TinyBERT student from a
    BERT model: it is trained by distillation (`TinyBertGeneralDistiller`,
    `TinyBertTaskDistiller`), not by BERT's MLM + NSP.
    """
