"""DistilBERT fine-tuned for sequence classification (Sanh et al. 2019 §4, "Downstream
tasks")."""

import keras

from lmfactory.models.distilbert.distilbert_backbone import (
    DISTILBERT_BACKBONE_INPUTS, distilbert_kernel_initializer)
from lmfactory.models.task_model import SequenceClassifier


class DistilBertClassifier(SequenceClassifier):
    """A `DistilBertBackbone` with the released classification head on the first token.

    DistilBERT has no pooler (§3), so the head of the released sequence classifier reads the
    final hidden state of the first token (`[CLS]`) directly: a Dense(H) + ReLU layer
    ("pre_classifier"), dropout (0.2 in the released configuration), then Dense(K).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: logits [batch, num_classes] (train with
        `SparseCategoricalCrossentropy(from_logits=True)`).

    Args:
        backbone: a `DistilBertBackbone` (distilled or fresh).
        num_classes: K, the number of labels.
        dropout: dropout rate before the classification layer.
    """

    task_inputs = DISTILBERT_BACKBONE_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.2, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        # === Layers ===
        self.pre_classifier = keras.layers.Dense(
            backbone.hidden_dim,
            activation="relu",
            kernel_initializer=distilbert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="pre_classifier",
        )
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=backbone.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=distilbert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="logits",
        )
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        first_token = outputs["sequence_output"][:, 0, :]
        return self.output_dense(self.output_dropout(self.pre_classifier(first_token)))
