"""BERT fine-tuned for sequence classification (Devlin et al. 2019 §4.1, Figure 4a)."""

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.task_model import SequenceClassifier, first_token_vector

BERT_CLASSIFIER_INPUTS = ("token_ids", "padding_mask", "segment_ids")


class BertClassifier(SequenceClassifier):
    """A `BertBackbone` with a classification layer on the `[CLS]` representation.

    §4.1: "The only new parameters introduced during fine-tuning are classification layer
    weights W ∈ R^{K×H}", applied to the final hidden vector of `[CLS]` (here the pooled
    output, as in the released `run_classifier.py`), after dropout 0.1 (Appendix A.3).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`, `segment_ids`.
    Output: logits [batch, num_classes] (train with
        `SparseCategoricalCrossentropy(from_logits=True)`).

    Args:
        backbone: a `BertBackbone` (pre-trained or fresh).
        num_classes: K, the number of labels.
        dropout: dropout rate before the classification layer.
    """

    task_inputs = BERT_CLASSIFIER_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        # === Layers ===
        self.add_output_layers(num_classes, dropout, bert_kernel_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(first_token_vector(outputs, pooled=True))
