"""One packing pass for ids and padding mask (models/masked_packing.py) gives what packing the
ids and an all-ones copy of the segments separately gives, also when the pad id occurs in
the text, for both truncation rules, both padding sides and id or list special tokens."""

import keras_nlp
import numpy as np
import pytest
import tensorflow as tf

from lmfactory.models import masked_packing


def _two_pass(segments, length, start, end, sep, pad, **options):
    def ones(value):
        return [1] * len(value) if isinstance(value, list) else 1

    ids, segment_ids = keras_nlp.layers.MultiSegmentPacker(
        length, start_value=start, end_value=end, sep_value=sep, pad_value=pad,
        **options)(segments)
    mask, _ = keras_nlp.layers.MultiSegmentPacker(
        length, start_value=ones(start), end_value=ones(end), sep_value=ones(sep),
        pad_value=0, **options)(tuple(tf.ones_like(s) for s in segments))
    return ids.numpy(), mask.numpy(), segment_ids.numpy()


@pytest.mark.parametrize("truncate", ["round_robin", "waterfall"])
@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("specials", [(5, 6, 7), ([], [7, 8], [7])])
def test_one_pass_equals_two_passes_with_the_pad_id_in_the_text(truncate, padding_side,
                                                                specials):
    rng = np.random.default_rng(0)
    start, end, sep = specials
    options = {"truncate": truncate, "padding_side": padding_side}
    packer = masked_packing.shifted_packer(12, start, end, sep, **options)
    for _ in range(5):
        # ids 0..3: the pad id 0 occurs inside the segments; some rows are truncated
        segments = tuple(tf.ragged.constant(
            [list(rng.integers(0, 4, rng.integers(0, 9))) for _ in range(3)], dtype=tf.int32)
            for _ in range(2))
        expected = _two_pass(segments, 12, start, end, sep, 0, **options)
        got = [t.numpy() for t in masked_packing.pack(packer, segments, pad_id=0)]
        for name, want, have in zip(("ids", "mask", "segment_ids"), expected, got):
            np.testing.assert_array_equal(have, want, err_msg=name)
        assert got[0].dtype == got[1].dtype == np.int32
