"""ULMFiT's target task classifier (Howard & Ruder 2018 §3.3) and its fine-tuning schedule
(§3.2-§3.3): discriminative learning rates, slanted triangular learning rates, gradual
unfreezing."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.awd_lstm.concat_pooling import ConcatPooling
from lmfactory.models.awd_lstm.scaled_updates import apply_scaled_updates
from lmfactory.models.awd_lstm.ulmfit_schedule import (adam_betas, backbone_groups,
                                                       group_scales,
                                                       schedule_value,
                                                       use_slanted_triangular)
from lmfactory.models.backend import tf
from lmfactory.models.task_model import Task, int_inputs

CLASSIFIER_INPUTS = ("token_ids", "padding_mask")
# The reference head's PyTorch ``BatchNorm1d``: running statistics updated with 0.1 of each
# batch (Keras's momentum 0.9; Keras's default 0.99 lags ~100 steps behind the features
# that fine-tuning keeps changing, and starts from variance 1 while pooled LSTM features
# have variances ~1e-3, so a few hundred steps leave the evaluation-time normalisation
# far off), epsilon 1e-5.
BATCH_NORM_MOMENTUM = 0.9
BATCH_NORM_EPSILON = 1e-5


class UlmfitClassifier(Task):
    """Classifier fine-tuning of an `AwdLstmBackbone` (ULMFiT §3.3).

    Head: concat pooling h_c = [h_T, maxpool(H), meanpool(H)] over the real tokens of the
    last LSTM layer (`ConcatPooling`), then "two additional linear blocks ... Each block
    uses batch normalization and dropout, with ReLU activations for the intermediate layer
    and a softmax activation that outputs a probability distribution over target classes":
    BatchNorm, Dropout(`dropout`), Dense(`hidden_units` = 50, ReLU), BatchNorm,
    Dropout(`hidden_dropout`), Dense(K). The model returns logits [B, K] (the softmax is in
    the loss). Dropouts 0.4 and 0.1 are the reference implementation's (fastai's
    ``AWD_LSTM`` classifier head; the paper gives no figure), and so are its BatchNorm
    statistics (PyTorch's momentum 0.1 = Keras's 0.9, epsilon 1e-5).

    Training (`train_step`), over the layer groups (bottom to top) embedding, each LSTM
    layer, the head:

    * discriminative fine-tuning (§3.2): group l learns at eta / 2.6^(L-1-l)
      (`ulmfit_schedule.discriminative_scales`), applied to the optimizer's *step* (`scaled_updates`), so
      it holds under Adam, where scaling a gradient would not change the step;
    * slanted triangular learning rates (§3.2, `SlantedTriangular`, cut_frac 0.1, ratio
      32): with `total_steps` known, `compile` replaces the optimizer's learning rate by
      STLR peaking at the optimizer's own (peak) rate;
    * gradual unfreezing (§3.3): only the top group trains at first, one more group every
      `unfreeze_every` steps (default total_steps // number of groups: the paper's "one
      epoch" per group becomes an equal share of the steps); a frozen group gets a zero
      gradient and no update, and its Adam moments stay empty until it is unfrozen; then
      Adam's bias correction restarts for it, as the reference's per-parameter Adam does
      (`ulmfit_schedule.adam_restart_factors`; without it the first steps of a newly
      unfrozen group are ~3x its rate).

    The paper's BPTT for text classification (BPT3C) is not needed for the pipeline's
    fixed-length sequences: the whole sequence is one batch through the LSTMs.

    Args:
        backbone: an `AwdLstmBackbone`.
        num_classes: K.
        hidden_units: width of the intermediate linear block (50).
        dropout: dropout of the first block (0.4).
        hidden_dropout: dropout of the second block (0.1).
        discriminative_factor: 2.6.
        total_steps: training steps (for STLR and the unfreezing period); None: the
            ``total_steps`` of the compiled optimizer's schedule if it names one, else
            neither (a constant rate, all groups training).
        cut_frac, ratio: STLR's (0.1, 32).
        unfreeze_every: steps between unfreezing two groups (default total_steps // the
            number of groups); 0: no gradual unfreezing.
    """

    def __init__(self, backbone, num_classes, hidden_units=50, dropout=0.4,
                 hidden_dropout=0.1, discriminative_factor=2.6, total_steps=None,
                 cut_frac=0.1, ratio=32.0, unfreeze_every=None, **kwargs):
        dtype = backbone.dtype_policy
        self.backbone = backbone
        self.pooling = ConcatPooling(dtype=dtype, name="concat_pooling")
        self.head_layers = [
            keras.layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM,
                                            epsilon=BATCH_NORM_EPSILON, dtype=dtype,
                                            name="block_1_batch_norm"),
            keras.layers.Dropout(dropout, dtype=dtype, name="block_1_dropout"),
            keras.layers.Dense(hidden_units, activation="relu", dtype=dtype,
                               name="block_1_dense"),
            keras.layers.BatchNormalization(momentum=BATCH_NORM_MOMENTUM,
                                            epsilon=BATCH_NORM_EPSILON, dtype=dtype,
                                            name="block_2_batch_norm"),
            keras.layers.Dropout(hidden_dropout, dtype=dtype, name="block_2_dropout"),
            keras.layers.Dense(num_classes, dtype=dtype, name="logits"),
        ]
        inputs = int_inputs(CLASSIFIER_INPUTS)
        x = self.pooling(backbone(inputs)["sequence_output"], inputs["padding_mask"])
        for layer in self.head_layers:
            x = layer(x)
        super().__init__(inputs=inputs, outputs=x, **kwargs)
        self.num_classes, self.hidden_units = int(num_classes), int(hidden_units)
        self.dropout, self.hidden_dropout = float(dropout), float(hidden_dropout)
        self.discriminative_factor = float(discriminative_factor)
        self.cut_frac, self.ratio = float(cut_frac), float(ratio)
        self.unfreeze_every = unfreeze_every
        self._resolve_schedule(total_steps)

    # ------------------------------------------------------------------ layer groups

    def layer_groups(self):
        """The trainable variables of each group, bottom to top: the embedding, each LSTM
        layer, the head."""
        return backbone_groups(self.backbone) + [
            [v for layer in self.head_layers for v in layer.trainable_variables]]

    # ------------------------------------------------------------------ training

    def _resolve_schedule(self, total_steps):
        """Sets `total_steps` and the default unfreezing period (total_steps // groups)."""
        self.total_steps = None if total_steps is None else int(total_steps)
        if self.unfreeze_every is None and self.total_steps:
            self.unfreeze_every = max(1, self.total_steps // len(self.layer_groups()))

    def compile(self, optimizer="rmsprop", **kwargs):
        """Compiles with ``optimizer``, its learning rate replaced by slanted triangular
        learning rates peaking at its own (peak) rate when the number of steps is known:
        `total_steps`, else the ``total_steps`` its schedule names (the pipeline trainer's
        warmup / decay schedule does, components/trainer/optimization.py)."""
        optimizer = keras.optimizers.get(optimizer)
        if self.total_steps is None:
            self._resolve_schedule(schedule_value(optimizer, ("total_steps",)))
        if self.total_steps:
            use_slanted_triangular(optimizer, self.total_steps, self.cut_frac, self.ratio,
                                   type(self).__name__)
        super().compile(optimizer=optimizer, **kwargs)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                     training=True)
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        scales = group_scales(self.layer_groups(), variables, self.optimizer.iterations,
                              self.discriminative_factor, self.unfreeze_every,
                              adam_betas=adam_betas(self.optimizer))
        apply_scaled_updates(self.optimizer, gradients, variables,
                             scales=[scale for scale, _ in scales],
                             gradient_masks=[mask for _, mask in scales])
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_classes": self.num_classes, "hidden_units": self.hidden_units,
            "dropout": self.dropout, "hidden_dropout": self.hidden_dropout,
            "discriminative_factor": self.discriminative_factor,
            "total_steps": self.total_steps, "cut_frac": self.cut_frac, "ratio": self.ratio,
            "unfreeze_every": self.unfreeze_every})
        return config


__all__ = ["UlmfitClassifier"]
