"""Optimizer steps whose size is scaled per variable: the mechanism behind AWD-LSTM's
learning rate rescaled by the sampled BPTT length (Merity et al. 2018 §4.1) and ULMFiT's
discriminative fine-tuning (Howard & Ruder 2018 §3.2: a learning rate per layer group).

Under SGD, scaling the learning rate of a variable equals scaling its gradient. Under Adam
it does not: Adam divides the first moment by the root of the second, so a gradient
multiplied by s gives the same step. What the papers define is a scaled *learning rate*,
so here the optimizer takes its ordinary step and the change it made to each variable is
then multiplied by the variable's scale: v <- v_before + s * (v_after - v_before). For
Adam, AdamW (its weight decay is multiplied by the learning rate too) and SGD that is
exactly the step with learning rate s * lr (tests/test_awd_lstm.py checks it against an
optimizer built with the scaled rate). A scale of 0 leaves the variable unchanged; its
gradient is zeroed as well (``gradient_masks``), so a frozen group accumulates no Adam
moments until it is unfrozen (ULMFiT's gradual unfreezing).
"""

from __future__ import annotations

from lmfactory.models.backend import tf



def apply_scaled_updates(optimizer, gradients, variables, scales=None, gradient_masks=None):
    """``optimizer.apply_gradients`` with every variable's step multiplied by its scale.

    Args:
        optimizer: a built or unbuilt Keras optimizer.
        gradients, variables: parallel lists.
        scales: a list parallel to ``variables`` of scalars (floats or tensors; None or 1.0
            = the optimizer's own step), or one scalar for all; None: no scaling.
        gradient_masks: optional parallel list of 0/1 scalars multiplying the gradients
            before the step (frozen variables get a zero gradient).
    """
    if gradient_masks is not None:
        gradients = [None if g is None else g * tf.cast(m, g.dtype)
                     for g, m in zip(gradients, gradient_masks)]
    if scales is None:
        optimizer.apply_gradients(zip(gradients, variables))
        return
    if not isinstance(scales, (list, tuple)):
        scales = [scales] * len(variables)
    before = [None if isinstance(s, (int, float)) and s == 1.0 else tf.identity(v.value)
              for v, s in zip(variables, scales)]
    optimizer.apply_gradients(zip(gradients, variables))
    for variable, start, scale in zip(variables, before, scales):
        if start is None:
            continue
        scale = tf.cast(scale, start.dtype)
        variable.assign(start + scale * (variable.value - start))


__all__ = ["apply_scaled_updates"]
