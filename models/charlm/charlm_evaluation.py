"""Bits per character of a text under a character LM (Al-Rfou et al. 2018 §3).

The paper reports bits per character (bpc): the mean negative log-likelihood of the
held-out characters in bits. Its model has a fixed context of L characters, and only the
prediction of the final position at the final layer is used at evaluation: each character
is predicted from the L characters before it (a window sliding by one character).
`evaluate_bits_per_character` generalises this with a `stride`: windows of L characters
move `stride` characters at a time and each window scores only the characters no earlier
window scored, so every character after the first is scored exactly once, from at least
L - stride + 1 characters of context past the first window (stride = 1 is the paper's
evaluation; stride = L gives non-overlapping blocks, where early positions see little
context).
"""

from __future__ import annotations

import numpy as np

from lmfactory.models.backend import tf
from lmfactory.models.charlm.charlm_causal_lm import bits_per_character


def sliding_windows(num_ids: int, sequence_length: int, stride: int) -> tuple:
    """Window starts over a stream of ``num_ids`` ids and, for each window, the first of its
    positions that it scores (position p of a window starting at s predicts id s + p + 1).

    Returns:
        (starts, first_scored): int arrays of equal length. Together the windows score the
        ids 1 .. num_ids - 1 once each.
    """
    if not 1 <= stride <= sequence_length:
        raise ValueError(f"stride must lie in [1, sequence_length={sequence_length}], got "
                         f"{stride}")
    if num_ids < sequence_length + 1:
        raise ValueError(f"{num_ids} ids are fewer than one window of sequence_length + 1 = "
                         f"{sequence_length + 1}")
    last = num_ids - 1 - sequence_length
    starts = list(range(0, last + 1, stride))
    if starts[-1] != last:
        starts.append(last)
    first_scored = [0]
    for previous, start in zip(starts[:-1], starts[1:]):
        # The previous window scored up to id previous + sequence_length.
        first_scored.append(previous + sequence_length - start)
    return np.asarray(starts), np.asarray(first_scored)


def evaluate_bits_per_character(model, ids, sequence_length: int, stride: int | None = None,
                                batch_size: int = 32) -> dict:
    """Scores the stream of character ``ids`` with ``model`` (inputs ``token_ids`` and
    ``padding_mask``, output next-character logits [B, T, V]: the final layer of a
    `CharTransformerLM`).

    Args:
        model: the language model.
        ids: 1-D int stream (e.g. `charlm_vocabulary.encode(text)`).
        sequence_length: window length L (at most the model's context).
        stride: characters between window starts (default L // 2).
        batch_size: windows per forward pass.

    Returns:
        dict with `nll` (mean nats per character), `bpc` (nll / ln 2), `characters` (the
        number scored, len(ids) - 1) and `windows`.
    """
    ids = np.asarray(ids, dtype=np.int32)
    if ids.ndim != 1:
        raise ValueError(f"Expected a 1-D stream of character ids, got shape {ids.shape}")
    stride = max(1, sequence_length // 2) if stride is None else int(stride)
    starts, first_scored = sliding_windows(ids.size, sequence_length, stride)
    offsets = np.arange(sequence_length + 1)
    positions = np.arange(sequence_length)
    total_nll, total_count = 0.0, 0

    @tf.function(autograph=False)
    def window_nll(token_ids, next_ids):
        padding_mask = tf.ones_like(token_ids)
        logits = model({"token_ids": token_ids, "padding_mask": padding_mask},
                       training=False)
        return tf.keras.losses.sparse_categorical_crossentropy(
            next_ids, tf.cast(logits, tf.float32), from_logits=True)

    for begin in range(0, starts.size, batch_size):
        batch_starts = starts[begin:begin + batch_size]
        blocks = ids[batch_starts[:, None] + offsets[None, :]]
        nll = window_nll(tf.constant(blocks[:, :-1]), tf.constant(blocks[:, 1:])).numpy()
        scored = positions[None, :] >= first_scored[begin:begin + batch_size, None]
        total_nll += float(np.sum(nll.astype(np.float64) * scored))
        total_count += int(np.sum(scored))
    nll = total_nll / total_count
    return {"nll": nll, "bpc": bits_per_character(nll), "characters": total_count,
            "windows": int(starts.size)}


__all__ = ["evaluate_bits_per_character", "sliding_windows"]
