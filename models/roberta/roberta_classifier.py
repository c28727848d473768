"""RoBERTa fine-tuned for sequence classification (Liu et al. 2019 §5.1)."""

from lmfactory.models.roberta.roberta_backbone import (ROBERTA_BACKBONE_INPUTS,
                                                       roberta_kernel_initializer)
from lmfactory.models.task_model import (SequenceClassifier, dropout_dense,
                                         first_token_vector)


class RobertaClassifier(SequenceClassifier):
    """A `RobertaBackbone` with the RoBERTa classification head on the first token `<s>`.

    RoBERTa has no NSP pooler (§4.2), so the head brings its own: the final hidden vector of
    `<s>` (BERT's `[CLS]` position) goes through dropout, Dense(H, tanh), dropout and the
    output layer Dense(K), as the released fairseq / Hugging Face `RobertaClassificationHead`
    used for the GLUE results of §5.1. Dropout defaults to 0.1, BERT's fine-tuning
    value and the released head's.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask` (other entries, such
        as the packer's `segment_ids`, are ignored).
    Output: logits [batch, num_classes] (train with
        `SparseCategoricalCrossentropy(from_logits=True)`).

    Args:
        backbone: a `RobertaBackbone` (pre-trained or fresh).
        num_classes: K, the number of labels.
        dropout: dropout rate before each of the two dense layers.
    """

    task_inputs = ROBERTA_BACKBONE_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        # === Layers ===
        self.pooler_dropout, self.pooler_dense = dropout_dense(
            "pooler", dropout, backbone.hidden_dim, "tanh", roberta_kernel_initializer,
            dtype=backbone.dtype_policy)
        self.add_output_layers(num_classes, dropout, roberta_kernel_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(
            self.pooler_dense(self.pooler_dropout(first_token_vector(outputs))))
