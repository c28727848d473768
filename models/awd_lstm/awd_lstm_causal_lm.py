"""The AWD-LSTM language model and its training objective (Merity, Keskar & Socher 2018)."""

from __future__ import annotations

import keras
from keras import ops

from lmfactory.models.awd_lstm.scaled_updates import apply_scaled_updates
from lmfactory.models.awd_lstm.ulmfit_schedule import (backbone_groups, group_scales,
                                                       use_slanted_triangular)
from lmfactory.models.awd_lstm.variable_bptt import sample_sequence_length
from lmfactory.models.backend import tf
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import (next_token_loss, sum_over_replicas, track_loss,
                                          with_regularization)
from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.tied_output import tied_logits

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")
# The optional input of ordered-stream batches (CONTRACTS §3 ``causal_lm_streams`` /
# ``causal_lm_bptt``): the index of the batch's window in this pass over the streams
# (0 = the streams start: the carried state is reset).
STREAM_POSITION = "stream_position"
PHASES = ("train", "eval")


def _masked_mean(values, mask):
    """Mean of ``values`` [B, T, H] over the positions where ``mask`` [B, T] is 1 (this
    replica's share of the global mean); 0 without any."""
    mask = ops.cast(mask, values.dtype)[..., None]
    count = sum_over_replicas(ops.sum(mask)) * ops.cast(ops.shape(values)[-1], values.dtype)
    return ops.sum(values * mask) / ops.maximum(count, 1.0)


def activation_regularization(dropped_output, mask, alpha):
    """AR (§4.6): alpha * L2(m ⊙ h_t), the mean square of the dropped-out outputs of the
    last LSTM layer (the reference code: ``alpha * dropped_h.pow(2).mean()``)."""
    return alpha * _masked_mean(ops.square(dropped_output), mask)


def temporal_activation_regularization(output, mask, beta):
    """TAR (§4.6): beta * L2(h_t - h_{t+1}) on the last layer's outputs *without* dropout,
    averaged over consecutive pairs of real positions (``beta * (h[1:] -
    h[:-1]).pow(2).mean()``)."""
    difference = output[:, 1:] - output[:, :-1]
    mask = ops.cast(mask, "int32")
    pairs = mask[:, 1:] * mask[:, :-1]
    return beta * _masked_mean(ops.square(difference), pairs)


