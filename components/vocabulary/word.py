"""Word vocabularies: whitespace-split words, the most frequent kept, the rest ``unk``.

The word-level LMs (the NNLM of Bengio et al. 2003 §4, word2vec of Mikolov et al. 2013,
ELMo's word inputs, AWD-LSTM of Merity et al. 2018) use whole words: the ``vocab_size``
minus the special tokens most frequent words seen at least ``min_frequency`` times, every
other word mapped to ``unk``. Words are split here with the very function the tokenizer
runs (:func:`lmfactory.models.tokenizers.word.split_words`: Unicode whitespace, optional
lowercasing, special tokens kept as written), so counts and lookups agree.

Besides the word counts, each batch reports its number of words under
:data:`TOTAL_KEY` (the empty string, never a word): Beam sums it like any word and it
outranks every word in the executor's top-k cut, so the ``unk`` count (all words minus
the kept words' counts) is exact even when fewer than all distinct words reach the learner.
"""

from __future__ import annotations

import collections
import os
from typing import Iterable, Mapping, Sequence

UNK = "<unk>"
SPECIAL_TOKENS = {"unk": UNK}
VOCABULARY_FILE = "vocab.txt"
COUNTS_FILE = "counts.txt"
TOTAL_KEY = ""  # the number of words of a batch (split_words never yields an empty word)


def check_special_tokens(special_tokens: Mapping[str, str]) -> None:
    """A ValueError for a special token the tokenizer could never read back as one word."""
    for role, token in special_tokens.items():
        if token != "".join(token.split()):
            raise ValueError(f"special_tokens[{role!r}] for word must not contain whitespace "
                             f"(words are split on it), got {token!r}")


def count_lines(lines: Sequence[str], lowercase: bool,
                special_tokens: Mapping[str, str]) -> list[tuple[str, int]]:
    """(word, count) pairs of a batch of lines, plus (:data:`TOTAL_KEY`, number of words)."""
    import tensorflow as tf

    from lmfactory.models.tokenizers import unique_special_tokens
    from lmfactory.models.tokenizers.word import split_words

    if not lines:
        return []
    words = split_words(tf.constant(list(lines)), lowercase,
                        unique_special_tokens(dict(special_tokens)))
    counts = collections.Counter(word.decode("utf-8") for word in words.flat_values.numpy())
    total = sum(counts.values())
    return list(counts.items()) + ([(TOTAL_KEY, total)] if total else [])


def learn_vocabulary(word_counts: Iterable[tuple[str, int]], vocab_size: int,
                     min_frequency: int, special_tokens: Mapping[str, str]
                     ) -> tuple[list[str], list[int]]:
    """The tokens by id and their corpus counts.

    Special tokens first (role order, each once), then the ``vocab_size - len(specials)``
    most frequent other words with count >= ``min_frequency``, by decreasing count, ties by
    the word. The ``unk`` token's count is every occurrence not of a kept word or another
    special token (its literal occurrences included); the other special tokens count their
    literal occurrences.
    """
    from lmfactory.models.tokenizers import unique_special_tokens

    counts = dict(word_counts)
    total = counts.pop(TOTAL_KEY, sum(counts.values()))
    specials = unique_special_tokens(dict(special_tokens))
    candidates = [(word, count) for word, count in counts.items()
                  if word not in specials and count >= min_frequency]
    candidates.sort(key=lambda item: (-item[1], item[0]))
    kept = candidates[:max(vocab_size - len(specials), 0)]
    special_counts = {token: counts.get(token, 0) for token in specials}
    unk = special_tokens["unk"]
    special_counts[unk] = total - sum(count for _, count in kept) - sum(
        count for token, count in special_counts.items() if token != unk)
    tokens = specials + [word for word, _ in kept]
    return tokens, [special_counts[token] for token in specials] + [c for _, c in kept]


def tokenizer_config(lowercase: bool, special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content of a word folder (CONTRACTS §2)."""
    return {"kind": "word", "vocabulary_file": VOCABULARY_FILE, "counts_file": COUNTS_FILE,
            "lowercase": bool(lowercase),
            "special_tokens": dict(SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens)}


def write_files(output_dir: str, tokens: Sequence[str], counts: Sequence[int]) -> None:
    """Writes ``vocab.txt`` (one token a line, the line number is the id) and
    ``counts.txt`` (the aligned counts)."""
    import tensorflow as tf

    if len(tokens) != len(counts):
        raise ValueError(f"{len(tokens)} tokens but {len(counts)} counts")
    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, VOCABULARY_FILE), "w") as f:
        f.write("".join(token + "\n" for token in tokens))
    with tf.io.gfile.GFile(os.path.join(output_dir, COUNTS_FILE), "w") as f:
        f.write("".join(f"{int(count)}\n" for count in counts))


__all__ = ["COUNTS_FILE", "SPECIAL_TOKENS", "TOTAL_KEY", "UNK", "VOCABULARY_FILE",
           "check_special_tokens", "count_lines", "learn_vocabulary", "tokenizer_config", "write_files"]
