"""Span extraction (extractive question answering) on any encoder backbone: BERT's SQuAD head
(Devlin et al. 2019 §4.2, SQuAD v1.1; §4.3, SQuAD v2.0)."""

import keras
from keras import ops

from lmfactory.models.task_losses import batch_mean, track_loss, with_regularization
from lmfactory.models.task_model import Task, int_inputs

MASKED_LOGIT = -1e9  # a start/end logit where no answer may start or end


class SpanExtractor(Task):
    """A start vector S and an end vector E over the backbone's final hidden vectors T_i.

    §4.2: "We only introduce a start vector S ∈ R^H and an end vector E ∈ R^H during
    fine-tuning. The probability of word i being the start of the answer span is computed as
    a dot product between T_i and S followed by a softmax over all of the words in the
    paragraph"; the end likewise with E; "The training objective is the sum of the
    log-likelihoods of the correct start and end positions" (the released ``run_squad.py``
    averages the two cross-entropies, which is what ``compute_loss`` does). S and E are the
    two columns of one ``Dense(2)`` (with bias, as ``run_squad.py``'s ``cls/squad`` layer),
    initialised N(0, 0.02) truncated. §4.3 (v2.0): the no-answer span sits at ``[CLS]``
    (position 0) and is scored s_null = S·C + E·C.

    Positions outside ``span_mask`` (question tokens, separators, padding) get the logit
    -1e9, so the softmax runs over ``[CLS]`` and the paragraph tokens only.

    Inputs (dict, [batch, seq_len]): the backbone's inputs (``token_ids``, ``padding_mask``
    and ``segment_ids`` where it has segment embeddings) plus ``span_mask`` (bool / int:
    where an answer may start or end; ``models/tasks/span_preprocessor.py`` makes it).
    Outputs: ``{"start_logits", "end_logits"}`` float32 [batch, seq_len].
    Targets for ``fit``: ``y = {"start_positions": [B], "end_positions": [B]}`` (int).

    Args:
        backbone: any encoder backbone of the registry (``sequence_output`` [B, T, H]).
        initializer_range: stddev of the truncated-normal initialiser of S and E.
    """

    def __init__(self, backbone, initializer_range=0.02, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.span_dense = keras.layers.Dense(
            2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=backbone.dtype_policy,
            name="span_logits",
        )

        # === Functional model ===
        backbone_inputs = backbone.input if isinstance(backbone.input, dict) else {}
        names = tuple(backbone_inputs) or ("token_ids", "padding_mask", "segment_ids")
        inputs = int_inputs(names + ("span_mask",))
        sequence = backbone({name: inputs[name] for name in names})["sequence_output"]
        logits = ops.cast(self.span_dense(sequence), "float32")  # [B, T, 2]
        allowed = ops.cast(inputs["span_mask"], "bool")
        start_logits = ops.where(allowed, logits[..., 0], MASKED_LOGIT)
        end_logits = ops.where(allowed, logits[..., 1], MASKED_LOGIT)
        super().__init__(inputs=inputs,
                         outputs={"start_logits": start_logits, "end_logits": end_logits},
                         **kwargs)

        # === Config ===
        self.initializer_range = initializer_range

        # === Metrics ===
        self.loss_tracker = keras.metrics.Mean(name="span_loss")
        self.start_accuracy = keras.metrics.SparseCategoricalAccuracy(name="start_accuracy")
        self.end_accuracy = keras.metrics.SparseCategoricalAccuracy(name="end_accuracy")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """(CE(start) + CE(end)) / 2, each the mean over the global batch (``run_squad.py``'s
        ``total_loss``)."""
        loss = span_loss(y, y_pred)
        track_loss(self.loss_tracker, loss)
        self.start_accuracy.update_state(ops.reshape(y["start_positions"], (-1,)),
                                         y_pred["start_logits"])
        self.end_accuracy.update_state(ops.reshape(y["end_positions"], (-1,)),
                                       y_pred["end_logits"])
        return with_regularization(self, loss)

    def get_config(self):
        config = super().get_config()
        config.update({"initializer_range": self.initializer_range})
        return config


def span_loss(y, y_pred):
    """Mean of the start and end cross-entropies (this replica's share of the global batch
    mean): ``y`` = ``{"start_positions", "end_positions"}`` [B] or [B, 1], ``y_pred`` =
    ``{"start_logits", "end_logits"}`` [B, T]."""
    total = 0.0
    for target, logits in (("start_positions", "start_logits"), ("end_positions", "end_logits")):
        labels = ops.reshape(y[target], (-1,))
        nll = keras.losses.sparse_categorical_crossentropy(
            labels, ops.cast(y_pred[logits], "float32"), from_logits=True)
        total = total + batch_mean(nll)
    return total / 2.0


__all__ = ["MASKED_LOGIT", "SpanExtractor", "span_loss"]
