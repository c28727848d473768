"""WordPiece vocabularies: BERT pre-tokenization, the learner, and file writing.

WordPiece (Schuster & Nakajima 2012, "Japanese and Korean Voice Search"; Wu et al. 2016,
"Google's Neural Machine Translation System", §4.1) splits words into pieces from a fixed
vocabulary, greedily longest-match-first at tokenize time, marking pieces inside a word
with ``##``. BERT (Devlin et al. 2019) first applies its "basic tokenizer": optional
lower-casing and accent stripping, then splitting on whitespace and punctuation, with each
CJK character its own word.

Words are split here with the very steps the tokenizer runs at tokenize time
(:class:`lmfactory.models.tokenizers.BertWordPieceTokenizer`: BERT's normalisation, then
keras-nlp's splitting), so the learned pieces fit what the tokenizer will see. The learner
is tensorflow-text's ``wordpiece_tokenizer_learner_lib.learn`` (the algorithm behind
``bert_vocab_from_dataset``), fed with word counts; its counting passes run here in an
equivalent, faster form (:class:`_PieceCounter`).
"""

from __future__ import annotations

import collections
import heapq
import logging
import os
import time
from typing import Iterable, Mapping, Sequence

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                  "mask": "[MASK]"}
VOCABULARY_FILE = "vocab.txt"
JOINER = "##"
MAX_TOKEN_LENGTH = 50  # the learner's default: longer words are left out


def _split(lines: Sequence[str], lowercase: bool, strip_accents: bool):
    """The words of a batch of lines as a flat array of UTF-8 bytes (empty ones included)."""
    import tensorflow as tf
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    from lmfactory.models.tokenizers import bert_normalize

    normalized = bert_normalize(tf.constant(list(lines)), lowercase=lowercase,
                                strip_accents=strip_accents)
    words = pretokenize(normalized, lowercase=False, strip_accents=False, split=True,
                        split_on_cjk=True)
    return words.flat_values.numpy()


def pretokenize_lines(lines: Sequence[str], lowercase: bool = True,
                      strip_accents: bool = True) -> list[str]:
    """Splits a batch of lines into words exactly as ``BertWordPieceTokenizer`` does.

    BERT's normalisation (:func:`lmfactory.models.tokenizers.bert_normalize`: control
    characters dropped, Unicode spaces, accents, lowercase), then keras-hub's split on
    whitespace / punctuation / CJK (tf-text ops), on the whole batch at once.
    """
    if not lines:
        return []
    return [word.decode("utf-8") for word in _split(lines, lowercase, strip_accents) if word]


def count_lines(lines: Sequence[str], lowercase: bool = True,
                strip_accents: bool = True) -> list[tuple[str, int]]:
    """(word, count) pairs of the words of :func:`pretokenize_lines`: counted as bytes,
    each distinct word decoded once."""
    if not lines:
        return []
    counts = collections.Counter(_split(lines, lowercase, strip_accents).tolist())
    return [(word.decode("utf-8"), count) for word, count in counts.items() if word]


PIECE_CACHE_SIZE = 1 << 18  # distinct pieces whose words a process keeps (Zipf: most text)


_PIECE_WORDS: dict[tuple[bool, bool], dict[str, tuple[str, ...]]] = {}  # per process


def _piece_words(piece: str, lowercase: bool, strip_accents: bool) -> tuple[str, ...]:
    """The words of one space-free piece of a line, by the plain-Python steps, and
    remembered (emptied when ``PIECE_CACHE_SIZE`` pieces are held)."""
    from lmfactory.components.pretraining_data import plain_wordpiece

    words = tuple(plain_wordpiece.split_words(
        plain_wordpiece.bert_normalize(piece, lowercase, strip_accents)))
    remembered = _PIECE_WORDS.setdefault((lowercase, strip_accents), {})
    if len(remembered) >= PIECE_CACHE_SIZE:
        remembered.clear()
    remembered[piece] = words
    return words


