"""The character Transformer language model and its auxiliary losses (Al-Rfou et al. 2018
§2, "Auxiliary Losses")."""

import math

import keras
from keras import ops

from lmfactory.models import backend
from lmfactory.models.backend import tf
from lmfactory.models.generation import CausalLMGeneration
from lmfactory.models.task_losses import sum_over_replicas, track_loss, with_regularization
from lmfactory.models.task_model import SubclassedTask
from lmfactory.models.tied_output import tied_logits

CAUSAL_LM_INPUTS = ("token_ids", "padding_mask")


def bits_per_character(nll):
    """Bits per character of a mean negative log-likelihood in nats: ``nll / ln 2``."""
    return nll / math.log(2.0)


def intermediate_loss_weights(step, total_steps, num_layers):
    """The weights of the intermediate-layer losses at training step ``step`` (§2,
    "Intermediate Layer Losses"): with n layers, the loss of intermediate layer l
    (1 <= l < n) contributes until ``l / (2n)`` of the training is finished and not after,
    so every intermediate loss is gone once half of the training is done.

    Computed with ops from a step that may be a tensor (e.g. the optimizer's
    ``iterations`` inside a compiled train step): layer l weighs 1 while
    ``2 n step < l total_steps`` and 0 from then on (integer arithmetic, exact).

    Returns:
        float32 [num_layers - 1], the weight of layers 1 .. n - 1.
    """
    layers = ops.arange(1, num_layers, dtype="int64")
    step = ops.cast(step, "int64")
    active = ops.less(2 * num_layers * step, layers * int(total_steps))
    return ops.cast(active, "float32")


def _check_inputs(inputs):
    if not isinstance(inputs, dict):
        raise TypeError(f"CharTransformerLM takes a dict with {list(CAUSAL_LM_INPUTS)}, got "
                        f"{type(inputs).__name__}")
    missing = [name for name in CAUSAL_LM_INPUTS if name not in inputs]
    if missing:
        raise ValueError(f"CharTransformerLM inputs lack {missing}; got {sorted(inputs)}")


def _weighted_mean(values, weights):
    """This replica's share of the global weighted mean ``sum(w v) / sum(w)`` (0 when the
    global batch has no weight)."""
    return ops.sum(weights * values) / ops.maximum(sum_over_replicas(ops.sum(weights)), 1e-9)


