"""XLNet fine-tuned for sequence classification (Yang et al. 2019 §3.3 GLUE; the
reference's `summarize_sequence` "last" and Hugging Face's sequence summary)."""

import keras
from keras import ops

from lmfactory.models.task_model import SequenceClassifier, int_inputs

CLASSIFIER_INPUTS = ("token_ids", "padding_mask", "segment_ids")


def last_token_vector(sequence_output, padding_mask):
    """The content stream at the last real token [B, H]: XLNet's `<cls>`, which its layout
    puts at the end (left padding: position T - 1; also right-padded inputs)."""
    mask = ops.cast(padding_mask, "int32")
    positions = ops.cumsum(ops.ones_like(mask), axis=1) - 1
    last = ops.max(ops.where(mask > 0, positions, ops.zeros_like(positions)), axis=1)
    return ops.take_along_axis(sequence_output, last[:, None, None], axis=1)[:, 0, :]


class XLNetClassifier(SequenceClassifier):
    """An `XLNetBackbone` with the reference's sequence summary on the `<cls>` (last real)
    token's content-stream output: Dense(H, tanh), dropout, then the classification layer.

    Inputs (dict, int32 [B, T]): `token_ids`, `padding_mask`, `segment_ids`.
    Output: logits [B, num_classes].
    """

    task_inputs = CLASSIFIER_INPUTS

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        init = lambda: keras.initializers.RandomNormal(stddev=0.02)  # noqa: E731
        self.summary_dense = keras.layers.Dense(backbone.hidden_dim, activation="tanh",
                                                kernel_initializer=init(),
                                                dtype=backbone.dtype_policy,
                                                name="summary")
        self.add_output_layers(num_classes, dropout, init, dtype=backbone.dtype_policy)
        # SequenceClassifier's graph reads the first token; this head reads the last real
        # one, so it wires its own graph (the config stays SequenceClassifier's).
        self.backbone = backbone
        inputs = int_inputs(self.task_inputs)
        outputs = backbone(inputs)
        summary = self.summary_dense(last_token_vector(outputs["sequence_output"],
                                                       inputs["padding_mask"]))
        logits = self.output_head(summary)
        super(SequenceClassifier, self).__init__(inputs=inputs, outputs=logits, **kwargs)
        self.num_classes = num_classes
        self.dropout = dropout
