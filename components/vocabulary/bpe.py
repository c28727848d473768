"""Byte-level byte-pair encoding (BPE): pre-tokenization, merge learning and file writing.

BPE (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units")
starts from single symbols and repeatedly merges the most frequent adjacent pair. GPT-2
(Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", §2.2) runs it on
UTF-8 *bytes*, each byte shown as a printable unicode character, so every string can be
encoded without an unknown token, and first splits text with a regex so merges never cross
letter / digit / punctuation / whitespace boundaries.

The files written here (``vocab.json``, ``merges.txt``, and ``word_pieces.txt``: the merged
pieces of the corpus's most frequent words, the tokenizer's static word table) are read by
the ``bpe`` kind's tokenizer (keras-nlp's ``BytePairTokenizer`` made faster,
``models/tokenizers/byte_level_fast.py``) through
:func:`lmfactory.models.tokenizers.load_tokenizer`.
"""

from __future__ import annotations

import collections
import gc
import heapq
import json
import logging
import math
import os
import re
import time
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import regex

END_OF_TEXT = "<|endoftext|>"
# GPT-2's set (Radford et al. 2019): one token ends every document and doubles as padding.
SPECIAL_TOKENS = {"end_of_text": END_OF_TEXT, "pad": END_OF_TEXT}
# RoBERTa's set (Liu et al. 2019, fairseq's dictionary): <s>=0, <pad>=1, </s>=2, <unk>=3.
ROBERTA_SPECIAL_TOKENS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>",
                          "mask": "<mask>"}
# Roles whose tokens take the first ids, in this order (then any other role's token).
_LEADING_ROLES = ("cls", "pad", "sep", "unk", "mask")
MERGES_HEADER = "#version: 0.2"
VOCABULARY_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
# The word table holds the merged pieces of at most this many words, most frequent first.
WORD_PIECES_LIMIT = 100_000


def gpt2_byte_alphabet() -> list[tuple[int, str]]:
    """GPT-2's (byte, printable character) table, in GPT-2's base-vocabulary order.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, ...)
    are shifted to code points 256 and up, so no token ever holds whitespace or a control
    character. The printable bytes come first, then the shifted ones.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    shifted = [byte for byte in range(256) if byte not in printable]
    return ([(byte, chr(byte)) for byte in printable]
            + [(byte, chr(256 + index)) for index, byte in enumerate(shifted)])


BYTE_SYMBOLS = [symbol for _, symbol in gpt2_byte_alphabet()]
BYTE_TO_SYMBOL = dict(gpt2_byte_alphabet())


_SYMBOL_OF_LATIN1 = {byte: symbol for byte, symbol in gpt2_byte_alphabet()}


def bytes_to_symbols(text: str) -> str:
    """Spells ``text``'s UTF-8 bytes in GPT-2's byte alphabet (one character a byte): the
    bytes read as Latin-1 (code point = byte value), then mapped by ``str.translate``."""
    return text.encode("utf-8").decode("latin-1").translate(_SYMBOL_OF_LATIN1)


# --- Pre-tokenization --------------------------------------------------------------------
# GPT-2's split regex:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# keras-hub's BytePairTokenizer runs it in RE2, which has no look-ahead, so it emulates
# `\s+(?!\S)` in three steps: put a marker before every space that starts a word, split with
# a look-ahead-free pattern, then split the last whitespace character (or marker) off each
# piece. RE2's `\s` is ASCII only, and four non-ASCII spaces are listed by hand. Words must be
# split here exactly as at tokenize time, so the same steps are run with the `regex` package.
_MARKER = "\u096c"  # the marker keras-hub uses ("६", digit six); dropped from the output
_RE2_SPACE = "\t\n\f\r "
_EXTRA_SPACES = "\u00a0\u2009\u202f\u3000"
_MARK_WORD_START = regex.compile(f"( )([^{_RE2_SPACE}{_EXTRA_SPACES}])")
# keras-hub's "mark trailing whitespace" pattern, copied as it behaves: without brackets it
# only fires on one space followed by exactly those four characters at the end.
_MARK_TRAILING = regex.compile(f"([{_RE2_SPACE}]{_EXTRA_SPACES})\\Z")
_WORD = regex.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d"
    f"|[{_RE2_SPACE}{_EXTRA_SPACES}]+[\n\r\t\f{_MARKER}{_EXTRA_SPACES}]"
    r"| ?\p{L}+| ?\p{N}+"
    f"| ?[^{_RE2_SPACE}\\p{{L}}\\p{{N}}{_EXTRA_SPACES}]+")
_LAST_SPACE = regex.compile(f"[ \t\r\f\v{_MARKER}{_EXTRA_SPACES}]\\Z")


# The same patterns with the match kept by ``split``: gaps and matches alternate, found in C.
_WORD_OR_GAP = regex.compile(f"({_WORD.pattern})")
_LAST_SPACE_CHARACTERS = frozenset(f" \t\r\f\v{_MARKER}{_EXTRA_SPACES}")


def _split_chunk(chunk: str) -> list[str]:
    """GPT-2 pre-tokens of text without special tokens: the word pattern's matches and the
    gaps between them, then each piece's last whitespace character (or marker) cut off."""
    marked = _MARK_WORD_START.sub(_MARKER + r"\1\2", chunk)
    marked = _MARK_TRAILING.sub(r"\1" + _MARKER, marked)
    words = []
    for piece in _WORD_OR_GAP.split(marked):
        if len(piece) > 1 and piece[-1] in _LAST_SPACE_CHARACTERS:
            words.append(piece[:-1])
            words.append(piece[-1])
        elif piece:
            words.append(piece)
    return [word for word in words if word != _MARKER]


