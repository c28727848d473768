"""BERT's masking rule drawn from an explicit seed: dynamic masking that a resumed run repeats.

Dynamic masking (RoBERTa, Liu et al. 2019 §4.1) draws a new mask every time a sequence is
read. keras-nlp's ``MaskedLMMaskGenerator`` draws it from stateful random ops (tf_text's
``RandomItemSelector`` and ``MaskValuesChooser``) inside a parallel ``Dataset.map``: which
batch gets which draw depends on thread timing, and a training resumed after a kill (which
skips the batches it had trained on, fit_loop.resume_input) cannot get back the masks the
uninterrupted run used. :func:`seeded_bert_mask` draws the same rule from stateless random
ops seeded by ``(seed, batch index)``: a batch read again at the same index of the same
repeated input gets the same mask; the next pass over the data (higher indices) gets fresh
ones. A mechanism keras-nlp lacks (its generator takes no per-call seed), written here.

The rule is the generator's (Devlin et al. 2019 §3.1 "Task #1"): of each sequence's tokens
that are not special (``unselectable_ids``), ``ceil(rate * n)`` distinct ones, at most
``max_selections``, are chosen uniformly; each chosen token becomes the mask token with
probability ``mask_token_rate``, a uniformly drawn id with ``random_token_rate``, and stays
itself otherwise. Positions come out in increasing order, padded with 0 (weight 0).
"""

from __future__ import annotations

import tensorflow as tf


def seeded_bert_mask(token_ids, seed, *, vocabulary_size: int, selection_rate: float,
                     max_selections: int, mask_token_id: int, unselectable_ids,
                     mask_token_rate: float = 0.8, random_token_rate: float = 0.1) -> dict:
    """Masks a batch ``token_ids`` (int32 [B, L]) with the stateless ``seed`` (int [2]).

    Returns ``{"token_ids": [B, L], "mask_positions": [B, P], "mask_ids": [B, P],
    "mask_weights": [B, P]}`` with ``P = max_selections`` (ids int32, weights float32)."""
    token_ids = tf.convert_to_tensor(token_ids, tf.int32)
    selection_seed, rule_seed, token_seed = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=3))
    shape = tf.shape(token_ids)
    length = shape[1]
    selectable = tf.reduce_all(
        tf.not_equal(token_ids[..., None], tf.constant(list(unselectable_ids), tf.int32)),
        axis=-1)
    # ceil(rate * n) of the n selectable tokens, at most max_selections
    available = tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1)
    chosen = tf.minimum(tf.cast(tf.math.ceil(selection_rate * available), tf.int32),
                        max_selections)
    # A uniform choice without replacement: the selectable positions of lowest random score.
    scores = tf.random.stateless_uniform(shape, selection_seed)
    scores = tf.where(selectable, scores, 2.0)
    order = tf.argsort(scores, axis=1, stable=True)[:, :max_selections]
    order = tf.pad(order, [[0, 0], [0, max_selections - tf.shape(order)[1]]])
    kept = tf.range(max_selections)[None, :] < chosen[:, None]
    positions = tf.sort(tf.where(kept, order, length), axis=1)  # chosen ones first, in order
    positions = tf.where(kept, positions, 0)
    weights = tf.cast(kept, tf.float32)
    original = tf.gather(token_ids, positions, batch_dims=1) * tf.cast(kept, tf.int32)

    draw = tf.random.stateless_uniform(tf.shape(positions), rule_seed)
    random_ids = tf.random.stateless_uniform(tf.shape(positions), token_seed, minval=0,
                                             maxval=vocabulary_size, dtype=tf.int32)
    replacement = tf.where(draw < mask_token_rate, mask_token_id,
                           tf.where(draw < mask_token_rate + random_token_rate, random_ids,
                                    original))
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], tf.shape(positions))
    updates = tf.boolean_mask(tf.stack([rows, positions], axis=-1), kept)
    masked = tf.tensor_scatter_nd_update(token_ids, updates,
                                         tf.boolean_mask(replacement, kept))
    return {"token_ids": masked, "mask_positions": positions, "mask_ids": original,
            "mask_weights": weights}


__all__ = ["seeded_bert_mask"]
