"""Span corruption (Raffel et al. 2020, §3.1.4 "Unsupervised objectives" and §3.3.4
"Corrupting spans"; the reference: google-research/text-to-text-transfer-transformer
``preprocessors.span_corruption`` / ``random_spans_noise_mask`` / ``random_spans_helper``).

"We randomly sample and then drop out 15% of tokens in the input sequence. All
consecutive spans of dropped-out tokens are replaced by a single sentinel token. Each
sentinel token is assigned a token ID that is unique to the sequence. The sentinel IDs are
special tokens which are added to our vocabulary and do not correspond to any wordpiece.
The target then corresponds to all of the dropped-out spans of tokens, delimited by the
same sentinel tokens used in the input sequence plus a final sentinel token to mark the
end of the target sequence." With a mean span length of 3 (§3.3.4, the baseline's
choice). The sentinels count down from the top of the vocabulary: the first span of a
sequence is ``<extra_id_0>``, the last id; the next ``<extra_id_1>``, one below; and so on.
The final mark of both sequences is EOS (the released code appends ``</s>``).

Exact lengths (the reference's ``random_spans_helper``): a raw segment of n tokens has
round(0.15 n) noise tokens in round(noise / 3) spans, so the inputs hold (n - noise) +
spans + 1 ids and the targets noise + spans + 1; the raw length is the largest n whose
inputs fit ``max_seq_length`` (512 -> 568 raw tokens -> 512 inputs / 114 targets). The
noise mask (``noise_mask``): the noise and the non-noise tokens are each split into that
many non-empty spans uniformly at random (a random composition), interleaved starting
with non-noise, so every span is a run of exactly the drawn length.

Stream and segments: as the reference (``reduce_concat_tokens`` then ``split_tokens``),
each shard's documents (canonical order, see ``executor.py``) are concatenated into one
token stream and cut into raw segments of n tokens; the shorter last segment of a shard
is kept (its lengths follow from its own n). Draws come from a RNG seeded by (seed,
split, shard, segment), so a re-run is byte-identical.

Registry record (``OBJECTIVE``): a document is one token stream (``registry.STREAM``);
the vocabulary state is the pad id (0: T5's, also the decoder's start token), the EOS id
(``end_of_text``) and the sentinel ids (the special tokens ``sentinel_0``, ``sentinel_1``,
..., which must count down from the last id); records hold ``inputs`` [max_seq_length]
and ``targets`` [target length], right-padded with 0. ``masked_lm_prob`` is the noise
density (0.15 default); the mean span length is 3 (``MEAN_NOISE_SPAN_LENGTH``). The
converter gives x = ``encoder_token_ids``, ``encoder_padding_mask``,
``decoder_token_ids`` (0 then the targets shifted right), ``decoder_padding_mask``;
y = the targets; sample_weight = 1 on real target tokens (teacher forcing, §3.1.4).
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import registry

OBJECTIVE_NAME = "span_corruption"
MEAN_NOISE_SPAN_LENGTH = 3.0  # §3.3.4
SENTINEL_ROLE = "sentinel_{}"


def _round(x: float) -> int:
    """Rounding as the reference (Python 3's round: halves to even)."""
    return int(round(x))


def span_counts(length: int, noise_density: float,
                mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH) -> tuple:
    """``(noise tokens, noise spans)`` of a raw segment of ``length`` tokens (the
    reference's ``random_spans_noise_mask``: at least one noise token and one span, at
    least one non-noise token)."""
    length = max(length, 2)
    noise = min(max(_round(length * noise_density), 1), length - 1)
    spans = max(_round(noise / mean_noise_span_length), 1)
    return noise, spans


def random_spans_helper(inputs_length: int, noise_density: float,
                        mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH) -> tuple:
    """``(raw tokens, targets length)`` such that a raw segment gives exactly
    ``inputs_length`` input ids (EOS included): the largest raw length that fits."""

    def lengths(tokens):
        noise = _round(tokens * noise_density)
        spans = _round(noise / mean_noise_span_length)
        return tokens - noise + spans + 1, noise + spans + 1

    tokens = inputs_length - 1
    while lengths(tokens + 1)[0] <= inputs_length:
        tokens += 1
    inputs, targets = lengths(tokens)
    if noise_density == 0.5 and targets > inputs:  # the reference's tie-break
        tokens -= 1
        targets -= 1
    return tokens, targets


def _random_composition(rng: np.random.Generator, items: int, parts: int) -> np.ndarray:
    """``items`` split into ``parts`` non-empty runs, uniformly at random: the lengths."""
    cuts = np.sort(rng.choice(np.arange(1, items), size=parts - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [items]]))


def noise_mask(length: int, noise_density: float, rng: np.random.Generator,
               mean_noise_span_length: float = MEAN_NOISE_SPAN_LENGTH) -> np.ndarray:
    """Bool [length]: True on the noise tokens, in spans (non-noise span first)."""
    padded = max(length, 2)
    noise, spans = span_counts(padded, noise_density, mean_noise_span_length)
    noise_lengths = _random_composition(rng, noise, spans)
    kept_lengths = _random_composition(rng, padded - noise, spans)
    mask = np.concatenate([np.concatenate([np.zeros(k, bool), np.ones(n, bool)])
                           for k, n in zip(kept_lengths, noise_lengths)])
    return mask[:length]


def _replace_spans(tokens: np.ndarray, mask: np.ndarray, sentinels: Sequence[int]) -> list:
    """The tokens where ``mask`` is False, each run of True replaced by the next
    sentinel."""
    out, span = [], 0
    for i, token in enumerate(tokens):
        if not mask[i]:
            out.append(int(token))
        elif i == 0 or not mask[i - 1]:
            out.append(int(sentinels[span]))
            span += 1
    return out


