"""The biLM pre-trainer of ELMo (Peters et al. 2018 §3.1): forward and backward language
models sharing the token encoder and the softmax, trained on the sum of their NLLs."""

from __future__ import annotations

import keras
import keras_nlp
from keras import ops

from lmfactory.models.task_losses import track_loss, weighted_mean, with_regularization
from lmfactory.models.task_model import Task

DIRECTIONS = ("forward", "backward")


def backbone_inputs(backbone) -> dict:
    """Fresh `keras.Input`s shaped like the backbone's (``token_ids`` and ``padding_mask``
    [B, T], ``character_ids`` [B, T, C])."""
    return {name: keras.Input(shape=tensor.shape[1:], dtype="int32", name=name)
            for name, tensor in backbone.input.items()}


class ElmoBiLM(Task):
    """§3.1: "A biLM combines both a forward and backward LM. Our formulation jointly
    maximizes the log likelihood of the forward and backward directions:
    sum_k (log p(t_k | t_1..t_{k-1}; Θx, →ΘLSTM, Θs) + log p(t_k | t_{k+1}..t_N; Θx,
    ←ΘLSTM, Θs))", with the token representation Θx and the softmax Θs shared between the
    directions. The softmax here is a full softmax over the word vocabulary (one Dense layer
    applied to the top layer of each direction; the original used a sampled softmax over its
    793k words, a training-speed device that does not change the model).

    Inputs: the backbone's (``token_ids``, ``character_ids``, ``padding_mask``).
    Outputs: ``{"forward": [B, T, V], "backward": [B, T, V]}`` logits and the backbone's
    ``forward_targets`` / ``backward_targets`` [B, T]: at position k the forward LM predicts
    the next token and the backward LM the previous one (-1: no target).
    Loss (`compute_loss`; compile with an optimizer only): the forward mean NLL plus the
    backward mean NLL over the positions that have a target, each weighted by
    ``sample_weight`` (per input position; `bilm` records give ones), so a sentence's every
    token is predicted from both sides. ``y`` (the records' token ids) is not read: the
    targets are the ids the backbone read. Metrics: ``forward_loss``, ``backward_loss``,
    ``forward_perplexity``, ``backward_perplexity``.
    """

    def __init__(self, backbone, **kwargs):
        self.backbone = backbone
        width = int(backbone.projection_dim)
        self.softmax = keras.layers.Dense(int(backbone.vocabulary_size),
                                          dtype=backbone.dtype_policy, name="softmax")
        inputs = backbone_inputs(backbone)
        encoded = backbone(inputs)
        top = encoded["sequence_output"]
        outputs = {"forward": self.softmax(top[..., :width]),
                   "backward": self.softmax(top[..., width:]),
                   "forward_targets": encoded["forward_targets"],
                   "backward_targets": encoded["backward_targets"]}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # === Metrics ===
        self.forward_loss_tracker = keras.metrics.Mean(name="forward_loss")
        self.backward_loss_tracker = keras.metrics.Mean(name="backward_loss")
        self.forward_perplexity = keras_nlp.metrics.Perplexity(
            from_logits=True, name="forward_perplexity")
        self.backward_perplexity = keras_nlp.metrics.Perplexity(
            from_logits=True, name="backward_perplexity")

    def direction_loss(self, direction, y_pred, sample_weight):
        """One direction's mean NLL (this replica's share), with its metrics."""
        logits = ops.cast(y_pred[direction], "float32")
        targets = y_pred[f"{direction}_targets"]
        weights = ops.cast(targets >= 0, "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        labels = ops.maximum(targets, 0)
        nll = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        loss = weighted_mean(nll, weights)
        track_loss(getattr(self, f"{direction}_loss_tracker"), loss)
        getattr(self, f"{direction}_perplexity").update_state(labels, logits,
                                                              sample_weight=weights)
        return loss

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del y  # the targets are the backbone's (the ids it read), see the class docstring
        loss = sum(self.direction_loss(d, y_pred, sample_weight) for d in DIRECTIONS)
        return with_regularization(self, loss)