class AwdLstmCausalLM(CausalLMGeneration, SubclassedTask):
    """An `AwdLstmBackbone` with its tied softmax, trained with the regularisers of §4.

    Output layer (§4.5 weight tying): logits = dropout(h) E^T + b with the embedding matrix
    E of the backbone (the reference decoder is a Linear layer whose weight is the encoder's
    and whose bias is its own, initialised to 0). The output dropout (the backbone's
    `dropout`, 0.4) is locked dropout (one mask per sequence, `SpatialDropout1D`).

    Loss (training): the mean next-word negative log-likelihood over real positions, plus
    AR = alpha * mean(dropout(h)^2) and TAR = beta * mean((h_t - h_{t+1})^2) of the last
    layer's outputs (§4.6; alpha = 2, beta = 1 in §5). Evaluation (`test_step`, the
    `nll` metric, perplexity = exp(nll)) scores the NLL alone, dropout off.

    Carried state (§4 / §5 training procedure; the reference code's ``hidden =
    repackage_hidden(hidden)`` every batch): built with ``stream_batch_size`` = B (the
    trainer passes the batch size for an objective that declares ``ordered_streams``, whose
    row b of batch k + 1 continues row b of batch k in the corpus, as the reference's
    ``batchify``), the model keeps per LSTM layer the final (h, c) [B, units] of the last
    window in non-trainable variables, one set for training and one for evaluation, and
    starts the next window from it with the gradient stopped (truncated BPTT: no gradient
    reaches an earlier window). The state is reset to zero when a batch's
    ``stream_position`` is 0 (the streams start again: a new epoch or evaluation pass).
    ``self(x)`` carries the evaluation state too when ``x`` has ``stream_position`` (a
    perplexity loop over the held-out streams); without it (serving, generation), or without
    ``stream_batch_size``, every sequence starts from the zero state.

    Variable-length BPTT (§4.1, `variable_bptt`): with the carried state, the reader cuts
    the streams into windows of sampled length (objective ``causal_lm_bptt``) and each step
    scales the optimizer's step by the window's seq_len / bptt (`scaled_updates`: the
    update, not the gradient, so the scale holds under Adam too). Without it (independent
    windows), each training step keeps a prefix of the batch's fixed-length windows whose
    length is sampled around `bptt` (`variable_length=True`) and scales likewise.

    ULMFiT's target task LM fine-tuning (Howard & Ruder 2018 §3.2, the `lm_finetuning`
    stage) adds discriminative fine-tuning (`discriminative_factor` 2.6: each LSTM layer,
    then the tied embedding / softmax with the output bias, from the lowest rate to the
    highest, as the reference implementation groups the LM) and slanted triangular learning rates (`slanted_triangular`, over
    `total_steps`, which the pipeline's trainer passes), both off by default (AWD-LSTM's own
    training has neither).

    `self(x)` returns the logits [B, T, V]; `generate_ids` (`CausalLMGeneration`) decodes
    through the backbone's (h, c) decoding state.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Targets (CONTRACTS §3 `causal_lm`): y = next ids [B, T], sample_weight [B, T].
    Metrics: `loss`, `nll`, `ar`, `tar`, `sequence_length` (mean sampled BPTT length).

    Args:
        backbone: an `AwdLstmBackbone`.
        alpha: AR weight (2).
        beta: TAR weight (1).
        bptt: the base BPTT length (70).
        variable_length: sample the BPTT length per step (§4.1).
        total_steps: training steps (STLR's T); the trainer passes it.
        discriminative_factor: ULMFiT's per-layer learning-rate divisor (2.6), None: off.
        slanted_triangular: use STLR (needs `total_steps`).
        cut_frac, ratio: STLR's (0.1, 32).
        stream_batch_size: rows of the ordered streams whose state is carried (None: off).
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, alpha=2.0, beta=1.0, bptt=70, variable_length=True,
                 total_steps=None, discriminative_factor=None, slanted_triangular=False,
                 cut_frac=0.1, ratio=32.0, stream_batch_size=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.alpha, self.beta = float(alpha), float(beta)
        self.bptt, self.variable_length = int(bptt), bool(variable_length)
        if slanted_triangular and not total_steps:
            raise ValueError("AwdLstmCausalLM: slanted_triangular needs total_steps")
        self.total_steps = None if total_steps is None else int(total_steps)
        self.discriminative_factor = None if discriminative_factor is None \
            else float(discriminative_factor)
        self.slanted_triangular = bool(slanted_triangular)
        self.cut_frac, self.ratio = float(cut_frac), float(ratio)
        self.output_dropout = keras.layers.SpatialDropout1D(
            backbone.dropout, dtype=backbone.dtype_policy, name="output_dropout")
        self.output_bias = self.add_weight(
            name="output_bias", shape=(backbone.vocabulary_size,), initializer="zeros")
        self.length_seed = keras.random.SeedGenerator(None)
        self.stream_batch_size = None if stream_batch_size is None else int(stream_batch_size)
        self.carried_states = {}
        if self.stream_batch_size:
            for phase in PHASES:
                self.carried_states[phase] = [
                    tuple(self.add_weight(name=f"{phase}_{part}_{layer}",
                                          shape=(self.stream_batch_size, lstm.units),
                                          initializer="zeros", trainable=False)
                          for part in ("h", "c"))
                    for layer, lstm in enumerate(backbone.lstm_layers)]
        self.built = True
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.ar_tracker = keras.metrics.Mean(name="ar")
        self.tar_tracker = keras.metrics.Mean(name="tar")
        self.length_tracker = keras.metrics.Mean(name="sequence_length")
        self._generation_state()

    # ------------------------------------------------------------------ forward

    def logits(self, hidden):
        """The tied softmax's logits of hidden states [..., H]."""
        logits = tied_logits(self.backbone.token_embedding, hidden)
        return logits + ops.cast(self.output_bias, logits.dtype)

    def predictions(self, inputs, training=False, phase=None):
        """dict: `logits` [B, T, V], `output` (last layer, undropped) and `dropped_output`.
        With ``phase`` ("train" / "eval"), a model with ``stream_batch_size`` and inputs
        with ``stream_position``: from (and updating) that phase's carried state."""
        if not isinstance(inputs, dict) or any(k not in inputs for k in CAUSAL_LM_INPUTS):
            raise ValueError(f"AwdLstmCausalLM takes a dict with {list(CAUSAL_LM_INPUTS)}, "
                             f"got {sorted(inputs) if isinstance(inputs, dict) else inputs!r}")
        if phase in self.carried_states and STREAM_POSITION in inputs:
            output = self._carried_output(inputs, phase, training)
        else:
            inputs = {name: inputs[name] for name in CAUSAL_LM_INPUTS}
            output = self.backbone(inputs, training=training)["sequence_output"]
        dropped = self.output_dropout(output, training=training)
        return {"logits": self.logits(dropped), "output": output, "dropped_output": dropped}

    def call(self, inputs, training=False):
        return self.predictions(inputs, training=training,
                                phase="train" if training else "eval")["logits"]

    # ------------------------------------------------------------------ carried state

    def _carried_output(self, inputs, phase, training):
        """The last layer's outputs of the batch's windows, run from the state the previous
        windows left (zero at ``stream_position`` 0); stores the new final state."""
        variables = self.carried_states[phase]
        batch = inputs["token_ids"].shape[0]
        if batch is not None and batch != self.stream_batch_size:
            raise ValueError(f"AwdLstmCausalLM carries the state of {self.stream_batch_size} "
                             f"streams; the batch has {batch} rows")
        start = ops.any(ops.equal(ops.cast(inputs[STREAM_POSITION], "int32"), 0))
        dtype = self.backbone.compute_dtype
        states = [tuple(ops.cast(ops.stop_gradient(ops.where(start, 0.0, v)), dtype)
                        for v in pair) for pair in variables]
        output, final = self.backbone.call_from_state(
            {name: inputs[name] for name in CAUSAL_LM_INPUTS}, states, training=training)
        for pair, new in zip(variables, final):
            for variable, value in zip(pair, new):
                variable.assign(ops.cast(ops.stop_gradient(value), variable.dtype))
        return output

    def reset_states(self):
        """Zeroes the carried states (training and evaluation)."""
        for pairs in self.carried_states.values():
            for pair in pairs:
                for variable in pair:
                    variable.assign(ops.zeros_like(variable))

    def call_with_state(self, token_ids, state, index):
        """One decoding step (models/generation.py): (logits [B, n, V], hidden, state)."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.logits(hidden), hidden, state

    # ------------------------------------------------------------------ loss

    def objective(self, x, y, sample_weight, predictions, regularize=True):
        """NLL (+ AR + TAR with ``regularize``) of ``predictions`` against next ids ``y``;
        updates the metrics."""
        loss = next_token_loss(ops.cast(y, "int32"), predictions["logits"], sample_weight,
                               self.nll_tracker)
        if regularize:
            mask = x["padding_mask"]
            ar = activation_regularization(
                ops.cast(predictions["dropped_output"], "float32"), mask, self.alpha)
            tar = temporal_activation_regularization(
                ops.cast(predictions["output"], "float32"), mask, self.beta)
            track_loss(self.ar_tracker, ar)
            track_loss(self.tar_tracker, tar)
            loss = loss + ar + tar
        return with_regularization(self, loss)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The training objective of ``x`` (recomputed with the dropout of ``training``:
        AR and TAR need the hidden states that the logits ``y_pred`` do not carry)."""
        return self.objective(x, y, sample_weight, self.predictions(
            x, training=training, phase="train" if training else "eval"))

    # ------------------------------------------------------------------ Keras steps

    def compile(self, optimizer="rmsprop", **kwargs):
        """Compiles with ``optimizer``, its rate replaced by STLR with `slanted_triangular`."""
        optimizer = keras.optimizers.get(optimizer)
        if self.slanted_triangular:
            use_slanted_triangular(optimizer, self.total_steps, self.cut_frac, self.ratio,
                                   type(self).__name__)
        super().compile(optimizer=optimizer, **kwargs)

    def layer_groups(self):
        """ULMFiT's layer groups of the language model, lowest rate first: each LSTM layer,
        then the tied embedding / softmax with the output bias on top. The reference
        implementation groups the LM so (fastai's ``awd_lstm_lm_split``: the RNN layers,
        then encoder + decoder last), so target-task LM fine-tuning (§3.2) trains the
        tied output layer at the full rate eta: the target task's words (new to the
        general-domain corpus, or rare in it) get their embeddings at the rate of the
        softmax they are, not at eta / 2.6^L. The classifier (`UlmfitClassifier`, the
        reference's ``awd_lstm_clas_split``) has the embedding at the bottom."""
        embedding, *lstms = backbone_groups(self.backbone)
        return lstms + [embedding + [self.output_bias]]

    def step_scales(self, variables, length_scale):
        """Per variable: the multiplier of its optimizer step (the BPTT length's, times the
        discriminative rate of its group)."""
        if self.discriminative_factor is None:
            return length_scale
        scales = group_scales(self.layer_groups(), variables, self.optimizer.iterations,
                              self.discriminative_factor)
        return [scale if length_scale is None else scale * length_scale
                for scale, _ in scales]

    def _results(self, loss):
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(sum_over_replicas(ops.stop_gradient(loss)))
        return self.get_metrics_result()

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        scale = None
        if "train" in self.carried_states and STREAM_POSITION in x:
            # The reader cut the windows (variable lengths with causal_lm_bptt): the whole
            # window is trained, so the next one continues from its end.
            length = ops.shape(y)[1]
            if self.variable_length:
                scale = ops.cast(length, "float32") / float(self.bptt)
            self.length_tracker.update_state(ops.cast(length, "float32"))
        elif self.variable_length:
            length = sample_sequence_length(self.bptt, ops.shape(y)[1], self.length_seed)
            x = {name: x[name][:, :length] for name in CAUSAL_LM_INPUTS}
            y = y[:, :length]
            sample_weight = None if sample_weight is None else sample_weight[:, :length]
            scale = ops.cast(length, "float32") / float(self.bptt)
            self.length_tracker.update_state(ops.cast(length, "float32"))
        with tf.GradientTape() as tape:
            loss = self.objective(x, y, sample_weight,
                                  self.predictions(x, training=True, phase="train"))
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        apply_scaled_updates(self.optimizer, gradients, variables,
                             self.step_scales(variables, scale))
        return self._results(loss)

    def test_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss = self.objective(x, y, sample_weight,
                              self.predictions(x, training=False, phase="eval"),
                              regularize=False)
        return self._results(loss)

    def get_config(self):
        config = super().get_config()
        config.update({"alpha": self.alpha, "beta": self.beta, "bptt": self.bptt,
                       "variable_length": self.variable_length,
                       "total_steps": self.total_steps,
                       "discriminative_factor": self.discriminative_factor,
                       "slanted_triangular": self.slanted_triangular,
                       "cut_frac": self.cut_frac, "ratio": self.ratio,
                       "stream_batch_size": self.stream_batch_size})
        return config


__all__ = ["AwdLstmCausalLM", "STREAM_POSITION", "activation_regularization",
           "temporal_activation_regularization"]
