"""Masked-LM target selection shared by the MLM objectives (bert_mlm_nsp, albert_mlm_sop, mlm).

* Token masking (Devlin et al. 2019, "BERT" §3.1 Task #1, App. C.2): ``round(n *
  masked_lm_prob)`` (at least 1, at most ``max_predictions_per_seq``) of the ``n`` tokens other
  than the ``cls``/``sep`` tokens are chosen; each chosen token becomes the mask token 80% of
  the time, a random non-special token 10%, and stays unchanged 10% (``mask_token_rate`` /
  ``random_token_rate``). Positions are reported in increasing order.
* Whole-word masking (google-research/bert, 2019 update): all pieces of a word are chosen
  together and share one 80/10/10 decision.
* N-gram masking (Lan et al. 2020, "ALBERT" §4.1, after Joshi et al. 2019, "SpanBERT"): the
  targets are spans of ``n`` whole words with ``n`` drawn from
  ``p(n) = (1/n) / sum_{k=1..N} 1/k`` (N = ``ngram_masking``, ALBERT uses 3); spans are
  added until ``masked_lm_prob`` of the tokens are chosen, and every token of a span gets its
  own 80/10/10 decision. See :func:`create_ngram_masked_lm_predictions` for how the budget is
  met without biasing the span lengths.

What a word is depends on the vocabulary kind (:func:`is_continuation_piece`): WordPiece marks
a piece that continues a word with a ``##`` prefix; GPT-2/RoBERTa byte-level BPE and
SentencePiece instead mark a piece that *starts* a word (after a space) with ``Ġ`` and ``▁``,
so there every other piece continues the word before it. A piece only joins the word right
before it (never across a ``cls``/``sep`` token); special and reserved tokens (``[unused3]``,
and ``<s>``-style control symbols of BPE/SentencePiece vocabularies) are words of their own and
never a random replacement. Known limitation of the BPE rule: the first word of a sentence
carries no space marker, so it joins the last word of the sentence before it when the two are
adjacent in a sequence.
"""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple, Sequence

# No TensorFlow at import: a Beam worker building a shard imports this module
# (nsp_instances.py); only the one-record ``tf.train.Feature`` helpers below import it.

WORDPIECE_CONTINUATION = "##"
BPE_WORD_START = "\u0120"           # "Ġ": GPT-2's stand-in for the space byte
SENTENCEPIECE_WORD_START = "\u2581"  # "▁": SentencePiece's space marker
VOCABULARY_KINDS = ("wordpiece", "bpe", "sentencepiece")
_RESERVED_TOKEN = re.compile(r"^\[[A-Za-z0-9_]+\]$")  # [PAD], [unused12], ...
_CONTROL_TOKEN = re.compile(r"^<[^<>\s]+>$")  # <s>, </s>, <unk>, <|endoftext|>, ...


def is_reserved_token(token: str, kind: str) -> bool:
    """Bracketed reserved tokens (``[unused3]``), and for BPE/SentencePiece vocabularies also
    control symbols (``<s>``); never a random replacement, always a word of their own."""
    if _RESERVED_TOKEN.match(token):
        return True
    return kind != "wordpiece" and bool(_CONTROL_TOKEN.match(token))


def is_continuation_piece(token: str, kind: str) -> bool:
    """True when ``token`` continues the word of the piece before it (word-boundary rule)."""
    if kind == "wordpiece":
        return token.startswith(WORDPIECE_CONTINUATION)
    if kind == "bpe":
        return not token.startswith(BPE_WORD_START)
    if kind == "sentencepiece":
        return not token.startswith(SENTENCEPIECE_WORD_START)
    raise ValueError(f"Unknown vocabulary kind {kind!r}; expected one of {VOCABULARY_KINDS}")


