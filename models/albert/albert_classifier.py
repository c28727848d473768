"""ALBERT fine-tuned for sequence classification (Lan et al. 2020 §4.1, Appendix A.4)."""

from lmfactory.models.bert.bert_classifier import BertClassifier


class AlbertClassifier(BertClassifier):
    """An `AlbertBackbone` with a classification layer on the pooled `[CLS]` vector.

    As BERT (§4.1 follows Devlin et al. for fine-tuning) and the released ALBERT
    classifier: dropout (the "classifier dropout rate" of Appendix A.4, 0.1 by default),
    then Dense(K) on the pooled output, initialised from a truncated normal with stddev
    0.02 (ALBERT keeps BERT's initialisation). That is `BertClassifier`'s head, so this
    class is one; it is its own class so that the registry and saved models name ALBERT.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`, `segment_ids`.
    Output: logits [batch, num_classes] (train with
        `SparseCategoricalCrossentropy(from_logits=True)`).

    Args:
        backbone: an `AlbertBackbone` (pre-trained or fresh).
        num_classes: K, the number of labels.
        dropout: dropout rate before the classification layer.
    """

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        super().__init__(backbone, num_classes, dropout=dropout, **kwargs)
