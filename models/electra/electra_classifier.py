"""ELECTRA fine-tuned for sequence classification (Clark et al. 2020 §3.1, GLUE)."""

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.electra.electra_backbone import ELECTRA_BACKBONE_INPUTS
from lmfactory.models.task_model import (SequenceClassifier, dropout_dense,
                                         first_token_vector)


class ElectraClassifier(SequenceClassifier):
    """An `ElectraBackbone` (the pre-trained discriminator) with a classification head on
    the first token (`[CLS]`).

    ELECTRA's discriminator has no pooler, so the head reads the final hidden state of the
    first token directly. The head is the one of the Hugging Face ELECTRA port
    (`ElectraClassificationHead`), so its converted classifiers load as is: dropout,
    Dense(H) + GELU, dropout, Dense(K). (The paper's own fine-tuning code puts a single
    linear layer after dropout; the extra Dense(H) + GELU layer replaces BERT's pooler.)
    Dropout 0.1, as in the paper's fine-tuning hyperparameters (Appendix A).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`, `segment_ids`.
    Output: logits [batch, num_classes].

    Args:
        backbone: an `ElectraBackbone`.
        num_classes: K, the number of labels.
        dropout: dropout rate before each dense layer of the head.
    """

    task_inputs = ELECTRA_BACKBONE_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        # === Layers ===
        self.pooled_dropout, self.pooled_dense = dropout_dense(
            "pooled", dropout, backbone.hidden_dim, "gelu", bert_kernel_initializer,
            dtype=backbone.dtype_policy)
        self.add_output_layers(num_classes, dropout, bert_kernel_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, int(num_classes), dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(
            self.pooled_dense(self.pooled_dropout(first_token_vector(outputs))))