@dataclasses.dataclass(frozen=True)
class BertVocabulary:
    """The ids masking needs: specials, word-continuation pieces, random-replacement pool."""

    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    size: int
    continuation_ids: frozenset
    replacement_ids: tuple  # every id that is not a special/reserved token

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], special_tokens: dict, kind: str = "wordpiece",
                    objective: str = "bert_mlm_nsp") -> "BertVocabulary":
        """``tokens`` is the id-ordered vocabulary; ``special_tokens`` maps role -> token;
        ``kind`` (tokenizer.json ``kind``) picks the word-boundary rule."""
        if kind not in VOCABULARY_KINDS:
            raise ValueError(f"Unknown vocabulary kind {kind!r}; expected one of "
                             f"{VOCABULARY_KINDS}")
        index = {token: i for i, token in enumerate(tokens)}
        for role in ("cls", "sep", "mask", "pad"):
            if special_tokens.get(role) not in index:
                raise ValueError(f"{objective} needs a {role!r} special token in the vocabulary "
                                 f"(tokenizer.json special_tokens), got {special_tokens}")
        special_ids = {index[t] for t in special_tokens.values() if t in index}
        reserved_ids = {i for i, t in enumerate(tokens) if is_reserved_token(t, kind)}
        replacement_ids = tuple(i for i in range(len(tokens))
                                if i not in special_ids and i not in reserved_ids)
        continuation_ids = frozenset(
            i for i, t in enumerate(tokens)
            if i not in special_ids and i not in reserved_ids and is_continuation_piece(t, kind))
        return cls(cls_id=index[special_tokens["cls"]], sep_id=index[special_tokens["sep"]],
                   mask_id=index[special_tokens["mask"]], pad_id=index[special_tokens["pad"]],
                   size=len(tokens), continuation_ids=continuation_ids,
                   replacement_ids=replacement_ids)


class MaskedLmPredictions(NamedTuple):
    output_tokens: list  # tokens after [MASK]/random/keep replacement
    positions: list      # increasing positions of the chosen tokens
    labels: list         # original ids at those positions
    replacements: dict   # counts: {"mask": .., "random": .., "kept": ..}
    capped: bool         # True when max_predictions_per_seq limited the count
    span_lengths: tuple = ()  # n-gram masking: the length in words of each span


def create_masked_lm_predictions(tokens: Sequence[int], vocab: BertVocabulary,
                                 masked_lm_prob: float, max_predictions_per_seq: int,
                                 whole_word_masking: bool, rng, mask_token_rate: float = 0.8,
                                 random_token_rate: float = 0.1,
                                 ngram_masking: int = 0) -> MaskedLmPredictions:
    """Chooses and replaces the masked-LM targets of one sequence (BERT §3.1 Task #1).

    ``ngram_masking > 0`` switches to :func:`create_ngram_masked_lm_predictions` (whole words
    always, so ``whole_word_masking`` is implied).
    """
    if ngram_masking > 0:
        return create_ngram_masked_lm_predictions(
            tokens, vocab, masked_lm_prob, max_predictions_per_seq, ngram_masking, rng,
            mask_token_rate, random_token_rate)
    groups = candidate_groups(tokens, vocab, whole_word_masking)
    rng.shuffle(groups)
    num_candidates = sum(len(group) for group in groups)
    wanted = max(1, int(round(num_candidates * masked_lm_prob)))
    num_to_predict = min(max_predictions_per_seq, wanted)
    output_tokens, chosen = list(tokens), []
    replacements = {"mask": 0, "random": 0, "kept": 0}
    for group in groups:
        if len(chosen) >= num_to_predict:
            break
        if len(chosen) + len(group) > num_to_predict:
            continue  # a whole word that does not fit; try a shorter one
        kind = _replacement_kind(rng, mask_token_rate, random_token_rate)
        replacements[kind] += len(group)
        for position in group:
            output_tokens[position] = _replacement_id(kind, tokens[position], vocab, rng)
            chosen.append(position)
    positions = sorted(chosen)
    return MaskedLmPredictions(output_tokens, positions, [tokens[p] for p in positions],
                               replacements, wanted > max_predictions_per_seq)