def count_lines_plain(lines: Sequence[str], lowercase: bool = True,
                      strip_accents: bool = True) -> list[tuple[str, int]]:
    """The (word, count) pairs of :func:`count_lines`, without TensorFlow.

    BERT's normalisation and keras-nlp's split written in plain Python
    (``components/pretraining_data/plain_wordpiece.py``, the mechanism tf-text lacks: no
    TensorFlow, so a Beam worker that counts does not import it). Both steps go character by
    character and a space always separates words (it is kept as a space, ``" "`` has no
    decomposition and starts an NFD segment; lowercasing has no context once capital sigma
    is mapped first), so the lines are cut at spaces (joined by one first), the pieces
    counted in C, and each distinct piece normalised and split once (cached per process,
    ``PIECE_CACHE_SIZE``). tests/test_vocabulary_counting.py checks the counts against
    :func:`count_lines`.
    """
    pieces = collections.Counter(" ".join(lines).split(" "))
    words = collections.defaultdict(int)
    lowercase, strip_accents = bool(lowercase), bool(strip_accents)
    remembered = _PIECE_WORDS.get((lowercase, strip_accents), {})
    for piece, count in pieces.items():
        found = remembered.get(piece)
        if found is None:
            found = _piece_words(piece, lowercase, strip_accents)
        for word in found:
            words[word] += count
    return list(words.items())


COUNTINGS = ("remainders", "tensorflow_text")


def learn_vocabulary(word_counts: Iterable[tuple[str, int]], vocab_size: int,
                     min_frequency: int = 2,
                     reserved_tokens: Sequence[str] = RESERVED_TOKENS,
                     counting: str = "remainders") -> list[str]:
    """Learns a WordPiece vocabulary of at most ``vocab_size`` tokens from word counts.

    tensorflow-text's learner (the one ``bert_vocab_from_dataset`` uses) keeps every
    sub-word, at a word start or as a ``##`` continuation, seen at least ``threshold`` times,
    recounting with the current vocabulary's segmentation for a few iterations, and
    binary-searches the threshold (from ``min_frequency`` up) until the size is within 5% of
    the target. Reserved tokens come first, then all single characters, then pieces by count.

    ``counting`` picks how its passes are counted: "remainders" (:class:`_PieceCounter`, an
    equivalent form about 10x faster, with the library's own input filters, threshold
    search and token order) or "tensorflow_text" (the library's ``learn`` itself). Both
    give the same vocabulary; pass counts below 1 always use the library.
    """
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    if counting not in COUNTINGS:
        raise ValueError(f"counting must be one of {COUNTINGS}, got {counting!r}")
    word_counts = [(word, int(count)) for word, count in word_counts]
    if not word_counts:
        raise ValueError("No words to learn a WordPiece vocabulary from")
    if vocab_size <= len(reserved_tokens):
        raise ValueError(f"vocab_size {vocab_size} leaves no room after the "
                         f"{len(reserved_tokens)} reserved tokens")
    started = time.perf_counter()
    ceiling = _threshold_ceiling(word_counts, vocab_size - len(reserved_tokens))
    settings = dict(vocab_size=vocab_size, reserved_tokens=list(reserved_tokens),
                    lower_thresh=min_frequency, upper_thresh=max(ceiling, min_frequency),
                    max_input_tokens=-1, max_token_length=MAX_TOKEN_LENGTH, joiner=JOINER,
                    include_joiner_token=True)
    if (counting == "remainders" and min_frequency >= 1
            and min(count for _, count in word_counts) >= 1):
        vocabulary = _learn(word_counts, **settings)
    else:  # thresholds below 1 keep never-seen pieces: only the library's counting does
        vocabulary = learner.learn(word_counts, **settings)
    seconds = time.perf_counter() - started
    logging.info("WordPiece learner: %d tokens from %d distinct words in %.2fs (%.0f words/s)",
                 len(vocabulary), len(word_counts), seconds,
                 len(word_counts) / max(seconds, 1e-9))
    return _fit_to_size(vocabulary, vocab_size, reserved_tokens)


