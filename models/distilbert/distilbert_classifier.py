"""DistilBERT fine-tuned for sequence classification (Sanh et al. 2019 §4, "Downstream
tasks")."""

import keras

from lmfactory.models.distilbert.distilbert_backbone import (
    DISTILBERT_BACKBONE_INPUTS, distilbert_kernel_initializer)
from lmfactory.models.task_model import SequenceClassifier, first_token_vector


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
        self.add_output_layers(num_classes, dropout, distilbert_kernel_initializer,
                               dtype=backbone.dtype_policy)
        super().__init__(backbone, num_classes, dropout, **kwargs)

    def classify(self, outputs):
        return self.output_head(self.pre_classifier(first_token_vector(outputs)))
