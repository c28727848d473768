"""BERT fine-tuned for sequence classification (Devlin et al. 2019 §4.1, Figure 4a)."""

import keras

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.task_model import BackboneTask

BERT_CLASSIFIER_INPUTS = ("token_ids", "padding_mask", "segment_ids")


@keras.saving.register_keras_serializable(package="lmfactory")
class BertClassifier(BackboneTask, keras.Model):
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

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=backbone.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="logits",
        )

        # === Functional model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in BERT_CLASSIFIER_INPUTS
        }
        pooled = backbone(inputs)["pooled_output"]
        logits = self.output_dense(self.output_dropout(pooled))
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "dropout": self.dropout})
        return config