_ITERATIONS = 4  # the library's default number of recounting passes
_SLACK = 0.05  # ... and its accepted shortfall below vocab_size


def _learn(word_counts: list[tuple[str, int]], vocab_size: int, reserved_tokens: list[str],
           lower_thresh: int, upper_thresh: int, max_input_tokens: int,
           max_token_length: int, joiner: str, include_joiner_token: bool) -> list[str]:
    """tensorflow-text's ``learn`` (same filters, threshold search and token order) with the
    counting of :class:`_PieceCounter`; the first pass is counted once for all thresholds."""
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    assert include_joiner_token and joiner == JOINER
    upper, lower = learner.get_search_threshs(word_counts, upper_thresh, lower_thresh)
    words = learner.get_input_words(word_counts, reserved_tokens, max_token_length)
    words = learner.filter_input_words(words, learner.get_allowed_chars(words, 1000),
                                       max_input_tokens)
    counter = _PieceCounter(words)
    while True:  # the library's binary search over the threshold, step for step
        threshold = (upper + lower) // 2
        vocabulary = learner.generate_final_vocabulary(
            reserved_tokens, counter.characters, counter.learn(threshold))
        size = len(vocabulary)
        if (size <= vocab_size and vocab_size - size <= _SLACK * vocab_size
                or lower >= upper or threshold <= 1):
            return vocabulary
        if size > vocab_size:
            lower = threshold + 1
        else:
            upper = threshold - 1


