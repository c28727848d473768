"""Serving cost that follows the request: packed inputs cut after the batch's longest row.

A serving signature packs every request to the length the model was trained with (the
packer's static ``sequence_length``), so ~20-word sentences served by a model trained at 512
pay for 512 positions in every layer. `call_on_longest` cuts the packed inputs after the last
real position of the batch's longest row, rounded up to the architecture's
``Architecture.serving_length_multiple`` (8 by default; never past the packed length), runs
the model on that, and pads the outputs that have a sequence axis back to the packed length,
so a signature's outputs keep their shapes.

Why the outputs do not change: a padded position is masked out of every attention (and a
recurrent model's mask skips it), so the real positions never read it; cutting trailing
padding removes positions nothing reads. Only the right side is cut, so positions (absolute
position embeddings) stay where training put them; a left-padded batch keeps its length. An
architecture whose outputs do depend on the padded length (Reformer's LSH buckets span the
whole sequence) registers ``serving_length_multiple=None`` and is always called at its packed
length. tests/conformance checks, for every architecture, that cut and full-length outputs
agree at the real positions (1e-5).

The padded-back positions hold ``pad_value`` (0 for hidden states; a span extractor's logits
use a large negative value, so a padded position never enters its n-best). keras-nlp and
tf-text have no such step: their packers pad to a fixed length.
"""

from __future__ import annotations

from lmfactory.models.backend import tf


MASK_KEY = "padding_mask"


def serving_multiple(model) -> int | None:
    """The ``serving_length_multiple`` of the architecture of ``model`` (a backbone or a
    task model holding one as ``backbone``); None when it needs its full packed length or
    its architecture is not registered."""
    from lmfactory.models import registry

    backbone = getattr(model, "backbone", model)
    try:
        return registry.find_by_backbone(backbone).serving_length_multiple
    except (KeyError, ValueError, AttributeError):
        return None


def longest_length(padding_mask, multiple: int):
    """The batch's longest row (its last real position + 1) rounded up to ``multiple``,
    at least ``multiple`` and at most the packed length (the mask's last axis); int32."""
    mask = tf.cast(padding_mask, tf.int32)
    packed = tf.shape(mask)[-1]
    positions = tf.range(1, packed + 1, dtype=tf.int32)
    flat = tf.reshape(mask * positions, [-1])
    last = tf.reduce_max(tf.concat([flat, tf.zeros([1], tf.int32)], 0))  # 0: an empty batch
    rounded = (last + multiple - 1) // multiple * multiple
    return tf.minimum(tf.maximum(rounded, multiple), packed)


def _cut(value, axis: int, length):
    begin = tf.zeros([value.shape.rank], tf.int32)
    size = tf.tensor_scatter_nd_update(-tf.ones([value.shape.rank], tf.int32), [[axis]],
                                       [length])
    return tf.slice(value, begin, size)


def _pad_back(value, axis: int, packed, pad_value):
    missing = packed - tf.shape(value)[axis]
    paddings = tf.tensor_scatter_nd_update(tf.zeros([value.shape.rank, 2], tf.int32),
                                           [[axis, 1]], [missing])
    return tf.pad(value, paddings, constant_values=tf.cast(pad_value, value.dtype))


def cut_inputs(inputs: dict, length, mask_key: str = MASK_KEY) -> dict:
    """``inputs`` with every tensor sharing the mask's sequence axis cut to ``length``."""
    mask = inputs[mask_key]
    axis = mask.shape.rank - 1
    packed = mask.shape[axis]
    cut = {}
    for name, value in inputs.items():
        shares_axis = (value.shape.rank is not None and value.shape.rank > axis
                       and value.shape[:axis + 1].is_compatible_with(mask.shape)
                       and value.shape[axis] == packed)
        cut[name] = _cut(value, axis, length) if shares_axis else value
    return cut


def call_on_longest(model, inputs: dict, multiple: int | None, sequence_outputs=(),
                    pad_value: float = 0.0, mask_key: str = MASK_KEY):
    """``model(inputs, training=False)`` on the inputs cut after the batch's longest row
    (module docstring). ``sequence_outputs``: the names of the dict outputs with a
    sequence axis, or True when the model returns one tensor that has one; they are padded
    back to the packed length with ``pad_value``. ``multiple`` None (or inputs without a
    ``padding_mask`` of static length) calls the model on the inputs as packed."""
    mask = inputs.get(mask_key)
    if (multiple is None or mask is None or mask.shape.rank is None
            or mask.shape[-1] is None or mask.shape[-1] <= multiple):
        return model(inputs, training=False)
    axis = mask.shape.rank - 1
    packed = mask.shape[axis]
    outputs = model(cut_inputs(inputs, longest_length(mask, multiple), mask_key),
                    training=False)
    if sequence_outputs is True:
        return _pad_back(outputs, axis, packed, pad_value)
    if not sequence_outputs:
        return outputs
    return {name: (_pad_back(value, axis, packed, pad_value) if name in sequence_outputs
                   else value) for name, value in outputs.items()}


__all__ = ["call_on_longest", "cut_inputs", "longest_length",
           "serving_multiple"]