def split_words(text: str, special_tokens: Sequence[str] = (END_OF_TEXT,)) -> list[str]:
    """Splits ``text`` into GPT-2 pre-tokens, as ``keras_nlp.tokenizers.BytePairTokenizer`` does.

    Special tokens are cut out first (and dropped: they are whole tokens, never merged);
    the text around them is split on its own. Joining the result gives back ``text`` less
    the special tokens.
    """
    return [word for chunk in _chunks(text, special_tokens) if chunk
            for word in _split_chunk(chunk)]


def _chunks(text: str, special_tokens: Sequence[str]) -> list[str]:
    """``text`` cut at the special tokens (which are left out)."""
    chunks = [text]
    for token in special_tokens:
        if token in text:
            chunks = [part for chunk in chunks for part in chunk.split(token)]
    return chunks


def pretokenize_lines(lines: Iterable[str],
                      special_tokens: Sequence[str] = (END_OF_TEXT,)) -> list[str]:
    """Words of all ``lines`` in GPT-2's byte alphabet, ready to be counted; the special
    tokens are cut out (the tokenizer keeps them whole)."""
    return [bytes_to_symbols(word) for line in lines
            for word in split_words(line, special_tokens)]


# Where a line may be cut so that its pieces split into the same words on their own: before
# every run of the split's whitespace that follows a non-space character (pieces
# ``\s*\S+``, then the trailing whitespace). Each step of :func:`_split_chunk` looks only
# inside such a piece: the word-start marker goes between a piece's last space and its first
# non-space character; the trailing-space mark is anchored at the end of the text (the last,
# all-space piece); no word-pattern match holds a non-space character followed by a space,
# and only spaces are ever left between matches. One match runs past a piece's end: a
# number takes the next piece's leading marker (a digit, \p{N}), which is then cut off as
# the match's last character and dropped, as a number ending the piece keeps its last digit
# -- unless that digit is itself the marker's character, so lines holding it are split
# whole. tests/test_vocabulary_counting.py checks the counts against per-line splitting.
_SPACE_CLASS = f"{_RE2_SPACE}{_EXTRA_SPACES}"
_LINE_PIECE = re.compile(  # plain `re`: 2x faster than `regex` on this pattern
    f"[{_SPACE_CLASS}]*[^{_SPACE_CLASS}]+|[{_SPACE_CLASS}]+")
