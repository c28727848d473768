"""DistilBERT's pre-training by knowledge distillation (Sanh et al. 2019 §2-3)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.distilbert.distilbert_backbone import distilbert_kernel_initializer
from lmfactory.models.encoder_utils import model_inputs, require_inputs
from lmfactory.models.task_losses import (masked_lm_loss, masked_lm_weights, track_loss,
                                          weighted_mean, with_regularization)
from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.tied_output import MaskedLMHead

DISTILLER_INPUTS = ("token_ids", "padding_mask", "mask_positions")


# --------------------------------------------------------------------------- initialisation


def default_teacher_layers(num_teacher_layers: int, num_student_layers: int) -> list:
    """§3 "we initialize the student from the teacher by taking one layer out of two":
    student block i gets teacher block ``i * N // M`` (0-indexed; 0, 2, 4, ... for N = 2M).

    The released extraction script for the 6-layer model picked [0, 2, 4, 7, 9, 11] of
    BERT-base instead (keeping the last block); pass that as ``teacher_layers`` to
    `initialize_student` for the same choice."""
    if num_student_layers > num_teacher_layers:
        raise ValueError(f"The student has more blocks ({num_student_layers}) than the "
                         f"teacher ({num_teacher_layers}); DistilBERT's initialisation takes "
                         f"a subset of the teacher's blocks")
    return [i * num_teacher_layers // num_student_layers for i in range(num_student_layers)]


def _teacher_position_embedding(teacher_backbone):
    position = getattr(teacher_backbone, "position_embedding", None)
    if position is None:  # BertBackbone: a keras-nlp TokenAndPositionEmbedding
        position = getattr(getattr(teacher_backbone, "embeddings", None),
                           "position_embedding", None)
    return position


def _check_same(what, student_value, teacher_value):
    if student_value != teacher_value:
        raise ValueError(f"DistilBERT initialises the student with the teacher's weights, so "
                         f"their {what} must match: student {student_value!r}, teacher "
                         f"{teacher_value!r}")


def _copy_variables(student_layer, teacher_layer, what):
    student_weights, teacher_weights = student_layer.weights, teacher_layer.weights
    _check_same(f"{what} weight count", len(student_weights), len(teacher_weights))
    for target, source in zip(student_weights, teacher_weights):
        _check_same(f"{what} shapes ({target.path} / {source.path})",
                    tuple(target.shape), tuple(source.shape))
        target.assign(source)


def copy_masked_lm_head(student_head, teacher_head):
    """Copies a keras-nlp `MaskedLMHead`'s transform (Dense + LayerNorm) and output bias; the
    output projection is tied to each model's own token embedding and is not touched."""
    for name in ("_intermediate_dense", "_intermediate_layer_norm"):
        _copy_variables(getattr(student_head, name), getattr(teacher_head, name),
                        f"masked-LM head {name.strip('_')}")
    _check_same("masked-LM head output bias shapes", tuple(student_head._bias.shape),
                tuple(teacher_head._bias.shape))
    student_head._bias.assign(teacher_head._bias)