class CharTransformerLM(CausalLMGeneration, SubclassedTask):
    """A `CharTransformerBackbone` with the prediction layers and training losses of §2.

    The model predicts the next character at every position from the final layer's output
    through the transposed token embedding; `self(x)` returns these logits [B, T, V] and is
    all that evaluation and inference use ("During evaluation and inference time, only the
    prediction of the final position at the final layer is used": the bits per character
    of a text are scored from it, `charlm_evaluation`).

    Training adds the three auxiliary losses of §2, "Auxiliary Losses":

    * Multiple Positions: every position of the sequence predicts its next character, not
      only the last one (a loss over all positions, never decayed). Each layer's loss is the
      mean negative log-likelihood over all real positions of the batch.
    * Intermediate Layer Losses (`intermediate_losses`): the output of every intermediate
      layer l < n also predicts the next character at every position, through its own
      classifier (here LayerNorm + Dense: the backbone normalises only the final output).
      Its loss enters with weight 1 until ``l / (2n)`` of the `total_steps` training steps
      are done, then with weight 0 (`intermediate_loss_weights`): lower layers drop out
      first and none is left after half of the training.
    * Multiple Targets (`multiple_targets`): at each position every layer (the final one
      included) also predicts the character two positions ahead with a separate classifier;
      that loss is weighted by `multiple_targets_weight` (0.5) and added to its layer's
      loss. The last position of a block has no such target and is left out.

    Total loss = sum over layers l of w_l * (NLL_next(l) + 0.5 * NLL_two_ahead(l)), w_n = 1.
    The separate classifiers (one per intermediate layer and one two-ahead classifier per
    layer) are the paper's training-only parameters; with them T12 / T64 count 44.1M /
    235.4M parameters, the paper's 44M / 235M, against 41.1M / 218.7M at inference.

    The step of the schedule is the optimizer's `iterations` variable, read with ops in the
    compiled train step (so it resumes with the optimizer from a checkpoint); the model has
    its own `train_step`/`test_step`, which run the backbone once (`call_with_states`) and
    take every prediction from it. Under a `tf.distribute` strategy each replica returns
    its share of the global batch's loss (`task_losses.sum_over_replicas`).

    Text is generated with `generate_ids` (`CausalLMGeneration`, models/generation.py): a
    keras-nlp sampler over the backbone's decoding state (its key/value cache), the final
    layer's next-character prediction at each step.

    Inputs (dict, int32 [batch, seq_len]): `token_ids`, `padding_mask`.
    Output: next-character logits [batch, seq_len, vocabulary_size] of the final layer.
    Targets for `fit` (CONTRACTS §3 `causal_lm`): y = the ids shifted by one [B, L],
        sample_weight [B, L] (0 on padding).
    Metrics: `loss`; `nll` (final layer, next character, token-weighted) and `bpc`
        (= nll / ln 2); `two_ahead_nll` (final layer); `intermediate_loss` (the weighted
        sum of the intermediate layers' losses); `active_intermediate_layers`.

    Args:
        backbone: a `CharTransformerBackbone`.
        total_steps: the number of training steps the intermediate-loss schedule spans;
            required when `intermediate_losses` is on.
        intermediate_losses: add the intermediate layer losses.
        multiple_targets: add the two-ahead predictions.
        multiple_targets_weight: the weight of the two-ahead losses (0.5).
    """

    # Its vocabulary logits are the backbone's token embedding called in reverse, through
    # models/tied_output.py (checked by tests/conformance/test_tied_output.py).
    ties_output_embedding = True

    def __init__(self, backbone, total_steps=None, intermediate_losses=True,
                 multiple_targets=True, multiple_targets_weight=0.5, **kwargs):
        num_layers = backbone.num_layers
        if intermediate_losses and num_layers > 1:
            if isinstance(total_steps, bool) or not isinstance(total_steps, int) \
                    or total_steps < 1:
                raise ValueError(
                    f"CharTransformerLM needs total_steps, the number of training steps "
                    f"(a positive integer), for the schedule of its intermediate layer "
                    f"losses (layer l stops after l/(2n) of the training); got "
                    f"{total_steps!r}. Pass total_steps=... or intermediate_losses=False")
        if multiple_targets_weight < 0:
            raise ValueError(f"multiple_targets_weight must be >= 0, got "
                             f"{multiple_targets_weight!r}")
        super().__init__(**kwargs)
        dtype = backbone.dtype_policy
        vocabulary_size = backbone.vocabulary_size
        hidden_shape = (None, None, backbone.hidden_dim)

        # === Layers ===
        # Every variable is created here, so a model rebuilt from its config gets its
        # weights loaded.
        self.backbone = backbone
        self.intermediate_norms, self.intermediate_classifiers = [], []
        if intermediate_losses:
            for layer in range(1, num_layers):
                norm = keras.layers.LayerNormalization(
                    epsilon=backbone.layer_norm_epsilon, dtype=dtype,
                    name=f"intermediate_norm_{layer}")
                classifier = keras.layers.Dense(
                    vocabulary_size, dtype=dtype, name=f"intermediate_classifier_{layer}")
                norm.build(hidden_shape)
                classifier.build(hidden_shape)
                self.intermediate_norms.append(norm)
                self.intermediate_classifiers.append(classifier)
        self.two_ahead_classifiers = []
        if multiple_targets:
            # One per layer that makes predictions: the intermediate ones (if any) and the
            # final layer (last in the list).
            predicting = range(1, num_layers + 1) if intermediate_losses else [num_layers]
            for layer in predicting:
                classifier = keras.layers.Dense(
                    vocabulary_size, dtype=dtype, name=f"two_ahead_classifier_{layer}")
                classifier.build(hidden_shape)
                self.two_ahead_classifiers.append(classifier)
        self.built = True

        # === Metrics ===
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.bpc_tracker = keras.metrics.Mean(name="bpc")
        self.two_ahead_nll_tracker = keras.metrics.Mean(name="two_ahead_nll")
        self.intermediate_loss_tracker = keras.metrics.Mean(name="intermediate_loss")
        self.active_layers_tracker = keras.metrics.Mean(name="active_intermediate_layers")

        # === Config ===
        self.total_steps = total_steps
        self.intermediate_losses = bool(intermediate_losses)
        self.multiple_targets = bool(multiple_targets)
        self.multiple_targets_weight = float(multiple_targets_weight)

        # Named samplers and the seed variables of random ones (see CausalLMGeneration).
        self._generation_state()

    def call(self, inputs, training=None):
        """Next-character logits [B, T, V] of the final layer (the transposed token
        embedding applied to the backbone's output)."""
        _check_inputs(inputs)
        inputs = {name: inputs[name] for name in CAUSAL_LM_INPUTS}
        hidden = self.backbone(inputs, training=training)["sequence_output"]
        return tied_logits(self.backbone.token_embedding, hidden)

    def call_with_state(self, token_ids, state, index):
        """One decoding step of the characters at positions `index`, ... (the protocol of
        models/generation.py; see `CharTransformerBackbone.call_with_state`):
        (next-character logits [B, n, V], hidden [B, n, H], updated state).

        Only the final layer's next-character prediction is used, as at inference in the
        paper; `generate_ids` (`CausalLMGeneration`) decodes text with it."""
        hidden, state = self.backbone.call_with_state(token_ids, state, index)
        return self.backbone.token_embedding(hidden, reverse=True), hidden, state

    # ------------------------------------------------------------------ predictions

    def predictions(self, inputs, training=False):
        """Every prediction of §2 from one pass through the backbone.

        Returns:
            dict with `logits` [B, T, V] (final layer, next character; equal to
            `self(inputs)`), `intermediate_logits` (list over layers 1 .. n - 1, next
            character; empty without `intermediate_losses`) and `two_ahead_logits` (list
            over the predicting layers, the final layer last; empty without
            `multiple_targets`).
        """
        _check_inputs(inputs)
        inputs = {name: inputs[name] for name in CAUSAL_LM_INPUTS}
        states = self.backbone.call_with_states(inputs, training=training)
        final = states["sequence_output"]
        intermediate_features = [
            norm(hidden) for norm, hidden in zip(self.intermediate_norms,
                                                 states["hidden_states"][1:-1])
        ]
        two_ahead_features = intermediate_features + [final]
        two_ahead_features = two_ahead_features[-len(self.two_ahead_classifiers):] \
            if self.two_ahead_classifiers else []
        return {
            "logits": tied_logits(self.backbone.token_embedding, final),
            "intermediate_logits": [classifier(features) for classifier, features
                                    in zip(self.intermediate_classifiers,
                                           intermediate_features)],
            "two_ahead_logits": [classifier(features) for classifier, features
                                 in zip(self.two_ahead_classifiers, two_ahead_features)],
        }

    def intermediate_loss_weights(self, step):
        """The weights of the intermediate layers' losses at `step` (float32 [n - 1])."""
        return intermediate_loss_weights(step, self.total_steps or 1, self.backbone.num_layers)

    def current_step(self):
        """The training step of the loss schedule: the optimizer's `iterations` (0 before the
        model is compiled)."""
        if getattr(self, "optimizer", None) is None:
            return ops.convert_to_tensor(0, dtype="int64")
        return self.optimizer.iterations

    # ------------------------------------------------------------------ losses

    def objective(self, y, predictions, sample_weight=None, step=None):
        """The training loss of §2 (this replica's share of the global batch's) for
        `predictions` (from `predictions`) against the next ids `y` [B, T], with the
        intermediate-loss weights of `step` (default `current_step()`). Updates the
        metrics."""
        y = ops.cast(y, "int32")
        if sample_weight is None:
            weights = ops.ones(ops.shape(y), dtype="float32")
        else:
            weights = ops.cast(sample_weight, "float32")
        # The character two ahead of position i is the next character of position i + 1;
        # the last position has none (weight 0).
        y_two_ahead = ops.concatenate([y[:, 1:], ops.zeros_like(y[:, :1])], axis=1)
        weights_two_ahead = weights * ops.concatenate(
            [weights[:, 1:], ops.zeros_like(weights[:, :1])], axis=1)

        def nll(labels, logits):
            return keras.losses.sparse_categorical_crossentropy(
                labels, ops.cast(logits, "float32"), from_logits=True)

        final_nll = nll(y, predictions["logits"])
        final_loss = _weighted_mean(final_nll, weights)
        self.nll_tracker.update_state(final_nll, sample_weight=weights)
        self.bpc_tracker.update_state(bits_per_character(final_nll), sample_weight=weights)

        two_ahead_losses = [
            _weighted_mean(nll(y_two_ahead, logits), weights_two_ahead)
            for logits in predictions["two_ahead_logits"]
        ]
        loss = final_loss
        if two_ahead_losses:
            loss = loss + self.multiple_targets_weight * two_ahead_losses[-1]
            track_loss(self.two_ahead_nll_tracker, two_ahead_losses[-1])

        intermediate = predictions["intermediate_logits"]
        if intermediate:
            layer_weights = self.intermediate_loss_weights(
                self.current_step() if step is None else step)
            intermediate_loss = ops.convert_to_tensor(0.0, dtype="float32")
            for index, logits in enumerate(intermediate):
                layer_loss = _weighted_mean(nll(y, logits), weights)
                if two_ahead_losses:
                    layer_loss = layer_loss + self.multiple_targets_weight * \
                        two_ahead_losses[index]
                intermediate_loss = intermediate_loss + layer_weights[index] * layer_loss
            loss = loss + intermediate_loss
            track_loss(self.intermediate_loss_tracker, intermediate_loss)
            self.active_layers_tracker.update_state(ops.sum(layer_weights))
        return with_regularization(self, loss)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The loss of `objective`. The auxiliary predictions come from intermediate layers
        that `y_pred` (the final logits) does not carry, so they are recomputed from `x`;
        `train_step` and `test_step` avoid this second pass."""
        return self.objective(y, self.predictions(x, training=training), sample_weight)

    # ------------------------------------------------------------------ Keras steps

    def _metric_results(self, loss):
        for metric in self.metrics:
            if metric.name == "loss":  # Keras's own loss tracker: the global batch's loss
                metric.update_state(sum_over_replicas(ops.stop_gradient(loss)))
        return self.get_metrics_result()

    def train_step(self, *args):
        """One pass for the loss and its auxiliary predictions on TensorFlow. Keras's JAX
        step is stateless (``train_step(state, data)``) and differentiates
        `compute_loss`, which recomputes the predictions: the same loss, one more pass."""
        if not backend.is_tensorflow():
            return super().train_step(*args)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(args[0])
        with tf.GradientTape() as tape:
            loss = self.objective(y, self.predictions(x, training=True), sample_weight)
            scaled_loss = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return self._metric_results(loss)

    def test_step(self, *args):
        if not backend.is_tensorflow():
            return super().test_step(*args)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(args[0])
        loss = self.objective(y, self.predictions(x, training=False), sample_weight)
        return self._metric_results(loss)

    # ------------------------------------------------------------------ config

    def get_config(self):
        config = super().get_config()
        config.update({
            "total_steps": self.total_steps,
            "intermediate_losses": self.intermediate_losses,
            "multiple_targets": self.multiple_targets,
            "multiple_targets_weight": self.multiple_targets_weight,
        })
        return config