_LINE_END = "\n"  # joins a batch's lines (and replaces special tokens): a piece boundary
PIECE_CACHE_SIZE = 1 << 18  # distinct pieces whose words a process keeps (Zipf: most text)
_PIECE_WORDS: dict[str, tuple[str, ...]] = {}  # piece -> its words, per process


def _piece_words(piece: str) -> tuple[str, ...]:
    """The words of one piece of a batch's joined text, spelled in the byte alphabet, and
    remembered (the memory is emptied when it holds ``PIECE_CACHE_SIZE`` pieces).
    ``_LINE_END`` separates a piece's parts, each the end of one line (or chunk) or the
    start of the next."""
    words = tuple(bytes_to_symbols(word) for part in piece.split(_LINE_END) if part
                  for word in _split_chunk(part))
    if len(_PIECE_WORDS) >= PIECE_CACHE_SIZE:
        _PIECE_WORDS.clear()
    _PIECE_WORDS[piece] = words
    return words


def count_words(lines: Iterable[str],
                special_tokens: Sequence[str] = (END_OF_TEXT,)) -> dict[str, int]:
    """Counts of the words of ``lines`` in GPT-2's byte alphabet: the same counts as
    ``Counter(pretokenize_lines(lines))``.

    Python runs once per distinct line piece, not once per word: the batch's lines are
    joined with line breaks (special tokens replaced by one too: both end a chunk), cut into
    pieces ``\\s*\\S+`` by one regex pass, the pieces counted (in C), and each distinct
    piece split into words once (:func:`_split_chunk`, remembered per process across
    batches: ``PIECE_CACHE_SIZE``) and its words counted with the piece's count. Lines that hold a
    line break or the marker character are split whole (see ``_LINE_PIECE``).
    """
    lines = list(lines)
    words = collections.defaultdict(int)
    text = _LINE_END.join(lines)
    if _MARKER in text or text.count(_LINE_END) != len(lines) - 1:
        whole = [line for line in lines if _MARKER in line or _LINE_END in line]
        for word in pretokenize_lines(whole, special_tokens):
            words[word] += 1
        lines = [line for line in lines if not (_MARKER in line or _LINE_END in line)]
        text = _LINE_END.join(lines)
    if any(_LINE_END in token for token in special_tokens):
        pieces = collections.Counter(  # cut chunk by chunk
            piece for line in lines for chunk in _chunks(line, special_tokens)
            for piece in _LINE_PIECE.findall(chunk))
    else:
        for token in special_tokens:
            if token and token in text:
                text = text.replace(token, _LINE_END)
        pieces = collections.Counter(_LINE_PIECE.findall(text))
    remembered = _PIECE_WORDS
    for piece, count in pieces.items():
        found = remembered.get(piece)
        for word in _piece_words(piece) if found is None else found:
            words[word] += count
    return dict(words)


def special_token_layout(special_tokens: Mapping[str, str] | None) -> tuple[list[str], bool]:
    """The distinct special tokens in id order, and whether they take the first ids.

    GPT-2's layout (only ``end_of_text`` / ``pad`` roles): after the bytes and merges, so
    ``<|endoftext|>`` is the last id as in GPT-2's vocabulary. Any set with encoder roles
    (cls, sep, mask, unk), like RoBERTa's: first, in the order cls, pad, sep, unk, mask,
    then the rest, so RoBERTa's are <s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4.
    """
    special_tokens = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
    first = bool(set(special_tokens) - {"end_of_text", "pad"})
    roles = ([role for role in _LEADING_ROLES if role in special_tokens]
             + [role for role in special_tokens if role not in _LEADING_ROLES]
             if first else list(special_tokens))
    tokens = []
    for role in roles:
        if special_tokens[role] not in tokens:
            tokens.append(special_tokens[role])
    return tokens, first


