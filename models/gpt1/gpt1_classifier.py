"""GPT-1 fine-tuned on a supervised task (Radford et al. 2018 §3.2, §3.3, Figure 1)."""

import functools

import keras
from keras import ops

from lmfactory.models.gpt1.gpt1_preprocessor import GPT1_TASKS
from lmfactory.models.task_losses import (batch_mean, track_loss, weighted_mean,
                                          with_regularization)
from lmfactory.models.task_model import Task, int_inputs
from lmfactory.models.tied_output import tied_logits

GPT1_CLASSIFIER_INPUTS = ("token_ids", "padding_mask")


def extract_states(hidden, padding_mask):
    """The final transformer activation of each sequence's last real token, the extract
    token `Gpt1Preprocessor` puts after the text: ``hidden`` [B, T, H], ``padding_mask``
    [B, T] (1 on real tokens, right padding) -> [B, H]."""
    mask = ops.cast(padding_mask, hidden.dtype)
    following = ops.concatenate([mask[:, 1:], ops.zeros_like(mask[:, :1])], axis=1)
    is_last = mask * (1 - following)
    return ops.sum(hidden * ops.expand_dims(is_last, -1), axis=1)


def next_token_loss(lm_logits, token_ids, padding_mask):
    """L1 on the task's own sequences (§3.1, as an auxiliary objective in §3.2): the mean
    negative log-likelihood of every real token given the tokens before it, over the
    global batch. ``lm_logits`` [..., T, V], ``token_ids`` and ``padding_mask`` [..., T]
    (leading dimensions, e.g. the answers of a multiple-choice example, are flattened)."""
    length = ops.shape(token_ids)[-1]
    vocabulary = ops.shape(lm_logits)[-1]
    token_ids = ops.reshape(token_ids, (-1, length))
    mask = ops.cast(ops.reshape(padding_mask, (-1, length)), "float32")
    lm_logits = ops.cast(ops.reshape(lm_logits, (-1, length, vocabulary)), "float32")
    nll = keras.losses.sparse_categorical_crossentropy(
        token_ids[:, 1:], lm_logits[:, :-1], from_logits=True)
    return weighted_mean(nll, mask[:, 1:] * mask[:, :-1])