def initialize_student_from_teacher(student_backbone, teacher_backbone, teacher_layers=None):
    """Copies the teacher's embeddings and one block out of two into a `DistilBertBackbone`.

    §3 "Student initialization": the student has the teacher's width, so it starts from the
    teacher's weights: token embeddings, position embeddings (the first
    ``max_sequence_length`` of them, unless the student's positions are sinusoidal), the
    embedding LayerNorm, and teacher block ``teacher_layers[i]`` for student block ``i``
    (default `default_teacher_layers`). The teacher's token-type (segment) embeddings and
    pooler have no counterpart in DistilBERT and are left out, as in the released script.

    Args:
        student_backbone: a `DistilBertBackbone`.
        teacher_backbone: a BERT-style encoder (`BertBackbone` or another
            `DistilBertBackbone`) with `token_embedding`, a learned position embedding,
            `embeddings_layer_norm` and `transformer_layers` (keras-nlp TransformerEncoder).
        teacher_layers: optional 0-indexed teacher block of each student block.

    Returns:
        The list of teacher blocks copied, one per student block.
    """
    for attribute in ("token_embedding", "embeddings_layer_norm", "transformer_layers"):
        if not hasattr(teacher_backbone, attribute):
            raise TypeError(f"The teacher backbone {type(teacher_backbone).__name__} has no "
                            f"{attribute!r}: DistilBERT initialises from a BERT-style encoder")
    teacher_blocks = list(teacher_backbone.transformer_layers)
    student_blocks = list(student_backbone.transformer_layers)
    if teacher_layers is None:
        teacher_layers = default_teacher_layers(len(teacher_blocks), len(student_blocks))
    teacher_layers = [int(i) for i in teacher_layers]
    if len(teacher_layers) != len(student_blocks):
        raise ValueError(f"teacher_layers names {len(teacher_layers)} teacher blocks for "
                         f"{len(student_blocks)} student blocks: {teacher_layers}")
    if any(not 0 <= i < len(teacher_blocks) for i in teacher_layers):
        raise ValueError(f"teacher_layers {teacher_layers} must be 0-indexed blocks of the "
                         f"teacher's {len(teacher_blocks)}")

    teacher_config = teacher_backbone.get_config()
    for key in ("hidden_dim", "vocabulary_size"):
        if key in teacher_config:
            _check_same(key, getattr(student_backbone, key), teacher_config[key])

    _copy_variables(student_backbone.token_embedding, teacher_backbone.token_embedding,
                    "token embedding")
    if not student_backbone.sinusoidal_positions:
        teacher_positions = _teacher_position_embedding(teacher_backbone)
        if teacher_positions is None or not hasattr(teacher_positions,
                                                    "position_embeddings"):
            raise TypeError(f"The teacher backbone {type(teacher_backbone).__name__} has no "
                            f"learned position embedding to copy; build the student with "
                            f"sinusoidal_positions=True")
        table = teacher_positions.position_embeddings
        student_table = student_backbone.position_embedding.position_embeddings
        if student_table.shape[0] > table.shape[0]:
            raise ValueError(f"The student has {student_table.shape[0]} positions, the "
                             f"teacher only {table.shape[0]}")
        _check_same("position embedding width", student_table.shape[1], table.shape[1])
        student_table.assign(table[: student_table.shape[0]])
    _copy_variables(student_backbone.embeddings_layer_norm,
                    teacher_backbone.embeddings_layer_norm, "embedding LayerNorm")
    for student_block, index in zip(student_blocks, teacher_layers):
        teacher_block = teacher_blocks[index]
        student_config, block_config = student_block.get_config(), teacher_block.get_config()
        for key in ("num_heads", "intermediate_dim", "normalize_first", "activation",
                    "layer_norm_epsilon"):
            _check_same(f"blocks' {key}", student_config[key], block_config[key])
        _copy_variables(student_block, teacher_block, f"block (teacher block {index})")
    return teacher_layers


# --------------------------------------------------------------------------- task model