# --- Merge learning ----------------------------------------------------------------------
_PAIR_SHIFT = 20  # pairs are keyed by one int: (left << 20) | right, so ids stay below 2**20
_RIGHT_MASK = (1 << _PAIR_SHIFT) - 1
MAX_VOCAB_SIZE = 1 << _PAIR_SHIFT


class _PairStatistics:
    """Pair counts over a weighted word list, kept up to date as merges rewrite words.

    ``counts[key]`` is how often a pair of symbol ids (``key = left << 20 | right``) occurs,
    weighted by word frequency; ``words_with[key]`` the indices of words that may hold it
    (entries can be stale and are checked when used); ``heap`` a max-heap of (count, key).
    A merge only touches the neighbours of each merged occurrence. Pairs whose count went up
    are pushed again; entries whose count went down are fixed when they reach the top.
    """

    def __init__(self, words: list[list[int]], frequencies: list[int], spellings: list[str]):
        self.words, self.frequencies, self.spellings = words, frequencies, spellings
        self.counts: dict[int, int] = defaultdict(int)
        self.words_with: dict[int, set[int]] = defaultdict(set)
        for index, word in enumerate(words):
            for left, right in zip(word, word[1:]):
                key = _key(left, right)
                self.counts[key] += frequencies[index]
                self.words_with[key].add(index)
        self.heap = [self._heap_entry(key) for key in self.counts]
        heapq.heapify(self.heap)

    def _heap_entry(self, key: int) -> tuple:
        # Ties broken by the pair's spelling, so the result does not depend on input order.
        left, right = key >> _PAIR_SHIFT, key & _RIGHT_MASK
        return (-self.counts[key], self.spellings[left], self.spellings[right], key)

    def most_frequent(self) -> tuple[tuple[int, int], int] | None:
        """The most frequent pair of ids and its count, or None when no pair is left."""
        while self.heap:
            negative_count, _, _, key = heapq.heappop(self.heap)
            count = self.counts.get(key, 0)
            if count == -negative_count:
                return (key >> _PAIR_SHIFT, key & _RIGHT_MASK), count
            if 0 < count < -negative_count:  # went down since pushed: re-queue at its count
                heapq.heappush(self.heap, self._heap_entry(key))
        return None

    def merge(self, pair: tuple[int, int], new_symbol: int) -> None:
        """Rewrites every word holding ``pair`` with ``new_symbol`` and updates the counts."""
        key = _key(*pair)
        grown: set[int] = set()
        for index in self.words_with.pop(key, ()):
            self._merge_in_word(index, pair, new_symbol, grown)
        self.counts.pop(key, None)
        for grown_key in grown:
            heapq.heappush(self.heap, self._heap_entry(grown_key))

    def _merge_in_word(self, index: int, pair: tuple[int, int], new_symbol: int,
                       grown: set[int]) -> None:
        """Merges ``pair`` in one word, left to right as GPT-2's encoder does, and moves the
        counts of the neighbour pairs: (x, left) -> (x, new) and (right, y) -> (new, y)."""
        word = self.words[index]
        starts = _pair_starts(word, pair)
        if not starts:
            return  # stale entry: an earlier merge consumed the pair in this word
        left, right = pair
        frequency, end = self.frequencies[index], len(word)
        new_as_left = new_symbol << _PAIR_SHIFT  # pair keys: (a, b) -> a << _PAIR_SHIFT | b
        merged, previous_end = [], 0
        for start in starts:
            after = start + 2
            if start > 0 and start == previous_end:  # right after the previous merge
                self._add(new_as_left | new_symbol, frequency, index, grown)
            elif start > 0:
                before_as_left = word[start - 1] << _PAIR_SHIFT
                self.counts[before_as_left | left] -= frequency
                self._add(before_as_left | new_symbol, frequency, index, grown)
            if after < end:
                self.counts[right << _PAIR_SHIFT | word[after]] -= frequency
                if after not in starts:  # else the next merge adds (new, new)
                    self._add(new_as_left | word[after], frequency, index, grown)
            merged.extend(word[previous_end:start])
            merged.append(new_symbol)
            previous_end = after
        merged.extend(word[previous_end:])
        self.words[index] = merged

    def _add(self, key: int, frequency: int, index: int, grown: set[int]) -> None:
        self.counts[key] += frequency
        self.words_with[key].add(index)
        grown.add(key)


