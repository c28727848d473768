"""Packing segments and their padding mask in one pass of keras-nlp's MultiSegmentPacker.

A padding mask cannot be read back from packed ids when the pad id may also occur in text
(GPT-2's end-of-text token doubles as padding). Packing an all-ones copy of the segments a
second time gives the mask, but traces the packer's trimming twice. Here the segments are
packed once with every id shifted up by one and padding 0: the mask is where the packed
value is non-zero, the ids are the packed values shifted back. The ids and mask equal those
of the two-pass packing.
"""

from __future__ import annotations

import keras_nlp

from lmfactory.models.backend import tf


def shifted_packer(sequence_length: int, start_value, end_value, sep_value, **kwargs):
    """A MultiSegmentPacker over ids shifted by one, padding with 0 (see `pack`);
    ``start_value`` / ``end_value`` / ``sep_value``: an id, or a list of ids, unshifted."""
    def shift(value):
        return [v + 1 for v in value] if isinstance(value, (list, tuple)) else value + 1

    return keras_nlp.layers.MultiSegmentPacker(
        sequence_length=sequence_length, start_value=shift(start_value),
        end_value=shift(end_value), sep_value=shift(sep_value), pad_value=0, **kwargs)


def pack(packer, segments: tuple, pad_id: int) -> tuple:
    """``(token_ids, padding_mask, segment_ids)`` (int32) of ``segments`` (ragged ids) packed
    by a `shifted_packer`: padding positions hold ``pad_id`` and mask 0."""
    shifted = tuple(tf.cast(segment, "int32") + 1 for segment in segments)
    packed, segment_ids = packer(shifted)
    packed = tf.cast(packed, "int32")
    real = packed > 0
    token_ids = tf.where(real, packed - 1, tf.constant(pad_id, "int32"))
    return token_ids, tf.cast(real, "int32"), tf.cast(segment_ids, "int32")
