"""ALBERT fine-tuned for sequence classification (Lan et al. 2020 §4.1, Appendix A.4)."""

import keras

from lmfactory.models.albert.albert_common import albert_kernel_initializer

ALBERT_CLASSIFIER_INPUTS = ("token_ids", "padding_mask", "segment_ids")


@keras.saving.register_keras_serializable(package="lmfactory")
class AlbertClassifier(keras.Model):
    """An `AlbertBackbone` with a classification layer on the pooled `[CLS]` vector.

    As BERT (§4.1 follows Devlin et al. for fine-tuning) and the released ALBERT
    classifier: dropout (the "classifier dropout rate" of Appendix A.4, 0.1 by default),
    then Dense(K) on the pooled output.

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
        # === Layers ===
        self.backbone = backbone
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=backbone.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=albert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="logits",
        )

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ALBERT_CLASSIFIER_INPUTS
        }
        pooled = backbone(inputs)["pooled_output"]
        logits = self.output_dense(self.output_dropout(pooled))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.dropout = dropout

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.layers.serialize(self.backbone),
            "num_classes": self.num_classes,
            "dropout": self.dropout,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