def _key(left: int, right: int) -> int:
    return left << _PAIR_SHIFT | right


def _pair_starts(word: list[int], pair: tuple[int, int]) -> list[int]:
    """Start positions of the non-overlapping occurrences of ``pair``, scanning left to right."""
    left, right = pair
    starts, position, last = [], 0, len(word) - 1
    while True:
        try:
            position = word.index(left, position, last)
        except ValueError:
            return starts
        if word[position + 1] == right:
            starts.append(position)
            position += 2
        else:
            position += 1


def _merge_until(symbol_budget: int, min_frequency: int, spellings: list[str],
                 symbol_ids: dict[str, int], statistics: _PairStatistics) -> list[tuple[str, str]]:
    """Merges the most frequent pair until there are ``symbol_budget`` symbols or pairs get
    too rare; extends ``spellings`` / ``symbol_ids`` with the new symbols and returns the
    merges."""
    merges = []
    while len(spellings) < symbol_budget:
        best = statistics.most_frequent()
        if best is None or best[1] < min_frequency:
            break
        (left, right), _ = best
        merged_spelling = spellings[left] + spellings[right]
        if merged_spelling not in symbol_ids:  # two pairs can spell the same symbol
            symbol_ids[merged_spelling] = len(spellings)
            spellings.append(merged_spelling)
        statistics.merge((left, right), symbol_ids[merged_spelling])
        merges.append((spellings[left], spellings[right]))
    return merges


def learn_merges(word_counts: Iterable[tuple[str, int]], vocab_size: int,
                 min_frequency: int = 2, special_tokens: Sequence[str] = (END_OF_TEXT,),
                 specials_first: bool = False) -> tuple[list[str], list[tuple[str, str]]]:
    """Learns byte-level BPE merges (Sennrich et al. 2016; GPT-2, Radford et al. 2019).

    Args:
      word_counts: (word, count) pairs; words spelled in GPT-2's byte alphabet
        (see :func:`pretokenize_lines`).
      vocab_size: target size of the whole vocabulary: the special tokens, the 256 byte
        symbols and one token per new merged symbol.
      min_frequency: merging stops when the most frequent pair occurs fewer times.
      special_tokens: distinct special tokens, in id order (:func:`special_token_layout`).
      specials_first: special tokens take the first ids (RoBERTa) instead of the last
        (GPT-2's ``<|endoftext|>``).

    Returns:
      ``(tokens, merges)``: the tokens in id order (bytes, then merged symbols in merge
      order; the special tokens before or after them) and the merges as (left, right)
      spellings in rank order.

    Counts are kept incrementally: each merge only revisits the words that hold the pair
    (an index from pair to words) and a heap with lazy deletion picks the next pair, so the
    cost is about the number of symbol positions rewritten, not vocab_size x corpus.
    """
    special_tokens = list(special_tokens)
    smallest = len(BYTE_SYMBOLS) + len(special_tokens)
    if not smallest <= vocab_size <= MAX_VOCAB_SIZE:
        raise ValueError(f"vocab_size for byte-level BPE must be in [{smallest}, "
                         f"{MAX_VOCAB_SIZE}] (256 bytes + merges + {len(special_tokens)} "
                         f"special token(s) {special_tokens}), got {vocab_size}")
    spellings = list(BYTE_SYMBOLS)
    symbol_ids = {symbol: index for index, symbol in enumerate(spellings)}
    words, frequencies = [], []
    for word, count in word_counts:
        words.append([symbol_ids[symbol] for symbol in word])
        frequencies.append(int(count))
    started = time.perf_counter()
    collecting = gc.isenabled()
    gc.disable()  # millions of small acyclic lists/tuples: cyclic GC passes would dominate
    try:
        merges = _merge_until(vocab_size - len(special_tokens), min_frequency, spellings,
                              symbol_ids, _PairStatistics(words, frequencies, spellings))
    finally:
        if collecting:
            gc.enable()
    seconds = time.perf_counter() - started
    logging.info("BPE learner: %d merges over %d distinct words in %.2fs (%.0f words/s)",
                 len(merges), len(words), seconds, len(words) / max(seconds, 1e-9))
    if specials_first:
        return list(special_tokens) + spellings, merges
    return spellings + list(special_tokens), merges


