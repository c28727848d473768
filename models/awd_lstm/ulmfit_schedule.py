"""ULMFiT's fine-tuning schedule (Howard & Ruder 2018 §3.2-§3.3), shared by the target task
LM fine-tuning (`AwdLstmCausalLM` with ``discriminative_factor`` / ``slanted_triangular``)
and the classifier (`UlmfitClassifier`):

* discriminative fine-tuning (§3.2): layer group l learns at eta / 2.6^(L-1-l), applied
  to the optimizer's step (`scaled_updates`), which holds under Adam;
* slanted triangular learning rates (§3.2, `SlantedTriangular`), replacing the compiled
  optimizer's rate and peaking at its own (peak) rate;
* gradual unfreezing (§3.3): one more group from the top trains every period. A group
  unfrozen late starts its Adam moments at zero; Keras's Adam corrects their bias with the
  optimizer's global step count, which would make the first steps of that group about
  (1 - beta_1) / sqrt(1 - beta_2) = 3 times its rate (beta 0.7 / 0.99). The reference
  implementation (fastai, PyTorch's Adam) counts steps per parameter, so the bias
  correction restarts when a group starts training; `adam_restart_factors` applies that
  correction to the group's step.
"""

from __future__ import annotations

import math

from keras import ops

from lmfactory.models.awd_lstm.slanted_triangular import SlantedTriangular

PEAK_KEYS = ("peak_learning_rate", "max_learning_rate", "initial_learning_rate")


def discriminative_scales(num_groups, factor=2.6):
    """The learning-rate multiplier of each layer group, bottom to top (§3.2: "eta^{l-1} =
    eta^l / 2.6"): factor^-(L-1-l), 1 for the top group."""
    return [factor ** -(num_groups - 1 - group) for group in range(num_groups)]


def unfrozen_groups(step, num_groups, unfreeze_every):
    """How many groups from the top train at ``step`` (§3.3 gradual unfreezing: "we first
    unfreeze the last layer and fine-tune all unfrozen layers for one epoch. We then
    unfreeze the next lower frozen layer and repeat"): 1 + step // unfreeze_every, at most
    all; all of them when ``unfreeze_every`` is falsy."""
    if not unfreeze_every:
        return ops.convert_to_tensor(num_groups, "int64")
    step = ops.cast(step, "int64")
    return ops.minimum(1 + step // int(unfreeze_every), num_groups)


def adam_restart_factors(step, num_groups, unfreeze_every, beta_1, beta_2):
    """Per group (bottom to top), the factor turning Keras Adam's step at optimizer step
    ``step`` (0-based, before the update) into the step of an Adam whose bias correction
    counts only the group's own updates since it was unfrozen (PyTorch's per-parameter
    ``state["step"]``, the reference implementation's optimizer).

    Keras's Adam moves by lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + eps)
    with t = step + 1; group g unfrozen at step u_g (the top group at 0, then one more every
    ``unfreeze_every``) has had k = t - u_g updates, so the factor is
    [sqrt(1 - beta_2^k) / (1 - beta_1^k)] / [sqrt(1 - beta_2^t) / (1 - beta_1^t)]
    (1 for a group trained from the first step; a frozen group's is irrelevant, its step
    is zero)."""
    t = ops.cast(step, "float32") + 1.0

    log_beta_1, log_beta_2 = math.log(beta_1), math.log(beta_2)

    def correction(count):
        return ops.sqrt(1.0 - ops.exp(count * log_beta_2)) / (1.0 - ops.exp(count * log_beta_1))

    factors = []
    for group in range(num_groups):
        unfrozen_at = float((num_groups - 1 - group) * int(unfreeze_every or 0))
        count = ops.maximum(t - unfrozen_at, 1.0)
        factors.append(correction(count) / correction(t))
    return factors


def group_scales(groups, variables, step, factor, unfreeze_every=0, adam_betas=None):
    """Per variable of ``variables``: (step multiplier, gradient mask) at ``step`` for the
    layer ``groups`` (lists of variables, bottom to top); a variable in no group keeps
    (1, 1). With gradual unfreezing and ``adam_betas`` (the optimizer's beta_1, beta_2: an
    Adam-family optimizer), a group's multiplier also restarts Adam's bias correction when
    the group is unfrozen (`adam_restart_factors`)."""
    scales = discriminative_scales(len(groups), factor)
    unfrozen = unfrozen_groups(step, len(groups), unfreeze_every)
    restart = [1.0] * len(groups)
    if unfreeze_every and adam_betas is not None:
        restart = adam_restart_factors(step, len(groups), unfreeze_every, *adam_betas)
    by_variable = {}
    for index, (group, scale) in enumerate(zip(groups, scales)):
        trains = ops.cast(index >= len(groups) - unfrozen, "float32")
        for variable in group:
            by_variable[id(variable)] = (scale * restart[index] * trains, trains)
    return [by_variable.get(id(variable), (1.0, 1.0)) for variable in variables]


def adam_betas(optimizer):
    """(beta_1, beta_2) of an Adam-family optimizer (Adam, AdamW), else None."""
    betas = (getattr(optimizer, "beta_1", None), getattr(optimizer, "beta_2", None))
    if any(beta is None for beta in betas) or getattr(optimizer, "amsgrad", False):
        return None
    return tuple(float(beta) for beta in betas)


def schedule_value(optimizer, keys):
    """The first of ``keys`` that ``optimizer``'s learning-rate schedule config names (for
    a constant rate: the rate, when ``keys`` are rate keys), else None. The pipeline
    trainer's warmup / decay schedule names ``peak_learning_rate`` and ``total_steps``
    (components/trainer/optimization.py)."""
    value = optimizer.get_config()["learning_rate"]
    if isinstance(value, (int, float)):
        return float(value) if keys == PEAK_KEYS else None
    config = value.get("config", {}) if isinstance(value, dict) else {}
    for key in keys:
        if key in config:
            return config[key]
    return None


def use_slanted_triangular(optimizer, total_steps, cut_frac, ratio, owner):
    """Replaces ``optimizer``'s learning rate by STLR over ``total_steps`` peaking at its
    own (peak) rate."""
    peak = schedule_value(optimizer, PEAK_KEYS)
    if peak is None:
        raise ValueError(f"{owner}: cannot read the peak learning rate of the optimizer's "
                         f"schedule for STLR; give it a float rate")
    optimizer.learning_rate = SlantedTriangular(float(peak), int(total_steps), cut_frac, ratio)


def backbone_groups(backbone):
    """The layer groups of an `AwdLstmBackbone`, bottom to top: the embedding, then each
    LSTM layer (a task model adds its head's variables)."""
    groups = [list(backbone.token_embedding.trainable_variables)]
    return groups + [list(lstm.trainable_variables) for lstm in backbone.lstm_layers]


__all__ = ["PEAK_KEYS", "adam_betas", "adam_restart_factors", "backbone_groups", "discriminative_scales", "group_scales",
           "schedule_value", "unfrozen_groups", "use_slanted_triangular"]
