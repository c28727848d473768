"""Token classification (NER) on any encoder backbone (Devlin et al. 2019 §4.3, Figure 4d)."""

from __future__ import annotations

import functools

import keras
from keras import ops

from lmfactory.models.task_losses import track_loss, weighted_mean, with_regularization
from lmfactory.models.task_model import Task, int_inputs


class FirstSubTokenLoss:
    """`compute_loss` of a token tagger: the mean negative log-likelihood over the positions
    with non-zero ``sample_weight`` (first sub-tokens, BERT §4.3), ``sum(w * nll) / (sum(w) +
    1e-5)`` over the global batch (``task_losses.weighted_mean``); without ``sample_weight``
    every non-padding position counts. Tracks ``token_loss`` and the weighted
    ``token_accuracy``; the model creates them with `_create_tagging_metrics`. Mixed into
    `TokenClassifier` and ``feature_based_tagger.FeatureBasedTagger`` (before
    `Task` in the bases)."""

    def _create_tagging_metrics(self):
        self.token_loss_tracker = keras.metrics.Mean(name="token_loss")
        self.token_accuracy = keras.metrics.SparseCategoricalAccuracy(name="token_accuracy")

    def token_weights(self, x, sample_weight):
        """The float32 loss weights [B, T]: ``sample_weight`` (a tensor, or a dict with
        ``labels``), else the padding mask of ``x``."""
        if isinstance(sample_weight, dict):
            sample_weight = sample_weight.get("labels")
        if sample_weight is None:
            sample_weight = x["padding_mask"]
        return ops.cast(sample_weight, "float32")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        logits = ops.cast(y_pred, "float32")
        weights = self.token_weights(x, sample_weight)
        nll = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        loss = weighted_mean(nll, weights)
        track_loss(self.token_loss_tracker, loss)
        self.token_accuracy.update_state(y, logits, sample_weight=weights)
        return with_regularization(self, loss)


class TokenClassifier(FirstSubTokenLoss, Task):
    """An encoder backbone with a per-token classification layer on ``sequence_output``.

    BERT §4.3 (Figure 4d): the final hidden vector of each token feeds a classification layer
    over the label set; for NER "we use the representation of the first sub-token as the
    input to the token-level classifier", so the loss counts only the first sub-token of
    each word (`TokenClassificationPreprocessor` gives those positions ``sample_weight`` 1,
    all others 0). Dropout 0.1 precedes the layer, as for every BERT fine-tuning head
    (Appendix A.3); its kernel is initialised N(0, 0.02) truncated, BERT's initialiser.

    Inputs: the backbone's input dict (``token_ids``, ``padding_mask`` and, where the
    architecture has segment embeddings, ``segment_ids``), int32 [batch, seq_len].
    Output: logits [batch, seq_len, num_labels].

    Loss (`FirstSubTokenLoss.compute_loss`; the model compiles with an optimizer only): the
    mean negative log-likelihood of the labels at the positions with non-zero
    ``sample_weight``. Metrics: ``token_loss`` and the weighted ``token_accuracy``.

    Args:
        backbone: any encoder backbone of the registry (``models.build(...)``).
        num_labels: the size of the tag set.
        dropout: dropout rate before the classification layer.
    """

    def __init__(self, backbone, num_labels, dropout=0.1, **kwargs):
        if int(num_labels) < 1:
            raise ValueError(f"num_labels must be positive, got {num_labels}")
        # === Layers ===
        self.backbone = backbone
        self.add_output_layers(
            int(num_labels), dropout,
            functools.partial(keras.initializers.TruncatedNormal, stddev=0.02),
            dtype=backbone.dtype_policy)

        # === Functional model ===
        inputs = int_inputs(backbone.input)
        logits = self.output_head(backbone(inputs)["sequence_output"])
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

        # === Config ===
        self.num_labels = int(num_labels)
        self.dropout = dropout

        # === Metrics ===
        self._create_tagging_metrics()

    def get_config(self):
        config = super().get_config()
        config.update({"num_labels": self.num_labels, "dropout": self.dropout})
        return config