def corrupt(tokens: Sequence[int], mask: np.ndarray, sentinels: Sequence[int],
            eos_id: int) -> tuple:
    """``(inputs, targets)``: the kept tokens with a sentinel per noise span, and the
    sentinels each followed by its dropped span; both end with EOS."""
    tokens = np.asarray(tokens)
    inputs = _replace_spans(tokens, mask, sentinels) + [eos_id]
    targets = _replace_spans(tokens, ~mask, sentinels) + [eos_id]
    return inputs, targets


def seeded_generator(*scope) -> np.random.Generator:
    digest = hashlib.sha256("/".join(str(part) for part in scope).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def _feature(values, length):
    padded = list(values) + [0] * (length - len(values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=padded))


def shard_examples(documents: Sequence[Sequence[int]], state: dict, config: dict,
                   seed_scope: Iterable = ()) -> tuple:
    """Serialized span-corruption records of one shard (documents in canonical order)
    and their counts (segments, raw tokens, noise tokens, noise spans)."""
    density = float(config["masked_lm_prob"])
    raw_length, target_length = random_spans_helper(int(config["max_seq_length"]), density)
    stream = np.concatenate([np.asarray(d, np.int64) for d in documents]) if documents \
        else np.zeros([0], np.int64)
    records, noise_tokens, noise_spans = [], 0, 0
    for number, start in enumerate(range(0, len(stream), raw_length)):
        segment = stream[start:start + raw_length]
        if len(segment) < 2:
            continue
        mask = noise_mask(len(segment), density, seeded_generator(*seed_scope, number))
        inputs, targets = corrupt(segment, mask, state["sentinel_ids"], state["eos_id"])
        noise_tokens += int(mask.sum())
        noise_spans += int(np.sum(mask[1:] & ~mask[:-1]) + mask[0])
        example = tf.train.Example(features=tf.train.Features(feature={
            "inputs": _feature(inputs, int(config["max_seq_length"])),
            "targets": _feature(targets, target_length)}))
        records.append(example.SerializeToString(deterministic=True))
    stats = {"segments": len(records), "tokens": int(len(stream)),
             "noise_tokens": noise_tokens, "noise_spans": noise_spans}
    return records, stats


# --------------------------------------------------------------------------- registry record


def vocabulary_state(tokenizer, tokenizer_config: dict) -> dict:
    """The pad (must be 0), EOS and sentinel ids; the sentinels count down from the top."""
    specials = tokenizer_config.get("special_tokens", {})
    if "end_of_text" not in specials or "pad" not in specials:
        raise ValueError(f"{OBJECTIVE_NAME} needs 'pad' and 'end_of_text' special tokens")
    pad_id = int(tokenizer.token_to_id(specials["pad"]))
    if pad_id != 0:
        raise ValueError(f"{OBJECTIVE_NAME} pads with id 0; the vocabulary's pad is {pad_id}")
    sentinels = []
    while SENTINEL_ROLE.format(len(sentinels)) in specials:
        sentinels.append(int(tokenizer.token_to_id(specials[SENTINEL_ROLE.format(
            len(sentinels))])))
    size = int(tokenizer.vocabulary_size())
    if not sentinels:
        raise ValueError(f"{OBJECTIVE_NAME} needs sentinel special tokens (roles "
                         f"sentinel_0, sentinel_1, ...) at the top of the vocabulary")
    if sentinels != list(range(size - 1, size - 1 - len(sentinels), -1)):
        raise ValueError(f"{OBJECTIVE_NAME}: the sentinels must count down from the last id "
                         f"{size - 1}, got {sentinels[:3]}...")
    return {"eos_id": int(tokenizer.token_to_id(specials["end_of_text"])),
            "sentinel_ids": sentinels}


def check_config(config: dict) -> None:
    if config["ngram_masking"] > 0:
        raise ValueError(f"ngram_masking applies to the masked-LM objectives, not "
                         f"{OBJECTIVE_NAME!r}; set it to 0")
    if not 0.0 < config["masked_lm_prob"] < 1.0:
        raise ValueError(f"{OBJECTIVE_NAME}: masked_lm_prob (the noise density) must lie in "
                         f"(0, 1), got {config['masked_lm_prob']}")


def feature_spec(config: dict) -> dict:
    _, target_length = random_spans_helper(int(config["max_seq_length"]),
                                           float(config["masked_lm_prob"]))
    return {"inputs": tf.io.FixedLenFeature([int(config["max_seq_length"])], tf.int64),
            "targets": tf.io.FixedLenFeature([target_length], tf.int64)}


def converter(config: dict):
    return span_corruption_batch


def span_corruption_batch(features: dict):
    """Records -> teacher forcing: the decoder reads 0 (the start id) then the targets
    shifted right and predicts the targets."""
    inputs = tf.cast(features["inputs"], tf.int32)
    targets = tf.cast(features["targets"], tf.int32)
    decoder_ids = tf.concat([tf.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
    target_mask = tf.not_equal(targets, 0)
    x = {"encoder_token_ids": inputs, "encoder_padding_mask": tf.not_equal(inputs, 0),
         "decoder_token_ids": decoder_ids, "decoder_padding_mask": target_mask}
    return x, targets, tf.cast(target_mask, tf.float32)


def vocabulary_record(state: dict) -> dict:
    return {"end_of_text_id": state["eos_id"], "sentinel_ids": state["sentinel_ids"][:3]}


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.STREAM,
    vocabulary_state=vocabulary_state,
    shard_examples=shard_examples,
    feature_spec=feature_spec,
    converter=converter,
    causal=False,
    check_config=check_config,
    vocabulary_record=vocabulary_record,
    paper="Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
          "Text-to-Text Transformer, §3.1.4 and §3.3.4 (span corruption)"))
