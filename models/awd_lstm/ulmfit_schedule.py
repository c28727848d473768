"""ULMFiT's fine-tuning schedule (Howard & Ruder 2018 §3.2-§3.3), shared by the target task
LM fine-tuning (`AwdLstmCausalLM` with ``discriminative_factor`` / ``slanted_triangular``)
and the classifier (`UlmfitClassifier`):

* discriminative fine-tuning (§3.2): layer group l learns at eta / 2.6^(L-1-l), applied
  to the optimizer's step (`scaled_updates`), which holds under Adam;
* slanted triangular learning rates (§3.2, `SlantedTriangular`), replacing the compiled
  optimizer's rate and peaking at its own (peak) rate;
* gradual unfreezing (§3.3): one more group from the top trains every period.
"""

from __future__ import annotations

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


def group_scales(groups, variables, step, factor, unfreeze_every=0):
    """Per variable of ``variables``: (step multiplier, gradient mask) at ``step`` for the
    layer ``groups`` (lists of variables, bottom to top); a variable in no group keeps
    (1, 1)."""
    scales = discriminative_scales(len(groups), factor)
    unfrozen = unfrozen_groups(step, len(groups), unfreeze_every)
    by_variable = {}
    for index, (group, scale) in enumerate(zip(groups, scales)):
        trains = ops.cast(index >= len(groups) - unfrozen, "float32")
        for variable in group:
            by_variable[id(variable)] = (scale * trains, trains)
    return [by_variable.get(id(variable), (1.0, 1.0)) for variable in variables]


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


__all__ = ["PEAK_KEYS", "backbone_groups", "discriminative_scales", "group_scales",
           "schedule_value", "unfrozen_groups", "use_slanted_triangular"]
