"""KagNet's text encoder (Lin et al. 2019 §3, §4.2: "we use BERT-base / GPT as the
encoder of the statement")."""

from lmfactory.models.bert.bert_backbone import BertBackbone


class KagNetTextEncoder(BertBackbone):
    """The statement encoder of KagNet: BERT's bidirectional Transformer (`BertBackbone`,
    unchanged: same inputs, outputs, config and checkpoints), registered as the ``kagnet``
    architecture's backbone so that its pretraining, fine-tuning and export run through the
    registry like any encoder. The pooled ``[CLS]`` vector of ``[CLS] question [SEP]
    choice [SEP]`` is the statement vector s of §3.3-3.4; the knowledge-aware parts
    (GCN-LSTM-HPA) are in the ``multiple_choice`` head (`KagNetMultipleChoice`)."""