class Gpt1Classifier(Task):
    """A `Gpt1Backbone` with a linear output layer on the extract token, fine-tuned with the
    auxiliary language-modelling objective.

    §3.2: the inputs x^1..x^m of a labelled example pass through the pre-trained model to
    the final transformer block's activation h_l^m, which feeds an added linear output
    layer W_y: P(y | x^1..x^m) = softmax(h_l^m W_y). The objective is

        L3(C) = L2(C) + λ * L1(C),

    with L2 the classification negative log-likelihood and L1 the language-modelling loss of
    §3.1 on the same sequences; λ = 0.5 (§4.1 "Fine-tuning details", which also puts
    dropout 0.1 before the classifier). `compute_loss` computes L3 with both terms as means
    (L2 over the examples, L1 over the real next-token predictions) on the global batch.

    §3.3 task inputs (packed by `Gpt1Preprocessor`; h_l^m is the extract token's state,
    the last real token of each sequence):

    * `classification`, `entailment`: one sequence per example: inputs [B, T], logits
      [B, num_classes].
    * `similarity`: both orderings of the two texts, [B, 2, T], processed independently;
      their extract states are added element-wise before W_y: logits [B, num_classes].
    * `multiple_choice`: one sequence per answer, [B, num_classes, T] (num_classes = the
      number of answers), each processed independently and scored by W_y (H -> 1); the
      scores [B, num_classes] are normalised with a softmax across the answers.

    Inputs (dict, int32): `token_ids`, `padding_mask` (shapes above).
    Outputs (dict): `logits` (the shapes above; probabilities = softmax over the last axis)
        and `lm_logits` ([B, T, V], or [B, 2 | num_classes, T, V]), the tied output layer's
        next-token logits for L1.
    Targets for `fit`: y = labels [B] (the correct answer's index for multiple choice),
        optional sample_weight [B]. Compile with an optimizer and no loss. Metrics:
        `classification_loss` (L2), `lm_loss` (L1), `accuracy`.

    Args:
        backbone: a `Gpt1Backbone` (pre-trained).
        num_classes: number of labels, or of answers for `multiple_choice`.
        task: one of `GPT1_TASKS`.
        lm_weight: λ, the weight of the auxiliary L1 (0 disables it).
        dropout: dropout rate before the linear output layer.
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, num_classes, task="classification", lm_weight=0.5,
                 dropout=0.1, **kwargs):
        if task not in GPT1_TASKS:
            raise ValueError(f"task must be one of {GPT1_TASKS}, got {task!r}")
        if int(num_classes) < (2 if task == "multiple_choice" else 1):
            raise ValueError(f"num_classes must be positive (at least 2 answers for "
                             f"multiple_choice), got {num_classes!r}")
        if float(lm_weight) < 0:
            raise ValueError(f"lm_weight must be >= 0, got {lm_weight!r}")
        num_classes = int(num_classes)
        # === Layers ===
        self.backbone = backbone
        self.add_output_layers(
            1 if task == "multiple_choice" else num_classes, dropout,
            functools.partial(keras.initializers.RandomNormal, stddev=0.02),
            dtype=backbone.dtype_policy)

        # === Functional model ===
        sequences = {"similarity": 2, "multiple_choice": num_classes}.get(task)
        shape = (None,) if sequences is None else (sequences, None)
        inputs = int_inputs(GPT1_CLASSIFIER_INPUTS, shape)
        if sequences is None:
            states, lm_logits = self._read_sequence(inputs["token_ids"],
                                                    inputs["padding_mask"])
        else:
            # Each sequence of an example runs through the model on its own (§3.3).
            read = [self._read_sequence(inputs["token_ids"][:, i, :],
                                        inputs["padding_mask"][:, i, :])
                    for i in range(sequences)]
            states = ops.stack([state for state, _ in read], axis=1)  # [B, S, H]
            lm_logits = ops.stack([logits for _, logits in read], axis=1)  # [B, S, T, V]
            if task == "similarity":
                states = ops.sum(states, axis=1)  # h^m of both orderings, added
        logits = self.output_head(states)
        if task == "multiple_choice":
            logits = ops.squeeze(logits, axis=-1)  # one score per answer: [B, answers]
        super().__init__(inputs=inputs, outputs={"logits": logits, "lm_logits": lm_logits},
                         **kwargs)

        # === Config ===
        self.num_classes = num_classes
        self.task = task
        self.lm_weight = float(lm_weight)
        self.dropout = dropout

        # === Metrics ===
        self.classification_loss_tracker = keras.metrics.Mean(name="classification_loss")
        self.lm_loss_tracker = keras.metrics.Mean(name="lm_loss")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")

    def _read_sequence(self, token_ids, padding_mask):
        """(extract state [B, H], next-token logits [B, T, V]) of one batch of sequences."""
        hidden = self.backbone({"token_ids": token_ids,
                                "padding_mask": padding_mask})["sequence_output"]
        return (extract_states(hidden, padding_mask),
                tied_logits(self.backbone.token_embedding, hidden))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """L3 = L2 + λ * L1 (§3.2), this replica's share of the global batch's value."""
        if y_pred is None:
            y_pred = self(x, training=training)
        if y is None:
            raise ValueError("Gpt1Classifier.compute_loss needs the labels y")
        logits = ops.cast(y_pred["logits"], "float32")
        labels = ops.reshape(y, (-1,))
        nll = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        if sample_weight is None:
            classification = batch_mean(nll)
        else:
            classification = weighted_mean(nll, ops.cast(ops.reshape(sample_weight, (-1,)),
                                                         "float32"))
        language_model = next_token_loss(y_pred["lm_logits"], x["token_ids"],
                                         x["padding_mask"])
        track_loss(self.classification_loss_tracker, classification)
        track_loss(self.lm_loss_tracker, language_model)
        self.accuracy.update_state(
            labels, logits,
            sample_weight=None if sample_weight is None else ops.reshape(sample_weight, (-1,)))
        loss = classification
        if self.lm_weight:
            loss = loss + self.lm_weight * language_model
        return with_regularization(self, loss)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_classes": self.num_classes,
            "task": self.task,
            "lm_weight": self.lm_weight,
            "dropout": self.dropout,
        })
        return config
