"""Ordered streams read in variable-length BPTT windows (Merity, Keskar & Socher 2018,
"Regularizing and Optimizing LSTM Language Models", §4.1 and the training procedure of §5;
the reference code's ``batchify`` / ``get_batch`` / ``repackage_hidden``).

AWD-LSTM trains on one token stream cut into B parallel streams (``batchify``); each step
reads the next window of every stream, and the LSTM's final state of a window is the
initial state of the next (the gradient stopped between them). The window length is drawn
per step (§4.1): the base length is ``bptt`` with probability 0.95 and ``bptt / 2``
otherwise, the length ~ N(base, 5) (§5: p = 0.95, s = 5), at least 5 tokens (the
reference's ``max(5, ...)``), and the stream's last window is whatever is left; the
learning rate is rescaled by seq_len / bptt (the model's step, `AwdLstmCausalLM`).

Objective ``causal_lm_bptt``: the records are ``causal_lm_streams``'s (``input_ids[L+1]``,
consecutive segments of one stream at a stride of L = ``max_seq_length`` = bptt; the same
``shard_examples``, spec and converter) and it DECLARES ``ordered_streams`` (the trainer
builds the model with ``stream_batch_size``). Its reader (`Objective.window_lengths`,
``features.make_dataset``) rejoins the records into their token stream, cuts it into B
contiguous rows (``ordered_streams.stream_rows``: batchify over tokens, so any split of at
least B + 1 tokens fills the B streams) and emits windows of them:
with ``training`` the sampled lengths (fresh draws every pass over the streams, seeded by
the reader's seed and the pass), otherwise windows of L (the last one shorter), so
evaluation covers every token of the streams once. Batch: x = ``token_ids``,
``padding_mask`` [B, T] and ``stream_position`` [B] (the window's index in this pass; 0 =
the streams start again), y = next ids [B, T], sample_weight ones; T varies per batch.
"""

from __future__ import annotations

import numpy as np

from lmfactory.components.pretraining_data import causal_lm, ordered_streams, registry

OBJECTIVE_NAME = "causal_lm_bptt"
FULL_LENGTH_PROBABILITY = 0.95  # §5: p
LENGTH_STD = 5.0                # §5: s
MIN_WINDOW = 5                  # the reference's max(5, int(np.random.normal(bptt, 5)))


def sampled_lengths(bptt: int, total: int, rng: np.random.Generator) -> list:
    """Window lengths (§4.1) covering ``total`` next-token positions of a stream, in order:
    each drawn around ``bptt`` (or ``bptt / 2`` with probability 0.05), std 5, at least 5;
    the last one is cut to what is left."""
    lengths, done = [], 0
    while done < total:
        base = bptt if rng.random() < FULL_LENGTH_PROBABILITY else bptt / 2.0
        length = max(MIN_WINDOW, int(rng.normal(base, LENGTH_STD)))
        length = min(length, total - done)
        lengths.append(length)
        done += length
    return lengths


def fixed_lengths(length: int, total: int) -> list:
    """Windows of ``length`` covering ``total`` positions, the last one shorter."""
    return [min(length, total - start) for start in range(0, total, length)]


def window_lengths(config: dict, training: bool):
    """``fn(rng, total) -> lengths`` of this reader: sampled around L = ``max_seq_length``
    in training, windows of L otherwise."""
    bptt = int(config["max_seq_length"])
    if training:
        return lambda rng, total: sampled_lengths(bptt, total, rng)
    return lambda rng, total: fixed_lengths(bptt, total)


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.STREAM,
    vocabulary_state=causal_lm.end_of_text_id,
    shard_examples=ordered_streams.shard_examples,
    feature_spec=causal_lm.feature_spec,
    converter=ordered_streams.converter,
    causal=True,
    check_config=causal_lm.check_config,
    vocabulary_record=causal_lm.vocabulary_record,
    ordered_streams=True,
    window_lengths=window_lengths,
    paper="Merity, Keskar, Socher 2018, Regularizing and Optimizing LSTM Language Models, "
          "§4.1 (variable-length BPTT) and §5 (the hidden state carried across batches of "
          "B parallel streams: the reference's batchify / get_batch / repackage_hidden)"))
