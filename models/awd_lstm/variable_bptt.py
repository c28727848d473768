"""Variable-length backpropagation through time (Merity et al. 2018 §4.1).

"we select the base sequence length to be seq with probability p and seq/2 with
probability 1 - p ... We then select the sequence length according to N(seq, s), where seq
is the base sequence length and s is the standard deviation", with p = 0.95 and s = 5 in
the experiments (§5), and "rescale the learning rate depending on the length of the
resulting sequence compared to the original specified sequence length": lr * seq_len / bptt.
The reference code also keeps every sequence at least 5 tokens long.

The pipeline's records are fixed windows, so a sampled length is taken as a prefix of the
window and is capped at the window's length (make the windows longer than ``bptt`` + 3 s
to keep the cap rare; the recipes use windows of bptt + 10).
"""

from __future__ import annotations

import keras
from keras import ops

MIN_SEQUENCE_LENGTH = 5


def sample_sequence_length(bptt, window_length, seed_generator, full_probability=0.95,
                           std=5.0):
    """One sampled BPTT length (int32 scalar tensor) in [min(5, window), window]."""
    base = ops.where(keras.random.uniform((), seed=seed_generator) < full_probability,
                     float(bptt), bptt / 2.0)
    length = ops.cast(base + std * keras.random.normal((), seed=seed_generator), "int32")
    window_length = ops.cast(window_length, "int32")
    length = ops.maximum(length, MIN_SEQUENCE_LENGTH)
    return ops.minimum(length, window_length)


__all__ = ["MIN_SEQUENCE_LENGTH", "sample_sequence_length"]
