"""AdamW with linear warmup then linear (or cosine) decay, and global-norm gradient clipping.

This is BERT's optimiser (Devlin et al. 2019, App. A.2: Adam, beta1 0.9, beta2 0.999,
L2 weight decay 0.01 decoupled, warmup then linear decay; google-research/bert clips the
global norm at 1.0) and GPT-2's (AdamW, warmup, clip 1.0). Bias and LayerNorm weights are
excluded from weight decay, as both reference implementations do. GPT-3's settings
(Brown et al. 2020, Appendix B: beta2 0.95, eps 1e-8, clip 1.0, weight decay 0.1, linear
warmup then cosine decay to 10% of the peak) are the same optimiser with ``beta_2``,
``epsilon``, ``weight_decay``, ``decay="cosine"`` and ``final_learning_rate_fraction``;
recipes set them per stage (``pretraining.adam_beta_2`` etc., see ``recipe/stages.py``).

``decay="inverse_sqrt"`` selects the inverse-square-root schedule of Vaswani et al. 2017
(§5.3, `InverseSqrtDecay`): linear warmup, then decay proportional to step^-0.5; the
paper's Adam uses beta2 0.98, eps 1e-9 (``adam_beta_2``, ``adam_epsilon``).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

DECAYS = ("linear", "cosine", "inverse_sqrt")
# "sgd": plain SGD (no momentum, weight decay or clipping) on the same schedule: word2vec.c's
# optimiser (Mikolov et al. 2013). "adagrad": Adagrad with accumulators starting at 1 and
# global-norm clipping, no weight decay: the optimiser of ELMo's released biLM (bilm-tf's
# training: Adagrad, learning rate 0.2, clip 10).
OPTIMIZERS = ("adamw", "sgd", "adagrad")


@keras.saving.register_keras_serializable(package="lmfactory")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = peak * step / warmup for step < warmup, then decays linearly to
    ``final_learning_rate_fraction * peak`` (default 0) at total."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int, total_steps: int,
                 final_learning_rate_fraction: float = 0.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.final_learning_rate_fraction = float(final_learning_rate_fraction)

    def _progress(self, step):
        """(step as float, warmup learning rate, fraction of the decay done in [0, 1])."""
        step = keras.ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        total = float(max(self.total_steps, self.warmup_steps + 1))
        warmup_lr = self.peak_learning_rate * step / max(warmup, 1.0)
        done = keras.ops.clip((step - warmup) / (total - warmup), 0.0, 1.0)
        return step, warmup_lr, done

    def _decayed(self, done):
        """The fraction of the peak left after ``done`` of the decay (1 -> final)."""
        return 1.0 - done

    def __call__(self, step):
        step, warmup_lr, done = self._progress(step)
        final = self.final_learning_rate_fraction
        decay_lr = self.peak_learning_rate * (final + (1.0 - final) * self._decayed(done))
        return keras.ops.where(step < float(self.warmup_steps), warmup_lr, decay_lr)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate,
                "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "final_learning_rate_fraction": self.final_learning_rate_fraction}


@keras.saving.register_keras_serializable(package="lmfactory")
class WarmupCosineDecay(WarmupLinearDecay):
    """Linear warmup, then cosine decay from the peak to ``final_learning_rate_fraction *
    peak`` at total (GPT-3, Appendix B: "cosine decay for learning rate down to 10% of its
    value"), then flat."""

    def _decayed(self, done):
        return 0.5 * (1.0 + keras.ops.cos(math.pi * done))


@keras.saving.register_keras_serializable(package="lmfactory")
class InverseSqrtDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Vaswani et al. 2017 §5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
    i.e. linear warmup for ``warmup_steps`` steps, then decay proportional to the inverse
    square root of the step number.

    Written as ``scale * min(step^-0.5, step * warmup^-1.5)``: ``scale`` is d_model^-0.5 in
    the paper (`from_model_dim`); the peak, at step = warmup, is scale * warmup^-0.5 (the
    trainer sets ``scale`` so that the peak is the recipe's ``learning_rate``). The paper's
    steps count from 1: the optimizer's iteration 0 gets step 1's rate.
    """

    def __init__(self, scale: float, warmup_steps: int):
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale!r}")
        if int(warmup_steps) < 1:
            raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps!r}")
        self.scale = float(scale)
        self.warmup_steps = int(warmup_steps)

    @classmethod
    def from_model_dim(cls, model_dim: int, warmup_steps: int) -> "InverseSqrtDecay":
        """The paper's schedule for d_model = ``model_dim`` (scale = d_model^-0.5)."""
        return cls(float(model_dim) ** -0.5, warmup_steps)

    @classmethod
    def from_peak(cls, peak_learning_rate: float, warmup_steps: int) -> "InverseSqrtDecay":
        """The schedule whose largest value (at step = warmup) is ``peak_learning_rate``."""
        warmup_steps = max(int(warmup_steps), 1)
        return cls(float(peak_learning_rate) * warmup_steps ** 0.5, warmup_steps)

    def __call__(self, step):
        step = keras.ops.maximum(keras.ops.cast(step, "float32"), 1.0)
        warmup = float(self.warmup_steps)
        return self.scale * keras.ops.minimum(keras.ops.rsqrt(step), step * warmup ** -1.5)

    def get_config(self):
        return {"scale": self.scale, "warmup_steps": self.warmup_steps}


class GlobalBatchClipping:
    """Global-norm clipping of the gradient of the GLOBAL batch (mixed into a Keras
    optimizer; ``clip_global_norm`` None or 0 = no clipping).

    Keras 3.12 applies ``global_clipnorm`` inside each replica, to that replica's partial
    gradient, before the cross-replica sum, so under MirroredStrategy/TPUStrategy the clip
    differs from one device on the same batch. Here the norm is taken of the all-reduced
    gradient (one extra all-reduce when clipping with several replicas) and every replica's
    share is scaled by the same factor, so the summed update equals the single-device one.
    """

    def _clip_gradients(self, grads):
        grads = super()._clip_gradients(grads)
        if not self.clip_global_norm:
            return grads
        present = [tf.convert_to_tensor(g) for g in grads if g is not None]
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            present = context.all_reduce(tf.distribute.ReduceOp.SUM, present)
        norm = tf.linalg.global_norm(present)
        scale = self.clip_global_norm / tf.maximum(norm, self.clip_global_norm)
        return [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]


@keras.saving.register_keras_serializable(package="lmfactory")
class Adagrad(GlobalBatchClipping, keras.optimizers.Adagrad):
    """Keras Adagrad (Duchi et al. 2011) with `GlobalBatchClipping`."""

    def __init__(self, clip_global_norm: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.clip_global_norm = clip_global_norm

    def get_config(self):
        return {**super().get_config(), "clip_global_norm": self.clip_global_norm}


@keras.saving.register_keras_serializable(package="lmfactory")
class AdamW(GlobalBatchClipping, keras.optimizers.AdamW):
    """Keras AdamW with `GlobalBatchClipping` and one fused kernel per variable.

    Update: Keras' Adam step is about ten element-wise TF ops per variable, each a full pass
    over the variable's memory (m, v, their temporaries, the step). On TensorFlow, float32
    variables take TF's fused ``ResourceApplyAdam`` kernel instead, one multithreaded pass
    that computes the same formula (Kingma & Ba 2015 Alg. 1 with the bias correction folded
    into the step size, epsilon added to sqrt(v): Keras' own form), and the decoupled
    weight decay (Loshchilov & Hutter 2019) rescales the variable in one op. Other dtypes,
    AMSGrad and other backends take Keras' step. ``fused=False`` keeps Keras' step.
    """

    def __init__(self, clip_global_norm: float | None = None, fused: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.clip_global_norm = clip_global_norm
        self.fused = fused

    def _fuses(self, variable) -> bool:
        return (self.fused and not self.amsgrad and keras.backend.backend() == "tensorflow"
                and tf.as_dtype(variable.dtype) == tf.float32)

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        if not all(self._fuses(variable) for variable in variables):
            return super()._apply_weight_decay(variables)

        def decay(distribution, variables):
            def shrink(variable):
                if self._use_weight_decay(variable):
                    factor = 1.0 - (tf.cast(self.learning_rate, variable.dtype)
                                    * tf.cast(self.weight_decay, variable.dtype))
                    variable.assign(variable * factor)  # one pass; Keras' assign_sub is two

            for variable in variables:
                variable = variable.value if isinstance(variable, keras.Variable) else variable
                distribution.extended.update(variable, shrink, group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(
            decay, self._distribution_strategy, variables)

    def update_step(self, gradient, variable, learning_rate):
        if not self._fuses(variable):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))

    def get_config(self):
        return {**super().get_config(), "clip_global_norm": self.clip_global_norm,
                "fused": self.fused}


def _handle(variable):
    """The resource handle of a Keras or TF variable (inside ``strategy.extended.update``,
    a distributed variable's handle is the current device's copy)."""
    variable = variable.value if isinstance(variable, keras.Variable) else variable
    return variable.handle


def make_optimizer(learning_rate: float, total_steps: int, warmup_fraction: float = 0.1,
                   weight_decay: float = 0.01, clip_norm: float = 1.0,
                   beta_2: float = 0.999, epsilon: float = 1e-6, beta_1: float = 0.9,
                   decay: str = "linear", final_learning_rate_fraction: float = 0.0,
                   optimizer: str = "adamw"):
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
    if not 0.0 <= final_learning_rate_fraction <= 1.0:
        raise ValueError(f"final_learning_rate_fraction must be in [0, 1], got "
                         f"{final_learning_rate_fraction!r}")
    if decay == "inverse_sqrt":  # learning_rate is the peak, reached after the warmup
        schedule = InverseSqrtDecay.from_peak(learning_rate, int(total_steps * warmup_fraction))
    else:
        schedule_cls = WarmupCosineDecay if decay == "cosine" else WarmupLinearDecay
        schedule = schedule_cls(learning_rate, int(total_steps * warmup_fraction), total_steps,
                                final_learning_rate_fraction)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if optimizer == "sgd":
        if weight_decay or clip_norm:
            raise ValueError(f"optimizer 'sgd' is plain SGD: set weight_decay and clip_norm to "
                             f"0, got {weight_decay} and {clip_norm}")
        return keras.optimizers.SGD(learning_rate=schedule)
    if optimizer == "adagrad":
        if weight_decay:
            raise ValueError(f"optimizer 'adagrad' has no weight decay: set weight_decay to 0, "
                             f"got {weight_decay}")
        return Adagrad(learning_rate=schedule, initial_accumulator_value=1.0,
                       clip_global_norm=clip_norm)
    optimizer = AdamW(
        learning_rate=schedule, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2,
        epsilon=epsilon, clip_global_norm=clip_norm)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "layer_norm"])
    return optimizer