class DistilBertDistiller(SubclassedTask):
    """Trains a `DistilBertBackbone` student to reproduce a masked-LM teacher (§2-3).

    §2 "Training loss": the student is trained with a distillation loss over the soft target
    probabilities of the teacher, L_ce = sum_i t_i * log(s_i), with a softmax-temperature T
    on both (the same T for student and teacher, T = 1 at inference), combined with the
    supervised masked-LM loss L_mlm and a cosine embedding loss L_cos that aligns the
    directions of the student's and teacher's hidden-state vectors. The released training
    recipe weights them 5.0 / 2.0 / 1.0 with T = 2 (the defaults here):

        loss = alpha_ce * L_ce + alpha_mlm * L_mlm + alpha_cos * L_cos

    * L_ce runs over the masked positions (weights from `sample_weight`, padding
      predictions 0), between the teacher's and the student's masked-LM distributions at
      temperature T, scaled by T^2 as in the released code (Hinton et al. 2015: keeps the
      gradient scale independent of T). It is computed as the KL divergence KL(t || s),
      i.e. the paper's cross-entropy minus the teacher's entropy, which does not depend on
      the student: same gradients, and 0 when the student matches the teacher.
    * L_mlm is the student's masked-LM negative log-likelihood at T = 1, averaged over the
      real predictions.
    * L_cos = 1 - cos(h_student, h_teacher) of the last hidden states, averaged over the
      real (non-padding) tokens.

    The student's masked-LM head is BERT's (Dense(H) + GELU + LayerNorm, output projection
    tied to the student's token embedding, plus a bias); with
    `initialize_head_from_teacher` (default) it starts as a copy of the teacher's head, as
    the released extraction script does. The teacher runs in inference mode (no dropout)
    and is frozen: its weights are not trainable and its outputs are under `stop_gradient`.

    Inputs (dict, int32): `token_ids`, `padding_mask` [batch, seq_len], `mask_positions`
        [batch, num_predictions]; `segment_ids`, when present, goes to the teacher only
        (zeros otherwise).
    Outputs (dict): `mlm` student logits [B, P, V], `sequence_output` [B, T, H] of the
        student, `teacher_mlm` and `teacher_sequence_output` (the teacher's, detached).
    Targets for `fit` (objective `mlm`, CONTRACTS §3): y = {"mlm": ids [B, P]},
        sample_weight = {"mlm": weights [B, P]}; train with `compile(optimizer=...)`.
    Metrics: `loss_ce`, `loss_mlm`, `loss_cos`, `mlm_accuracy` (the student's, weighted).

    Args:
        backbone: the student `DistilBertBackbone`.
        teacher: a trained masked-LM task model with `.backbone` and `.masked_lm_head`
            (e.g. `BertPretrainer`).
        alpha_ce, alpha_mlm, alpha_cos: weights of the three losses.
        temperature: T of the soft targets.
        initialize_head_from_teacher: copy the teacher's masked-LM head into the student's.
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    needs_teacher = True
    serialized_models = ("backbone", "teacher")

    def __init__(self, backbone, teacher, alpha_ce=5.0, alpha_mlm=2.0, alpha_cos=1.0,
                 temperature=2.0, initialize_head_from_teacher=True, **kwargs):
        super().__init__(**kwargs)
        for attribute in ("backbone", "masked_lm_head"):
            if not hasattr(teacher, attribute):
                raise TypeError(f"The DistilBERT teacher must be a masked-LM task model with "
                                f"`.backbone` and `.masked_lm_head` (e.g. BertPretrainer); "
                                f"{type(teacher).__name__} has no {attribute!r}")
        teacher_config = teacher.backbone.get_config()
        if teacher_config.get("vocabulary_size") != backbone.vocabulary_size:
            raise ValueError(f"Teacher and student must share the vocabulary: teacher "
                             f"{teacher_config.get('vocabulary_size')} tokens, student "
                             f"{backbone.vocabulary_size}")
        if teacher_config.get("hidden_dim") != backbone.hidden_dim:
            raise ValueError(f"L_cos compares hidden states, so teacher and student need the "
                             f"same hidden size: teacher {teacher_config.get('hidden_dim')}, "
                             f"student {backbone.hidden_dim}")
        if float(temperature) <= 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        # === Layers ===
        self.backbone = backbone
        self.teacher = teacher
        self.teacher.trainable = False
        self.masked_lm_head = MaskedLMHead(
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",
            layer_norm_epsilon=1e-12,
            kernel_initializer=distilbert_kernel_initializer(),
            dtype=backbone.dtype_policy,
            name="masked_lm_head",
        )
        self.masked_lm_head.build((None, None, backbone.hidden_dim), (None, None))
        if initialize_head_from_teacher:
            copy_masked_lm_head(self.masked_lm_head, teacher.masked_lm_head)

        # === Config ===
        self.alpha_ce = float(alpha_ce)
        self.alpha_mlm = float(alpha_mlm)
        self.alpha_cos = float(alpha_cos)
        self.temperature = float(temperature)
        self.initialize_head_from_teacher = bool(initialize_head_from_teacher)

        # === Metrics ===
        self.ce_loss_tracker = keras.metrics.Mean(name="loss_ce")
        self.mlm_loss_tracker = keras.metrics.Mean(name="loss_mlm")
        self.cos_loss_tracker = keras.metrics.Mean(name="loss_cos")
        self.mlm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")
        self.built = True

    @classmethod
    def initialize_student(cls, student_backbone, teacher_backbone, teacher_layers=None):
        """See `initialize_student_from_teacher` (§3 "Student initialization")."""
        return initialize_student_from_teacher(student_backbone, teacher_backbone,
                                               teacher_layers)

    def call(self, inputs, training=None):
        require_inputs("DistilBertDistiller", inputs, DISTILLER_INPUTS)
        sequence_output = self.backbone(
            {"token_ids": inputs["token_ids"], "padding_mask": inputs["padding_mask"]},
            training=training)["sequence_output"]
        mlm_logits = self.masked_lm_head(sequence_output,
                                         mask_positions=inputs["mask_positions"])
        # The batch has no `segment_ids` and a BERT teacher takes them: Keras rejects a
        # missing key before `Backbone.call`, so they are filled (zeros) here.
        teacher_sequence = self.teacher.backbone(model_inputs(self.teacher.backbone, inputs),
                                                 training=False)["sequence_output"]
        teacher_logits = self.teacher.masked_lm_head(teacher_sequence,
                                                     mask_positions=inputs["mask_positions"])
        return {
            "mlm": mlm_logits,
            "sequence_output": sequence_output,
            "teacher_mlm": ops.stop_gradient(teacher_logits),
            "teacher_sequence_output": ops.stop_gradient(teacher_sequence),
        }

    def distillation_losses(self, x, y, y_pred, sample_weight=None):
        """The three loss terms ``{"ce", "mlm", "cos"}`` (each a replica's share of the
        global-batch mean, see `models/task_losses.py`)."""
        student_logits = ops.cast(y_pred["mlm"], "float32")
        teacher_logits = ops.cast(y_pred["teacher_mlm"], "float32")
        weights = masked_lm_weights(sample_weight, ops.shape(student_logits)[:2])

        # L_ce: soft targets at temperature T, scaled by T^2.
        t = self.temperature
        teacher_log_probs = ops.log_softmax(teacher_logits / t, axis=-1)
        student_log_probs = ops.log_softmax(student_logits / t, axis=-1)
        kl = ops.sum(ops.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs),
                     axis=-1)
        ce_loss = weighted_mean(kl, weights) * (t * t)

        # L_mlm: the student's masked-LM likelihood on the true tokens.
        if isinstance(y, dict):
            labels = y.get("mlm")
        else:
            labels = y
        if labels is None:
            if self.alpha_mlm:
                raise ValueError("DistilBertDistiller needs the masked-LM labels y['mlm'] "
                                 "(alpha_mlm > 0)")
            mlm_loss = ops.zeros((), dtype="float32")
        else:
            mlm_loss = masked_lm_loss(labels, student_logits, weights)
            self.mlm_accuracy.update_state(labels, student_logits, sample_weight=weights)

        # L_cos: align the directions of the last hidden states on real tokens.
        student_hidden = ops.cast(y_pred["sequence_output"], "float32")
        teacher_hidden = ops.cast(y_pred["teacher_sequence_output"], "float32")
        token_weights = ops.cast(x["padding_mask"], "float32")
        cosine = ops.sum(student_hidden * teacher_hidden, axis=-1) / ops.maximum(
            ops.norm(student_hidden, axis=-1) * ops.norm(teacher_hidden, axis=-1), 1e-8)
        cos_loss = weighted_mean(1.0 - cosine, token_weights)
        return {"ce": ce_loss, "mlm": mlm_loss, "cos": cos_loss}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        losses = self.distillation_losses(x, y, y_pred, sample_weight)
        track_loss(self.ce_loss_tracker, losses["ce"])
        track_loss(self.mlm_loss_tracker, losses["mlm"])
        track_loss(self.cos_loss_tracker, losses["cos"])
        loss = (self.alpha_ce * losses["ce"] + self.alpha_mlm * losses["mlm"]
                + self.alpha_cos * losses["cos"])
        return with_regularization(self, loss)

    def get_config(self):
        config = super().get_config()
        config.update({
            "alpha_ce": self.alpha_ce,
            "alpha_mlm": self.alpha_mlm,
            "alpha_cos": self.alpha_cos,
            "temperature": self.temperature,
            "initialize_head_from_teacher": self.initialize_head_from_teacher,
        })
        return config
