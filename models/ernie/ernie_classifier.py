"""ERNIE fine-tuned for sequence classification (Zhang et al. 2019 §3.5, Figure 3)."""

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.ernie.ernie_backbone import ERNIE_BACKBONE_INPUTS
from lmfactory.models.task_model import SequenceClassifier, first_token_vector


class ErnieClassifier(SequenceClassifier):
    """An `ErnieBackbone` with a classification layer on the final [CLS] vector.

    §3.5: "For common NLP tasks, the fine-tuning procedure of ERNIE is similar to BERT. We
    take the final output embedding of the first token, which corresponds to the special
    [CLS] token, as the representation of the input sequence" (here through the pooler, as
    `BertClassifier`). The entities of the input text stay inputs: the classifier sees the
    text's linked entities through the K-Encoder (the pipeline's preprocessor links them,
    `ernie_preprocessor.py`).

    Inputs: the backbone's (`token_ids`, `padding_mask`, `segment_ids`, `entity_ids`,
        `entity_mask`), int32 [B, T]. Output: logits [B, num_classes].

    Args:
        backbone: an `ErnieBackbone`.
        num_classes: the number of labels.
        dropout: dropout rate before the classification layer.
    """

    task_inputs = ERNIE_BACKBONE_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        self.add_output_layers(num_classes, dropout, bert_kernel_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(first_token_vector(outputs, pooled=True))
