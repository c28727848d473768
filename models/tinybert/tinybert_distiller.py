"""TinyBERT's two-stage Transformer distillation (Jiao et al. 2020 §3.1-3.2).

* General distillation (`TinyBertGeneralDistiller`, objective `mlm`): a pre-trained BERT
  teaches a randomly initialised student on a general corpus, through the embedding layer
  and the Transformer layers only (no prediction layer, no masked-LM labels).
* Task-specific distillation (`TinyBertTaskDistiller`): a fine-tuned BERT classifier teaches
  the general-distilled student, through the same intermediate layers plus the prediction
  layer. The paper's data augmentation (§3.2, GloVe / BERT word replacement) is not
  implemented: the student is distilled on the task's own training data.

Both share the intermediate losses of §3.1 (Eq. 7-9, 11), computed here:

* attention: for student layer m and teacher layer g(m), the MSE between the attention
  matrices A = Q K^T / sqrt(d_k) of every head, *before* the softmax, as the paper does
  ("the unnormalized attention matrix A_i is used as the fitting target instead of its
  softmax output softmax(A_i), since our experiments show that the former setting has a
  faster convergence rate and better performances"). keras' `MultiHeadAttention` returns
  the softmax probabilities only, so `attention_logits` recomputes A from each block's own
  query / key projections and its input hidden state (same weights, same scaling).
* hidden states: MSE(H^S W_h, H^T) between each student layer's output, mapped to the
  teacher's width by a learnable W_h, and teacher layer g(m)'s output;
* embeddings: MSE(E^S W_e, E^T) between the embedding-layer outputs, through W_e.

All are averaged over real tokens (and, for attention, real query-key pairs and heads);
padding is left out where the released code compared it too (with padding scores zeroed).
Each term is summed over the layers (the paper's lambda_m = 1). The layer mapping is
g(0) = 0 (embeddings) and, by default, the uniform g(m) = m * N / M (TinyBERT-4 from
BERT-base: student layers 1..4 learn from teacher layers 3, 6, 9, 12), or any list.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from lmfactory.models.bert.bert_backbone import bert_kernel_initializer
from lmfactory.models.bert.bert_classifier import BERT_CLASSIFIER_INPUTS, BertClassifier
from lmfactory.models.encoder_utils import model_inputs, require_inputs
from lmfactory.models.task_losses import (batch_mean, sum_over_replicas, track_loss,
                                          with_regularization)
from lmfactory.models.task_model import SubclassedTask


# --------------------------------------------------------------------------- helpers


def uniform_layer_mapping(num_teacher_layers: int, num_student_layers: int) -> list:
    """g(m) = m * N / M for m = 1..M (1-indexed teacher layers; floor when M does not
    divide N), §4.1 "we adopt a uniform mapping function"."""
    if num_student_layers < 1:
        raise ValueError("The student needs at least one Transformer layer")
    if num_teacher_layers < num_student_layers:
        raise ValueError(f"The uniform mapping needs a teacher at least as deep as the student "
                         f"(teacher {num_teacher_layers} layers, student "
                         f"{num_student_layers}); give an explicit layer_mapping")
    return [m * num_teacher_layers // num_student_layers
            for m in range(1, num_student_layers + 1)]


def resolve_layer_mapping(layer_mapping, num_teacher_layers: int,
                          num_student_layers: int) -> list:
    """The teacher layer g(m) (1-indexed: 1 = the first block's output; 0, the embeddings,
    is always matched to the student's embeddings) of each student layer m = 1..M.

    ``layer_mapping``: ``"uniform"`` or a list of M teacher layers."""
    if isinstance(layer_mapping, str):
        if layer_mapping != "uniform":
            raise ValueError(f"layer_mapping must be 'uniform' or a list of "
                             f"{num_student_layers} teacher layers, got {layer_mapping!r}")
        return uniform_layer_mapping(num_teacher_layers, num_student_layers)
    try:
        mapping = [int(g) for g in layer_mapping]
    except (TypeError, ValueError):
        raise ValueError(f"layer_mapping must be 'uniform' or a list of teacher layer "
                         f"numbers, got {layer_mapping!r}") from None
    if len(mapping) != num_student_layers:
        raise ValueError(f"layer_mapping lists {len(mapping)} teacher layers for a student of "
                         f"{num_student_layers} layers: {mapping}")
    if any(not 1 <= g <= num_teacher_layers for g in mapping):
        raise ValueError(f"layer_mapping {mapping} must name teacher layers 1..."
                         f"{num_teacher_layers} (1-indexed; 0, the embeddings, is implicit)")
    return mapping


def attention_logits(block, hidden_state):
    """A = Q K^T / sqrt(d_k) of a keras-nlp `TransformerEncoder` for its input
    ``hidden_state`` [B, T, H]: [B, heads, T, T], before masking and softmax.

    keras-nlp's block applies its attention to its input (post-LN, BERT) or to the input's
    LayerNorm (pre-LN); the projections are the block's own, so the softmax of these scores
    (with padding keys masked) is exactly the block's attention probabilities."""
    attention = block._self_attention_layer
    x = block._self_attention_layer_norm(hidden_state) if block.normalize_first else hidden_state
    query = attention.query_dense(x)  # [B, T, heads, d_k]
    key = attention.key_dense(x)
    scale = 1.0 / math.sqrt(float(attention.key_dim))
    return ops.einsum("btnd,bsnd->bnts", query, key) * ops.cast(scale, query.dtype)


def _backbone_dims(backbone) -> tuple:
    """(layers, hidden size, heads) of a keras-nlp-block encoder backbone."""
    blocks = list(getattr(backbone, "transformer_layers", []))
    if not blocks or not hasattr(backbone, "call_with_states"):
        raise TypeError(f"{type(backbone).__name__} is not an encoder backbone with "
                        f"`transformer_layers` and `call_with_states`; TinyBERT distils "
                        f"BERT-style encoders")
    config = backbone.get_config()
    return len(blocks), int(config["hidden_dim"]), int(config["num_heads"])


# --------------------------------------------------------------------------- base


class TinyBertDistillation(SubclassedTask, register=False):
    """What TinyBERT's two distillers share: the frozen teacher, the layer mapping g, the
    projections W_e and W_h, and the embedding / hidden-state / attention losses (module
    docstring). Not registered as a task itself; see the two subclasses."""

    needs_teacher = True
    serialized_models = ("backbone", "teacher")

    def __init__(self, backbone, teacher, layer_mapping="uniform", **kwargs):
        super().__init__(**kwargs)
        if not hasattr(teacher, "backbone"):
            raise TypeError(f"The TinyBERT teacher must be a trained task model with a "
                            f"`.backbone` (e.g. BertPretrainer, BertClassifier); got "
                            f"{type(teacher).__name__}")
        teacher_layers, teacher_hidden, teacher_heads = _backbone_dims(teacher.backbone)
        student_layers, student_hidden, student_heads = _backbone_dims(backbone)
        if teacher_heads != student_heads:
            raise ValueError(f"Attention-based distillation compares the attention matrices "
                             f"head by head (§3.1 Eq. 7), so the student needs the teacher's "
                             f"number of heads: teacher {teacher_heads}, student "
                             f"{student_heads}")
        teacher_vocabulary = teacher.backbone.get_config().get("vocabulary_size")
        student_vocabulary = backbone.get_config().get("vocabulary_size")
        if teacher_vocabulary != student_vocabulary:
            raise ValueError(f"Teacher and student must share the vocabulary: teacher "
                             f"{teacher_vocabulary} tokens, student {student_vocabulary}")
        # === Layers ===
        self.backbone = backbone
        self.teacher = teacher
        self.teacher.trainable = False
        # W_e (Eq. 9) and W_h (Eq. 8): student width d' -> teacher width d; nn.Linear with a
        # bias in the released code ("fit_dense").
        self.embedding_projection = keras.layers.Dense(
            teacher_hidden, kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy, name="embedding_projection")
        self.hidden_projection = keras.layers.Dense(
            teacher_hidden, kernel_initializer=bert_kernel_initializer(),
            dtype=backbone.dtype_policy, name="hidden_projection")
        for projection in (self.embedding_projection, self.hidden_projection):
            projection.build((None, None, student_hidden))

        # === Config ===
        self.layer_mapping = (layer_mapping if isinstance(layer_mapping, str)
                              else [int(g) for g in layer_mapping])
        self.teacher_layers = resolve_layer_mapping(layer_mapping, teacher_layers,
                                                    student_layers)

        # === Metrics ===
        self.embedding_loss_tracker = keras.metrics.Mean(name="loss_embedding")
        self.hidden_loss_tracker = keras.metrics.Mean(name="loss_hidden")
        self.attention_loss_tracker = keras.metrics.Mean(name="loss_attention")

    def intermediate_outputs(self, student_states, teacher_states):
        """Student and teacher tensors compared by the intermediate losses, batch first:
        `embedding` / `teacher_embedding` [B, T, d], `hidden_states` /
        `teacher_hidden_states` [B, M, T, d] (student through W_e / W_h),
        `attention_logits` / `teacher_attention_logits` [B, M, heads, T, T]."""
        student_hidden = student_states["hidden_states"]
        teacher_hidden = teacher_states["hidden_states"]
        student_blocks = self.backbone.transformer_layers
        teacher_blocks = self.teacher.backbone.transformer_layers
        student_attention = [attention_logits(block, student_hidden[m])
                             for m, block in enumerate(student_blocks)]
        # Teacher layer g's attention is block g - 1's, applied to hidden state g - 1.
        teacher_attention = [attention_logits(teacher_blocks[g - 1], teacher_hidden[g - 1])
                             for g in self.teacher_layers]
        detach = ops.stop_gradient
        return {
            "embedding": self.embedding_projection(student_hidden[0]),
            "teacher_embedding": detach(teacher_hidden[0]),
            "hidden_states": ops.stack(
                [self.hidden_projection(h) for h in student_hidden[1:]], axis=1),
            "teacher_hidden_states": detach(ops.stack(
                [teacher_hidden[g] for g in self.teacher_layers], axis=1)),
            "attention_logits": ops.stack(student_attention, axis=1),
            "teacher_attention_logits": detach(ops.stack(teacher_attention, axis=1)),
        }

    def intermediate_losses(self, padding_mask, y_pred):
        """``{"embedding", "hidden", "attention"}`` MSE terms (each a replica's share of the
        global-batch mean; hidden and attention summed over the M mapped layers)."""
        tokens = ops.cast(padding_mask, "float32")  # [B, T]
        num_tokens = sum_over_replicas(ops.sum(tokens)) + 1e-5
        width = ops.cast(ops.shape(y_pred["teacher_embedding"])[-1], "float32")

        def squared(a, b):
            return ops.square(ops.cast(a, "float32") - ops.cast(b, "float32"))

        embedding = ops.sum(
            tokens[:, :, None] * squared(y_pred["embedding"], y_pred["teacher_embedding"])
        ) / (num_tokens * width)
        hidden = ops.sum(
            tokens[:, None, :, None]
            * squared(y_pred["hidden_states"], y_pred["teacher_hidden_states"])
        ) / (num_tokens * width)
        pairs = tokens[:, None, None, :, None] * tokens[:, None, None, None, :]
        heads = ops.cast(ops.shape(y_pred["attention_logits"])[2], "float32")
        num_pairs = sum_over_replicas(ops.sum(tokens * ops.sum(tokens, axis=1,
                                                               keepdims=True))) + 1e-5
        attention = ops.sum(
            pairs * squared(y_pred["attention_logits"], y_pred["teacher_attention_logits"])
        ) / (num_pairs * heads)
        track_loss(self.embedding_loss_tracker, embedding)
        track_loss(self.hidden_loss_tracker, hidden)
        track_loss(self.attention_loss_tracker, attention)
        return {"embedding": embedding, "hidden": hidden, "attention": attention}

    def get_config(self):
        config = super().get_config()
        config["layer_mapping"] = (self.layer_mapping if isinstance(self.layer_mapping, str)
                                   else [int(g) for g in self.layer_mapping])
        return config


# --------------------------------------------------------------------------- general


class TinyBertGeneralDistiller(TinyBertDistillation):
    """TinyBERT's general distillation (§3.2, Figure 2 left): L = L_embd + L_hidn + L_attn.

    "In general distillation, we use the original BERT without fine-tuning as the teacher
    and a large-scale text corpus as the training data. By performing the Transformer
    distillation on the text from general domain, we obtain a general TinyBERT". The
    prediction layer is not distilled at this stage, so the masked-LM labels of the `mlm`
    batches are not used (only their inputs).

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`, and `segment_ids`
        (zeros when absent); other keys (`mask_positions`) are ignored.
    Outputs (dict): see `TinyBertDistillation.intermediate_outputs`.
    y / sample_weight: ignored. Metrics: `loss_embedding`, `loss_hidden`, `loss_attention`.

    Args:
        backbone: the student (`TinyBertBackbone`), randomly initialised.
        teacher: the pre-trained teacher task model (e.g. `BertPretrainer`); frozen.
        layer_mapping: ``"uniform"`` or the list of 1-indexed teacher layers g(1..M).
    """

    def __init__(self, backbone, teacher, layer_mapping="uniform", **kwargs):
        super().__init__(backbone, teacher, layer_mapping=layer_mapping, **kwargs)
        self.built = True

    def call(self, inputs, training=None):
        require_inputs(type(self).__name__, inputs, ("token_ids", "padding_mask"))
        student_states = self.backbone.call_with_states(model_inputs(self.backbone, inputs),
                                                        training=training)
        teacher_states = self.teacher.backbone.call_with_states(
            model_inputs(self.teacher.backbone, inputs), training=False)
        return self.intermediate_outputs(student_states, teacher_states)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        losses = self.intermediate_losses(x["padding_mask"], y_pred)
        return with_regularization(
            self, losses["embedding"] + losses["hidden"] + losses["attention"])


# --------------------------------------------------------------------------- task-specific


class TinyBertTaskDistiller(TinyBertDistillation):
    """TinyBERT's task-specific distillation (§3.2, Figure 2 right; Eq. 10-11).

    The teacher is a fine-tuned classifier (e.g. `BertClassifier`); the student is the
    general TinyBERT with a new classification head (`classifier`, a `BertClassifier` on the
    student backbone: what gets exported). The loss is

        intermediate_weight * (L_embd + L_hidn + L_attn) + prediction_weight * L_pred,

    with L_pred = CE(softmax(z^T / t), log_softmax(z^S / t)), the soft cross-entropy between
    teacher and student logits at temperature t (t = 1 in the paper), averaged over the batch.
    As in the paper, the task labels do not enter the loss: the student learns the
    teacher's predictions only; y feeds the `accuracy` metric. The released code runs
    two stages, first the intermediate layers alone, then the prediction layer alone:
    `intermediate_weight=1, prediction_weight=0` then `0, 1` reproduce that; both at 1 (the
    default) is Eq. 11's joint objective.

    Inputs (dict, int32 [batch, seq_len]): the classifier's `token_ids`, `padding_mask`,
        `segment_ids`.
    Outputs (dict): `logits` [B, num_classes] (the student's), `teacher_logits`, and the
        intermediate tensors of `TinyBertDistillation.intermediate_outputs`.
    y: the task labels [B] (metric only). Metrics: `loss_embedding`, `loss_hidden`,
        `loss_attention`, `loss_prediction`, `accuracy`.

    Args:
        backbone: the student (`TinyBertBackbone`), after general distillation.
        teacher: the fine-tuned classifier, outputting logits [B, num_classes]; frozen.
        num_classes: number of labels of the task.
        layer_mapping: ``"uniform"`` or the list of 1-indexed teacher layers g(1..M).
        temperature: t of the prediction-layer loss.
        intermediate_weight, prediction_weight: weights of the two parts of the loss.
        dropout: dropout of the student's classification head.
    """

    def __init__(self, backbone, teacher, num_classes, layer_mapping="uniform",
                 temperature=1.0, intermediate_weight=1.0, prediction_weight=1.0,
                 dropout=0.1, **kwargs):
        super().__init__(backbone, teacher, layer_mapping=layer_mapping, **kwargs)
        teacher_classes = getattr(teacher, "output", None)
        teacher_classes = getattr(teacher_classes, "shape", (None,))[-1]
        if teacher_classes is not None and int(teacher_classes) != int(num_classes):
            raise ValueError(f"The teacher classifier predicts {teacher_classes} classes, the "
                             f"student {num_classes}")
        if float(temperature) <= 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        # === Layers ===
        self.classifier = BertClassifier(backbone, num_classes=num_classes, dropout=dropout)

        # === Config ===
        self.num_classes = int(num_classes)
        self.temperature = float(temperature)
        self.intermediate_weight = float(intermediate_weight)
        self.prediction_weight = float(prediction_weight)
        self.dropout = dropout

        # === Metrics ===
        self.prediction_loss_tracker = keras.metrics.Mean(name="loss_prediction")
        self.accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.built = True

    def call(self, inputs, training=None):
        require_inputs(type(self).__name__, inputs, BERT_CLASSIFIER_INPUTS)
        student_states = self.backbone.call_with_states(
            {name: inputs[name] for name in BERT_CLASSIFIER_INPUTS}, training=training)
        # The classifier's own head on the same forward pass (same weights as
        # `self.classifier(inputs)`).
        logits = self.classifier.output_dense(self.classifier.output_dropout(
            student_states["pooled_output"], training=training))
        teacher_states = self.teacher.backbone.call_with_states(
            model_inputs(self.teacher.backbone, inputs), training=False)
        teacher_logits = self.teacher(inputs, training=False)
        outputs = self.intermediate_outputs(student_states, teacher_states)
        outputs["logits"] = logits
        outputs["teacher_logits"] = ops.stop_gradient(teacher_logits)
        return outputs

    def prediction_loss(self, y_pred):
        """L_pred (Eq. 10): soft cross-entropy, a replica's share of the global-batch mean."""
        t = self.temperature
        student_log_probs = ops.log_softmax(ops.cast(y_pred["logits"], "float32") / t, -1)
        teacher_probs = ops.softmax(ops.cast(y_pred["teacher_logits"], "float32") / t, -1)
        return batch_mean(-ops.sum(teacher_probs * student_log_probs, axis=-1))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        losses = self.intermediate_losses(x["padding_mask"], y_pred)
        prediction = self.prediction_loss(y_pred)
        track_loss(self.prediction_loss_tracker, prediction)
        if y is not None:
            self.accuracy.update_state(ops.reshape(y, (-1,)),
                                       ops.cast(y_pred["logits"], "float32"))
        intermediate = losses["embedding"] + losses["hidden"] + losses["attention"]
        return with_regularization(
            self, self.intermediate_weight * intermediate + self.prediction_weight * prediction)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_classes": self.num_classes,
            "temperature": self.temperature,
            "intermediate_weight": self.intermediate_weight,
            "prediction_weight": self.prediction_weight,
            "dropout": self.dropout,
        })
        return config