class _PieceCounter:
    """The counting passes of tensorflow-text's WordPiece learner, computed faster.

    Each pass of the library takes, for every word and every start position s it considers
    (all positions in the first pass; the starts of the current vocabulary's greedy
    longest-match pieces later), every sub-word ``word[s:e]`` (``##``-prefixed when s > 0),
    and then subtracts from each sub-word the final counts of its longer extensions. What
    is left of a sub-word t is exactly the number of (word, s) whose remainder ``word[s:]``
    *is* t (by induction from the longest sub-words down), so a pass here only counts
    remainders: O(length) per word instead of O(length^2), and the greedy pieces of a shared
    remainder (``##ing``) are found once. Hence word-start pieces are always whole words,
    the first pass does not depend on the threshold, and a word's first greedy piece only
    on the threshold (the longest word-start prefix counted often enough): each is counted
    once, not once per pass.

    ``words``: (word, count) pairs with count >= 1 (the library's filtered input).
    """

    def __init__(self, words: list[tuple[str, int]]):
        self.words = words
        self.characters = {character for word, _ in words for character in word}
        self.starts = collections.defaultdict(int)  # duplicate words add up, as there
        self.first_pass = collections.defaultdict(int)  # remainder after s > 0 -> count
        for word, count in words:
            self.starts[word] += count
            for start in range(1, len(word)):
                self.first_pass[word[start:]] += count
        self.joiner_words = [word for word in self.starts if word.startswith(JOINER)]
        # word -> (length, count) of its proper prefixes of 2+ characters that are words,
        # longest first: the candidates for its first greedy piece.
        self.start_prefixes = {
            word: [(end, self.starts[word[:end]]) for end in range(len(word) - 1, 1, -1)
                   if word[:end] in self.starts]
            for word in self.starts if not word.startswith(JOINER)}

    def learn(self, threshold: int) -> dict[str, int]:
        """Token -> count after the library's passes at ``threshold`` (characters added)."""
        tokens = self._keep(self.first_pass, threshold)
        first_remainders = self._first_remainders(threshold)
        for _ in range(_ITERATIONS - 1):
            tokens = self._keep(self._recount(tokens, first_remainders), threshold)
        return tokens

    def _keep(self, inners: dict, threshold: int) -> dict[str, int]:
        """Pieces counted at least ``threshold`` times, plus every character in both forms
        (count 1 unless counted). A ``##x`` spelling that is both a word start and an inner
        piece takes the inner count when that one is kept, as the library's order does."""
        tokens = {word: count for word, count in self.starts.items() if count >= threshold}
        tokens.update((JOINER + piece, count) for piece, count in inners.items()
                      if count >= threshold)
        for character in self.characters:
            tokens.setdefault(character, 1)
            tokens.setdefault(JOINER + character, 1)
        return tokens

    def _first_remainders(self, threshold: int) -> dict[str, int]:
        """What follows each word's first greedy piece -> summed count. The word-start
        tokens are the words counted ``threshold`` times and the characters (a ``##``
        token can only start a word that itself starts with ``##``: those are matched
        pass by pass in :meth:`_recount`)."""
        remainders = collections.defaultdict(int)
        for word, prefixes in self.start_prefixes.items():
            if self.starts[word] >= threshold or len(word) == 1:
                continue
            end = next((end for end, count in prefixes if count >= threshold), 1)
            remainders[word[end:]] += self.starts[word]
        return remainders

    def _recount(self, tokens: dict[str, int], first_remainders: dict[str, int]
                 ) -> dict[str, int]:
        """One later pass: the counts of the remainders at the greedy (longest match first)
        pieces' inner starts, given what follows the first pieces. Remainders are handled
        longest first, so each distinct one is segmented once, with its summed count.
        Every character is a token in both forms, so every word segments."""
        by_length = collections.defaultdict(lambda: collections.defaultdict(int))
        for remainder, count in first_remainders.items():
            by_length[len(remainder)][remainder] += count
        longest = max(map(len, tokens))
        for word in self.joiner_words:
            end = _longest_match(word, tokens, longest)
            if end < len(word):
                by_length[len(word) - end][word[end:]] += self.starts[word]
        pieces = _prefix_table(token[len(JOINER):] for token in tokens
                               if token.startswith(JOINER))
        inners = {}
        while by_length:
            length = max(by_length)
            for remainder, count in by_length.pop(length).items():
                inners[remainder] = count
                end, flag, stop = 0, False, 1
                while flag is not None and stop <= length:  # longest prefix in the table
                    flag = pieces.get(remainder[:stop])
                    if flag:
                        end = stop
                    stop += 1
                if end == 0:
                    raise ValueError(f"WordPiece learner: ##{remainder[:1]} is not a token")
                if end < length:
                    by_length[length - end][remainder[end:]] += count
        return inners


def _prefix_table(pieces: Iterable[str]) -> dict[str, bool]:
    """Every prefix of the ``pieces`` -> whether it is itself a piece: walking a text's
    prefixes through it finds its longest piece and stops as soon as no piece can match."""
    table = {}
    for piece in pieces:
        for end in range(1, len(piece)):
            table.setdefault(piece[:end], False)
        table[piece] = True
    return table


def _longest_match(text: str, pieces, longest: int) -> int:
    """Length of the longest prefix of ``text`` in ``pieces`` (none longer than
    ``longest``)."""
    for end in range(min(len(text), longest), 0, -1):
        if text[:end] in pieces:
            return end
    raise ValueError(f"WordPiece learner: {text[:1]!r} is not in the vocabulary")