# --- Applying merges (reference encoder) and writing files --------------------------------
def encode_word(word: str, merge_ranks: dict[tuple[str, str], int]) -> list[str]:
    """Splits one pre-token (raw text) into BPE tokens the way GPT-2's encoder does.

    Repeatedly merges the adjacent pair with the lowest merge rank (all its non-overlapping
    occurrences, left to right) until no pair has a rank. A plain-Python reference for what
    the keras-nlp tokenizer produces.
    """
    symbols = list(bytes_to_symbols(word))
    while len(symbols) > 1:
        best = min(zip(symbols, symbols[1:]), key=lambda pair: merge_ranks.get(pair, math.inf))
        if best not in merge_ranks:
            break
        merged, position = [], 0
        while position < len(symbols):
            if tuple(symbols[position:position + 2]) == best:
                merged.append(symbols[position] + symbols[position + 1])
                position += 2
            else:
                merged.append(symbols[position])
                position += 1
        symbols = merged
    return symbols


def tokenizer_config(special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content for a byte-level BPE folder (CONTRACTS §2)."""
    # Imported here, not at the top: a Beam worker that only counts words must not import
    # TensorFlow (the tokenizer module does), see components/vocabulary/counting.py.
    from lmfactory.models.tokenizers.byte_level_fast import WORD_PIECES_FILE

    return {"kind": "bpe", "vocabulary_file": VOCABULARY_FILE, "merges_file": MERGES_FILE,
            "special_tokens": dict(SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens),
            "word_pieces_file": WORD_PIECES_FILE}


def write_files(output_dir: str, tokens: list[str], merges: list[tuple[str, str]],
                word_counts: Iterable[tuple[str, int]] = ()) -> None:
    """Writes ``vocab.json`` (token -> id), ``merges.txt`` (GPT-2's format) and
    ``word_pieces.txt``: the merged pieces of the ``WORD_PIECES_LIMIT`` most frequent of
    ``word_counts`` (words in the byte alphabet), merged in the tokenizer's order
    (``merge_symbols``), which its static word table serves without the merge loop."""
    import tensorflow as tf

    from lmfactory.models.tokenizers.byte_level_fast import (WORD_PIECES_FILE, merge_symbols,
                                                             write_word_pieces)

    vocabulary = {token: index for index, token in enumerate(tokens)}
    if len(vocabulary) != len(tokens):
        repeated = sorted({token for token in tokens if tokens.count(token) > 1})
        raise ValueError(f"BPE vocabulary repeats token(s) {repeated[:10]}")
    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, VOCABULARY_FILE), "w") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    with tf.io.gfile.GFile(os.path.join(output_dir, MERGES_FILE), "w") as f:
        f.write("\n".join([MERGES_HEADER] + [f"{left} {right}" for left, right in merges]) + "\n")
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    frequent = heapq.nsmallest(WORD_PIECES_LIMIT, word_counts, key=lambda w: (-w[1], w[0]))
    write_word_pieces(os.path.join(output_dir, WORD_PIECES_FILE),
                      [merge_symbols(word, ranks) for word, _ in frequent],
                      [f"{left} {right}" for left, right in merges])
