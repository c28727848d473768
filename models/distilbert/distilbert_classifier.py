"""DistilBERT fine-tuned for sequence classification (Sanh et al. 2019 §4, "Downstream
tasks")."""

import keras

from lmfactory.models.distilbert.distilbert_backbone import (
    DISTILBERT_BACKBONE_INPUTS, distilbert_kernel_initializer)
from lmfactory.models.task_model import BackboneTask


@keras.saving.register_keras_serializable(package="lmfactory")
class DistilBertClassifier(BackboneTask, keras.Model):
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

    def __init__(self, backbone, num_classes, dropout=0.2, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        # === Layers ===
        self.backbone = backbone
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

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in DISTILBERT_BACKBONE_INPUTS
        }
        first_token = backbone(inputs)["sequence_output"][:, 0, :]
        logits = self.output_dense(self.output_dropout(self.pre_classifier(first_token)))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "dropout": self.dropout})
        return config