def _threshold_ceiling(word_counts: list[tuple[str, int]], room: int) -> int:
    """A sub-word frequency threshold at which the learned vocabulary surely fits ``room``.

    Every piece the learner keeps at threshold t is a word-initial or ``##`` sub-word whose
    raw count over the corpus is at least t (its counts are raw counts less prefix
    corrections, or counts along one segmentation). So ranking raw sub-word counts once
    bounds the vocabulary size at every threshold; starting the learner's binary search there
    instead of at the largest word count saves about half of its full passes. Raw counts
    are summed over the prefixes of each distinct remainder (``word[s:]``), so a suffix
    shared by many words (``##ing``) is expanded once.
    """
    characters = {character for word, _ in word_counts for character in word}
    room -= 3 * len(characters)  # characters, their ## forms and the character list
    if room <= 0:
        return max(count for _, count in word_counts)
    remainders = collections.defaultdict(int)  # (word[s:], s > 0) -> summed count
    for word, count in word_counts:
        if len(word) <= MAX_TOKEN_LENGTH:
            for start in range(len(word)):
                remainders[word[start:], start > 0] += count
    sub_word_counts = collections.defaultdict(int)
    for (remainder, inner), count in remainders.items():
        prefix = JOINER if inner else ""
        for end in range(1, len(remainder) + 1):
            sub_word_counts[prefix + remainder[:end]] += count
    if len(sub_word_counts) <= room:
        return 1
    return heapq.nlargest(room + 1, sub_word_counts.values())[-1] + 1


def _fit_to_size(vocabulary: list[str], vocab_size: int,
                 reserved_tokens: Sequence[str]) -> list[str]:
    """Reserved tokens in order at the top; cut the least frequent pieces off the end when
    the learner's threshold search could not get under ``vocab_size``."""
    rest = [token for token in vocabulary if token not in reserved_tokens]
    if len(reserved_tokens) + len(rest) > vocab_size:
        logging.warning("WordPiece learner gave %d tokens; keeping the first %d",
                        len(reserved_tokens) + len(rest), vocab_size)
    return (list(reserved_tokens) + rest)[:vocab_size]


def reserved_tokens(special_tokens: Mapping[str, str] | None) -> list[str]:
    """The distinct special tokens, in the given order: they take the first ids."""
    tokens = []
    for token in (SPECIAL_TOKENS if special_tokens is None else special_tokens).values():
        if token not in tokens:
            tokens.append(token)
    return tokens


def tokenizer_config(lowercase: bool, strip_accents: bool,
                     special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content for a WordPiece folder (CONTRACTS §2)."""
    return {"kind": "wordpiece", "vocabulary_file": VOCABULARY_FILE,
            "lowercase": bool(lowercase), "strip_accents": bool(strip_accents),
            "special_tokens": dict(SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens)}


def write_files(output_dir: str, vocabulary: Sequence[str]) -> None:
    """Writes ``vocab.txt``: one token a line, the line number is the id."""
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, VOCABULARY_FILE), "w") as f:
        f.write("".join(token + "\n" for token in vocabulary))


def learn_vocabulary_folder(texts: Iterable[str], vocab_dir: str, vocab_size: int,
                            lowercase: bool = True, strip_accents: bool | None = None,
                            min_frequency: int = 2, chunk_lines: int = 4096) -> str:
    """Learns a WordPiece vocabulary from raw ``texts`` in this process (no Beam) and writes
    its folder (CONTRACTS §2: ``vocab.txt`` + ``tokenizer.json``); returns ``vocab_dir``.

    The same normalisation and learner as VocabularyGen, for task libraries and scripts that
    fine-tune outside the DAG. ``strip_accents`` defaults to ``lowercase`` (BERT's uncased /
    cased conventions)."""
    from lmfactory.models.tokenizers import write_tokenizer_config

    if strip_accents is None:
        strip_accents = lowercase
    counts = collections.Counter()
    texts = list(texts)
    for start in range(0, len(texts), chunk_lines):
        counts.update(pretokenize_lines(texts[start:start + chunk_lines], lowercase=lowercase,
                                        strip_accents=strip_accents))
    vocabulary = learn_vocabulary(sorted(counts.items()), vocab_size,
                                  min_frequency=min_frequency)
    write_files(vocab_dir, vocabulary)
    write_tokenizer_config(vocab_dir, tokenizer_config(lowercase, strip_accents))
    return vocab_dir
