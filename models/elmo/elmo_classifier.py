"""Sentence classification with ELMo features (Peters et al. 2018 §3.3, §4 "Sentiment
analysis")."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.elmo.elmo_feature_task import ElmoFeatureTask


def masked_max(hidden, mask):
    """Max over the real positions of ``hidden`` [B, T, D] (zeros for an empty row)."""
    mask = ops.cast(mask, hidden.dtype)[..., None]
    lowest = ops.min(hidden) - 1.0
    pooled = ops.max(hidden * mask + lowest * (1.0 - mask), axis=1)
    return pooled * ops.cast(ops.sum(mask, axis=1) > 0, hidden.dtype)


class ElmoClassifier(ElmoFeatureTask):
    """`ElmoFeatureTask` with a max-pooling classifier: the task biLSTM's outputs, max-pooled
    over the sentence's tokens, feed a linear layer over the classes.

    The paper's SST-5 model is the biattentive classification network (BCN) of McCann et al.
    2017 §5, whose pooling includes max pooling over the biLSTM outputs; this head keeps
    that max-pooled biLSTM encoder (as in Conneau et al. 2017's BiLSTM-max) and leaves out
    the biattention and maxout network. ``mix`` "all" / "top" is Table 2's comparison.

    Inputs: ``token_ids``, ``character_ids``, ``padding_mask``. Output: logits [B, K] (train
    with sparse categorical cross-entropy; the scalar mixes' L2 penalty is a layer loss).

    Args: ``num_classes`` = K, and those of `ElmoFeatureTask`.
    """

    def __init__(self, backbone, num_classes, **kwargs):
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.logits_layer = keras.layers.Dense(int(num_classes), name="logits")
        super().__init__(backbone, **kwargs)
        self.num_classes = int(num_classes)

    def head(self, hidden, mask):
        return self.logits_layer(masked_max(hidden, mask))

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes})
        return config