def candidate_groups(tokens, vocab: BertVocabulary, whole_word_masking: bool) -> list:
    """Positions that may be masked, grouped into words when ``whole_word_masking``."""
    groups = []
    for position, token in enumerate(tokens):
        if token in (vocab.cls_id, vocab.sep_id):
            continue
        joins_previous = (whole_word_masking and token in vocab.continuation_ids
                          and groups and groups[-1][-1] == position - 1)
        if joins_previous:
            groups[-1].append(position)
        else:
            groups.append([position])
    return groups


def ngram_probabilities(max_n: int) -> list:
    """ALBERT §4.1: ``p(n) = (1/n) / sum_{k=1..N} 1/k`` for ``n = 1..N``."""
    if max_n < 1:
        raise ValueError(f"n-gram masking needs max n >= 1, got {max_n}")
    weights = [1.0 / n for n in range(1, max_n + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def create_ngram_masked_lm_predictions(tokens: Sequence[int], vocab: BertVocabulary,
                                       masked_lm_prob: float, max_predictions_per_seq: int,
                                       max_n: int, rng, mask_token_rate: float = 0.8,
                                       random_token_rate: float = 0.1) -> MaskedLmPredictions:
    """N-gram masking (ALBERT §4.1): spans of ``n ~ p(n)`` whole words, ~``masked_lm_prob``
    of the tokens in total, 80/10/10 per token.

    A span is drawn by drawing ``n`` from ``p(n)`` and then a place uniformly among those where
    ``n`` whole, adjacent words are still free (``p`` is renormalised over the lengths that
    still have a place, when some no longer do). Spans never overlap or touch: touching spans
    would read as one longer n-gram, beyond the maximum ``N``, and no span may take the count
    past ``max_predictions_per_seq``.

    How many spans: the budget is ``b = masked_lm_prob * n_tokens`` (a real number). With
    ``r`` tokens of it left, one more span is added with probability ``r / E[max(T, r)]``,
    ``T`` being the token count of the span that would be drawn next (the expectation is exact:
    over the places and lengths available). This makes the expected number of chosen tokens
    exactly ``b`` (by induction: from ``r`` the expected number added is
    ``P(add) * E[T + max(r - T, 0)] = r``), and since the decision is taken before the length
    is drawn, every span, including the one that crosses the budget, has length ``n`` with
    probability ``p(n)``. (Keeping or dropping the crossing span by its own length, as the
    ALBERT script does by trying shorter n-grams, would bias the lengths towards 1.) The first
    span is always added (at least one prediction, as in BERT).
    """
    words = candidate_groups(tokens, vocab, whole_word_masking=True)
    probabilities = ngram_probabilities(max_n)
    budget = sum(len(word) for word in words) * masked_lm_prob
    # linked[i]: word i + 1 starts right after word i (no cls/sep between them).
    linked = [words[i + 1][0] == words[i][-1] + 1 for i in range(len(words) - 1)] + [False]
    offsets = [0]  # token offsets of the words, for span sizes
    for word in words:
        offsets.append(offsets[-1] + len(word))
    covered_words = [False] * len(words)
    output_tokens, chosen, span_lengths = list(tokens), [], []
    replacements = {"mask": 0, "random": 0, "kept": 0}
    while True:
        room = max_predictions_per_seq - len(chosen)
        run = _free_runs(covered_words, linked)
        options = {n: [i for i in range(len(words) - n + 1)
                       if run[i] >= n and offsets[i + n] - offsets[i] <= room]
                   for n in range(1, max_n + 1)}
        lengths = [n for n in options if options[n]]
        if not lengths:
            break
        total = sum(probabilities[n - 1] for n in lengths)
        weights = [probabilities[n - 1] / total for n in lengths]
        remaining = budget - len(chosen)
        if chosen:
            if remaining <= 0:
                break
            expected = sum(
                weight * sum(max(offsets[i + n] - offsets[i], remaining) for i in options[n])
                / len(options[n]) for n, weight in zip(lengths, weights))
            if rng.random() >= remaining / expected:
                break
        n = _draw(rng, lengths, weights)
        start = options[n][rng.randrange(len(options[n]))]
        for index in range(start, start + n):
            covered_words[index] = True
            for position in words[index]:
                kind = _replacement_kind(rng, mask_token_rate, random_token_rate)
                replacements[kind] += 1
                output_tokens[position] = _replacement_id(kind, tokens[position], vocab, rng)
                chosen.append(position)
        span_lengths.append(n)
    positions = sorted(chosen)
    return MaskedLmPredictions(output_tokens, positions, [tokens[p] for p in positions],
                               replacements, int(round(budget)) > max_predictions_per_seq,
                               tuple(span_lengths))


def _free_runs(covered: list, linked: list) -> list:
    """``run[i]``: how many adjacent words from word ``i`` on may form a new span.

    A word may join a span when it is not chosen and does not touch a chosen word (a chosen
    word right before or after it in the sequence); the span's words must be adjacent.
    """
    count = len(covered)
    free = [not covered[i]
            and not (i > 0 and linked[i - 1] and covered[i - 1])
            and not (linked[i] and covered[i + 1])
            for i in range(count)]
    run = [0] * (count + 1)
    for i in range(count - 1, -1, -1):
        if free[i]:
            run[i] = 1 + (run[i + 1] if linked[i] else 0)
    return run


def _draw(rng, values: list, weights: list):
    """One of ``values`` with probability proportional to ``weights``."""
    point = rng.random() * sum(weights)
    for value, weight in zip(values, weights):
        point -= weight
        if point < 0:
            return value
    return values[-1]


def _replacement_kind(rng, mask_token_rate, random_token_rate) -> str:
    draw = rng.random()
    if draw < mask_token_rate:
        return "mask"
    if draw < mask_token_rate + random_token_rate:
        return "random"
    return "kept"


def _replacement_id(kind, original, vocab: BertVocabulary, rng) -> int:
    if kind == "mask":
        return vocab.mask_id
    if kind == "random":
        return vocab.replacement_ids[rng.randrange(len(vocab.replacement_ids))]
    return original


# --------------------------------------------------------------------------- records


def int_feature(values):
    """A ``tf.train.Feature`` of int64 values."""
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def padded(values, length, pad=0) -> list:
    return list(values) + [pad] * (length - len(values))


def masked_lm_features(masked: MaskedLmPredictions, max_predictions_per_seq: int) -> dict:
    """``masked_lm_positions/ids/weights[P]`` (google-research/bert names, CONTRACTS §3)."""
    import tensorflow as tf

    count = len(masked.positions)
    return {
        "masked_lm_positions": int_feature(padded(masked.positions, max_predictions_per_seq)),
        "masked_lm_ids": int_feature(padded(masked.labels, max_predictions_per_seq)),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
            value=padded([1.0] * count, max_predictions_per_seq, 0.0))),
    }


def masking_stats(max_n: int = 0) -> dict:
    """Zeroed counters of :func:`count_masking` (span counts only with n-gram masking)."""
    stats = {"masked_lm_predictions": 0, "masked_lm_mask": 0, "masked_lm_random": 0,
             "masked_lm_kept": 0, "capped_instances": 0}
    stats.update({f"masked_spans_{n}": 0 for n in range(1, max_n + 1)})
    return stats


def count_masking(stats: dict, masked: MaskedLmPredictions) -> None:
    stats["masked_lm_predictions"] += len(masked.positions)
    for kind, count in masked.replacements.items():
        stats[f"masked_lm_{kind}"] += count
    stats["capped_instances"] += int(masked.capped)
    for n in masked.span_lengths:
        stats[f"masked_spans_{n}"] += 1
