"""One place that turns a vocabulary folder into the keras-nlp tokenizer every stage uses.

A vocabulary folder holds ``tokenizer.json`` plus the vocabulary files it names
(docs/CONTRACTS.md §2):

* ``{"kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": bool,
  "strip_accents": bool, "special_tokens": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]",
  "sep": "[SEP]", "mask": "[MASK]"}}`` -> :class:`BertWordPieceTokenizer`, a
  ``keras_nlp.tokenizers.WordPieceTokenizer`` that first normalises text the way BERT's
  basic tokenizer does
* ``{"kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
  "special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}}``
  -> ``keras_nlp.tokenizers.BytePairTokenizer`` (GPT-2's byte-level scheme; RoBERTa's
  ``<s> <pad> </s> <unk> <mask>`` set works the same way). Every special token is
  unsplittable.
* ``{"kind": "sentencepiece", "model_file": "spm.model", "lowercase": bool,
  "strip_accents": bool, "special_tokens": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]",
  "sep": "[SEP]", "mask": "[MASK]"}}`` -> :class:`AlbertSentencePieceTokenizer`, a
  ``keras_nlp.tokenizers.SentencePieceTokenizer`` that first normalises text the way
  ALBERT's tokenizer does.
* ``{"kind": "byte", "special_tokens": {"end_of_text": "<|endoftext|>", "pad":
  "<|endoftext|>"}}`` -> :class:`Utf8ByteTokenizer`: the 256 UTF-8 byte values are ids
  0..255 (no vocabulary file: nothing is learned), the distinct special tokens follow from
  id 256 (the character LM of Al-Rfou et al. 2018, ``models/charlm``).
* ``{"kind": "bpe", ..., "word_end_suffix": "</w>"}``: GPT-1's BPE (lower-cased,
  BERT-style pre-split words whose last symbol carries ``</w>``), read by
  ``models/gpt1/gpt1_tokenizer.py`` :class:`Gpt1BpeTokenizer`.

Example generation (Beam), training (tf.data) and the pushed SavedModel all call
:func:`load_tokenizer`, so ids agree between pretraining data and serving.
:func:`import_huggingface_tokenizer` writes such a folder from a published Hugging Face
tokenizer folder (``vocab.txt``; ``vocab.json`` + ``merges.txt``; ``spiece.model``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import unicodedata

import keras
import keras_nlp
import tensorflow as tf
import tensorflow_text as tf_text
from keras_hub.src.utils.tensor_utils import (convert_to_ragged_batch, is_string_dtype,
                                              preprocessing_function)

TOKENIZER_CONFIG = "tokenizer.json"
KINDS = ("wordpiece", "bpe", "sentencepiece", "byte")
_DEFAULT_FILES = {"wordpiece": {"vocabulary_file": "vocab.txt"},
                  "bpe": {"vocabulary_file": "vocab.json", "merges_file": "merges.txt"},
                  "sentencepiece": {"model_file": "spm.model"},
                  "byte": {}}
# Token roles a vocabulary may reserve (see models/registry.py `Architecture.special_tokens`).
# start / delimiter / extract: GPT-1's fine-tuning tokens (Radford et al. 2018 §3.3).
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask", "end_of_text", "start", "delimiter",
                 "extract")


def read_tokenizer_config(vocab_dir: str) -> dict:
    path = os.path.join(vocab_dir, TOKENIZER_CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"No {TOKENIZER_CONFIG} in vocabulary folder {vocab_dir!r}")
    with tf.io.gfile.GFile(path, "r") as f:
        config = json.load(f)
    if config.get("kind") not in KINDS:
        raise ValueError(f"{path}: 'kind' must be one of {KINDS}, got {config.get('kind')!r}")
    return config


def write_tokenizer_config(vocab_dir: str, config: dict) -> None:
    tf.io.gfile.makedirs(vocab_dir)
    with tf.io.gfile.GFile(os.path.join(vocab_dir, TOKENIZER_CONFIG), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def _read_lines(path: str) -> list[str]:
    with tf.io.gfile.GFile(path, "r") as f:
        return [line.rstrip("\n") for line in f]


def _file(vocab_dir: str, config: dict, key: str) -> str:
    path = os.path.join(vocab_dir, config.get(key, _DEFAULT_FILES[config["kind"]][key]))
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Vocabulary folder {vocab_dir!r}: {TOKENIZER_CONFIG} names "
                                f"{key} {os.path.basename(path)!r}, which does not exist")
    return path


def unique_special_tokens(special_tokens: dict) -> list[str]:
    """The distinct special tokens of a role -> token map, in role order."""
    tokens = []
    for token in special_tokens.values():
        if token not in tokens:
            tokens.append(token)
    return tokens


def load_tokenizer(vocab_dir: str, sequence_length: int | None = None):
    """Builds the keras-nlp tokenizer described by ``vocab_dir/tokenizer.json``.

    Vocabularies are passed to keras-nlp as in-memory lists/dicts/bytes (not file paths) so a
    SavedModel that tracks the tokenizer carries them as its own constants.
    """
    config = read_tokenizer_config(vocab_dir)
    specials = config.get("special_tokens", {})
    kind = config["kind"]
    if kind == "wordpiece":
        vocabulary = _read_lines(_file(vocab_dir, config, "vocabulary_file"))
        return BertWordPieceTokenizer(
            vocabulary=vocabulary,
            sequence_length=sequence_length,
            lowercase=config.get("lowercase", True),
            strip_accents=config.get("strip_accents", True),
            oov_token=specials.get("unk", "[UNK]"),
        )
    if kind == "sentencepiece":
        with tf.io.gfile.GFile(_file(vocab_dir, config, "model_file"), "rb") as f:
            proto = f.read()
        return AlbertSentencePieceTokenizer(
            proto=proto, sequence_length=sequence_length,
            lowercase=config.get("lowercase", True),
            strip_accents=config.get("strip_accents", True))
    if kind == "byte":
        try:
            return Utf8ByteTokenizer(special_tokens=specials, sequence_length=sequence_length)
        except ValueError as error:
            raise ValueError(f"Vocabulary folder {vocab_dir!r}: {error}") from error
    with tf.io.gfile.GFile(_file(vocab_dir, config, "vocabulary_file")) as f:
        vocabulary = json.load(f)
    merges = _read_lines(_file(vocab_dir, config, "merges_file"))
    merges = [m for m in merges if m and not m.startswith("#version")]
    word_end_suffix = config.get("word_end_suffix")
    unsplittable = unique_special_tokens(specials) or (
        [] if word_end_suffix else ["<|endoftext|>"])
    missing = [token for token in unsplittable if token not in vocabulary]
    if missing:
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: special token(s) {missing} are "
                         f"not in {config.get('vocabulary_file', 'vocab.json')}")
    if word_end_suffix:
        from lmfactory.models.gpt1.gpt1_tokenizer import Gpt1BpeTokenizer

        return Gpt1BpeTokenizer(vocabulary=vocabulary, merges=merges,
                                unk_token=specials.get("unk", "<unk>"),
                                word_end_suffix=word_end_suffix,
                                unsplittable_tokens=unsplittable,
                                sequence_length=sequence_length)
    return keras_nlp.tokenizers.BytePairTokenizer(
        vocabulary=vocabulary,
        merges=merges,
        sequence_length=sequence_length,
        unsplittable_tokens=unsplittable,
    )


def special_token_ids(vocab_dir: str) -> dict:
    """Maps each special-token role ("pad", "cls", "end_of_text", ...) to its id."""
    config = read_tokenizer_config(vocab_dir)
    tokenizer = load_tokenizer(vocab_dir)
    return {role: int(tokenizer.token_to_id(token))
            for role, token in config.get("special_tokens", {}).items()}


def lowercase_characters(inputs):
    """Lowercases each character on its own, as Hugging Face's tokenizers do.

    ``tf.strings.lower`` (ICU) maps every code point as Python's ``str.lower`` does (checked
    over all of Unicode) but also applies Unicode's Final_Sigma rule to whole strings ("ΟΣ"
    -> "ος"), which per-character lowercasing never does ("οσ"); capital sigma is mapped
    first so the rule cannot fire.
    """
    return tf.strings.lower(tf.strings.regex_replace(inputs, "\u03a3", "\u03c3"),
                            encoding="utf-8")


# --- BERT's text normalisation before WordPiece, in TensorFlow ops -----------------------
# Characters for which Python's str.isspace() is true (what `str.split()` splits on);
# RE2's \s is ASCII only. tests/test_tokenizer_import.py checks this against Python.
PYTHON_WHITESPACE = ("\\t-\\r\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
                     "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}")
# BERT's `_clean_text` drops NUL, U+FFFD and "other" (C*) characters except \t \n \r.
_BERT_DROPPED = r"[^\P{C}\t\n\r]|\x{fffd}"


def bert_normalize(inputs, lowercase: bool = True, strip_accents: bool = True):
    """The character-level part of BERT's basic tokenizer (Devlin et al. 2019;
    google-research/bert ``BasicTokenizer``, Hugging Face's ``BertNormalizer``) as graph ops:
    drop control / format characters, turn every Unicode space into " ", strip accents
    (NFD, drop ``Mn``), lowercase (character by character, as Hugging Face's tokenizers
    do; not NFKC case folding)

    keras-nlp's ``WordPieceTokenizer`` splits only on ASCII spaces and lowercases with
    NFKC case folding, so "a\u00a0b" became one unknown word and "ﬁ" became "fi";
    :class:`BertWordPieceTokenizer` runs this first and leaves only the splitting to it.
    """
    text = tf.strings.regex_replace(inputs, _BERT_DROPPED, "")
    text = tf.strings.regex_replace(text, f"[{PYTHON_WHITESPACE}\\p{{Zs}}]", " ")
    if strip_accents:
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    if lowercase:
        text = lowercase_characters(text)
    return text


@keras.saving.register_keras_serializable(package="lmfactory")
class BertWordPieceTokenizer(keras_nlp.tokenizers.WordPieceTokenizer):
    """WordPiece (Wu et al. 2016 §4.1) with BERT's text normalisation (Devlin et al. 2019).

    keras-nlp's ``WordPieceTokenizer`` does the punctuation / CJK splitting and the greedy
    longest-match-first lookup; the normalisation before it (:func:`bert_normalize`) is
    BERT's, which keras-nlp's own lowercasing and whitespace handling do not reproduce.
    Arguments are keras-nlp's; ``lowercase`` and ``strip_accents`` select BERT's steps.
    """

    def __init__(self, vocabulary=None, lowercase: bool = True, strip_accents: bool = True,
                 **kwargs):
        self.bert_lowercase = bool(lowercase)
        self.bert_strip_accents = bool(strip_accents)
        super().__init__(vocabulary=vocabulary, lowercase=False, strip_accents=False,
                         **kwargs)

    def normalize(self, inputs):
        """BERT's normalisation (string tensor in and out)."""
        return bert_normalize(tf.convert_to_tensor(inputs, tf.string),
                              lowercase=self.bert_lowercase,
                              strip_accents=self.bert_strip_accents)

    @preprocessing_function
    def tokenize(self, inputs):
        return super().tokenize(self.normalize(inputs))

    def get_config(self):
        config = super().get_config()
        config.update({"lowercase": self.bert_lowercase,
                       "strip_accents": self.bert_strip_accents})
        return config


# --- ALBERT's text normalisation before SentencePiece, in TensorFlow ops ------------------
# ALBERT's tokenizer (google-research/albert tokenization.py `preprocess_text`, mirrored by
# Hugging Face's AlbertTokenizer) normalises text in Python before SentencePiece: collapse
# whitespace runs (Python's `str.split()`), turn `` and '' into ", optionally NFKD +
# dropping combining marks (accent stripping), optionally lowercase (character by
# character, see `lowercase_characters`: Hugging Face's AlbertTokenizer lowercases each
# character before `preprocess_text`, so Python's final-sigma rule never applies).
# The same steps run here as graph ops so SavedModels and tf.data pipelines apply them.


def _code_points(predicate) -> list[int]:
    """The code points (surrogates left out) for which ``predicate(char)`` is true."""
    return [code_point for code_point in range(sys.maxunicode + 1)
            if not 0xD800 <= code_point <= 0xDFFF and predicate(chr(code_point))]


def _ranges(code_points: list[int]) -> str:
    """The inside of an RE2 character class matching exactly ``code_points`` (ascending)."""
    ranges = []
    for code_point in code_points:
        if ranges and ranges[-1][1] == code_point - 1:
            ranges[-1][1] = code_point
        else:
            ranges.append([code_point, code_point])
    return "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}"
                   for a, b in ranges)


def _code_point_class(predicate) -> str:
    return f"[{_ranges(_code_points(predicate))}]"


@functools.lru_cache(maxsize=1)
def combining_marks_class() -> str:
    """RE2 class of the code points with a non-zero canonical combining class (Python's
    ``unicodedata.combining``), which ALBERT drops after NFKD. RE2 has no combining-class
    property, and ``\\p{Mn}`` differs from it on about a thousand code points."""
    return _code_point_class(unicodedata.combining)


@functools.lru_cache(maxsize=1)
def digits_class() -> str:
    """RE2 class of the characters Python's ``str.isdigit()`` accepts (``\\p{Nd}`` plus
    superscript, subscript and circled digits)."""
    return _code_point_class(str.isdigit)


def albert_preprocess(inputs, lowercase: bool = True, strip_accents: bool = True):
    """ALBERT's ``preprocess_text`` (Lan et al. 2020; google-research/albert) on a string
    tensor of any shape, as graph ops: strip and collapse whitespace to one space, `` and ''
    -> ", NFKD and drop combining marks when ``strip_accents``, lowercase when
    ``lowercase``."""
    space = f"[{PYTHON_WHITESPACE}]"
    text = tf.strings.regex_replace(inputs, f"^{space}+|{space}+$", "")
    text = tf.strings.regex_replace(text, f"{space}+", " ")
    text = tf.strings.regex_replace(text, "``|''", '"')
    if strip_accents:
        text = tf_text.normalize_utf8(text, "NFKD")
        text = tf.strings.regex_replace(text, combining_marks_class(), "")
    if lowercase:
        text = lowercase_characters(text)
    return text


def albert_preprocess_python(text: str, lowercase: bool = True,
                             strip_accents: bool = True) -> str:
    """The same normalisation in plain Python, as Hugging Face's AlbertTokenizer runs it
    (the reference the graph ops follow)."""
    if lowercase:
        text = "".join(character.lower() for character in text)
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if strip_accents:
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    return text.lower() if lowercase else text


WORD_BOUNDARY = "\u2581"  # SentencePiece's "▁", the space marker inside pieces


@keras.saving.register_keras_serializable(package="lmfactory")
class AlbertSentencePieceTokenizer(keras_nlp.tokenizers.SentencePieceTokenizer):
    """SentencePiece (Kudo & Richardson 2018) tokenization as ALBERT applies it.

    ALBERT (Lan et al. 2020, §4.1) tokenizes with a 30k SentencePiece model "as in XLNet".
    Its tokenizer does two things around the SentencePiece model that keras-nlp's
    ``SentencePieceTokenizer`` lacks, added here as graph ops:

    * text normalisation first (:func:`albert_preprocess`: whitespace, quotes, accents,
      lowercase);
    * a piece that ends in a digit and a comma (``"▁9,"``) is re-encoded without the comma
      and the comma kept as its own piece, so numbers like ``9,9`` do not fuse with the
      comma (google-research/albert ``encode_pieces``, after BERT's README).

    Args:
        proto: the serialized SentencePiece model (bytes) or a path to it.
        lowercase: lowercase the text (ALBERT's ``do_lower_case``).
        strip_accents: NFKD and drop combining marks (ALBERT's ``keep_accents=False``).
        sequence_length, dtype, add_bos, add_eos: as in keras-nlp.
    """

    def __init__(self, proto=None, sequence_length=None, dtype="int32", add_bos=False,
                 add_eos=False, lowercase: bool = True, strip_accents: bool = True, **kwargs):
        self.lowercase = bool(lowercase)
        self.strip_accents = bool(strip_accents)
        self._pieces = None
        super().__init__(proto=proto, sequence_length=sequence_length, dtype=dtype,
                         add_bos=add_bos, add_eos=add_eos, **kwargs)

    def set_proto(self, proto):
        super().set_proto(proto)
        # A second handle on the same model that returns pieces (strings), for the
        # digit-comma rule; ids come from `string_to_id` on the final pieces.
        self._pieces = (None if self.proto is None else tf_text.SentencepieceTokenizer(
            model=self.proto, out_type=tf.string, add_bos=self.add_bos, add_eos=self.add_eos))

    def normalize(self, inputs):
        """The text normalisation applied before SentencePiece (string tensor in and out)."""
        return albert_preprocess(tf.convert_to_tensor(inputs, tf.string),
                                 lowercase=self.lowercase, strip_accents=self.strip_accents)

    def _split_digit_commas(self, pieces):
        """Applies ALBERT's digit-comma rule to a ragged [batch, (pieces)] string tensor."""
        flat = pieces.flat_values
        count = tf.shape(flat, out_type=tf.int64)[0]
        # Python's `len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()`.
        hit = tf.strings.regex_full_match(flat, f"(?s).*{digits_class()},")
        chosen = tf.boolean_mask(flat, hit)
        length = tf.strings.length(chosen)
        stripped = tf.strings.regex_replace(  # the comma is one byte
            tf.strings.substr(chosen, tf.zeros_like(length), length - 1), WORD_BOUNDARY, "")
        repieced = self._pieces.tokenize(stripped)
        first = repieced[:, :1].to_tensor(default_value="", shape=[None, 1])[:, 0]
        # A piece that did not start with "▁" loses the "▁" SentencePiece puts on the first
        # new piece; a first piece that was only "▁" goes away.
        trim = tf.logical_and(
            tf.logical_not(tf.strings.regex_full_match(chosen, f"(?s){WORD_BOUNDARY}.*")),
            tf.strings.regex_full_match(first, f"(?s){WORD_BOUNDARY}.*"))
        characters = tf.strings.length(first, unit="UTF8_CHAR")
        first = tf.where(trim, tf.strings.substr(first, tf.ones_like(characters), characters,
                                                 unit="UTF8_CHAR"), first)
        keep_first = tf.not_equal(first, "")
        head = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(first, keep_first),
                                                tf.cast(keep_first, tf.int64))
        comma = tf.RaggedTensor.from_row_lengths(tf.fill(tf.shape(chosen), ","),
                                                 tf.ones_like(chosen, tf.int64))
        replacements = tf.concat([head, repieced[:, 1:], comma], axis=1)
        # Row i of `table` is what flat piece i becomes: itself, or its replacement.
        table = tf.concat([tf.RaggedTensor.from_row_lengths(flat, tf.ones([count], tf.int64)),
                           replacements], axis=0)
        index = tf.where(hit, count + tf.cumsum(tf.cast(hit, tf.int64)) - 1,
                         tf.range(count, dtype=tf.int64))
        return pieces.with_flat_values(tf.gather(table, index)).merge_dims(-2, -1)

    @preprocessing_function
    def tokenize(self, inputs):
        self._check_vocabulary()
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        pieces = self._split_digit_commas(self._pieces.tokenize(self.normalize(inputs)))
        if is_string_dtype(self.compute_dtype):
            tokens = pieces
        else:
            tokens = tf.cast(self._sentence_piece.string_to_id(pieces), self.compute_dtype)
        if self.sequence_length:
            output_shape = tokens.shape.as_list()
            output_shape[-1] = self.sequence_length
            tokens = tokens.to_tensor(shape=output_shape)
        if unbatched:
            tokens = tf.squeeze(tokens, 0)
        return tokens

    def get_config(self):
        config = super().get_config()
        config.update({"lowercase": self.lowercase, "strip_accents": self.strip_accents})
        return config


# --- Bytes as tokens (character-level LMs) -------------------------------------------------
BYTE_VALUES = 256


def check_byte_special_tokens(special_tokens) -> dict:
    """A clean role -> token copy of a byte vocabulary's special tokens, or a ValueError: a
    special token must be a non-empty string that no single byte spells (``token_to_id``
    maps a one-character string below U+0100 to that byte's id)."""
    special_tokens = dict(special_tokens or {})
    for role, token in special_tokens.items():
        if not isinstance(token, str) or not token:
            raise ValueError(f"byte vocabulary: special token of role {role!r} must be a "
                             f"non-empty string, got {token!r}")
        if len(token) == 1 and ord(token) < BYTE_VALUES:
            raise ValueError(f"byte vocabulary: special token {token!r} (role {role!r}) is "
                             f"the spelling of byte {ord(token)}; use a longer token such "
                             f"as '<|endoftext|>'")
    return special_tokens


@keras.saving.register_keras_serializable(package="lmfactory")
class Utf8ByteTokenizer(keras_nlp.tokenizers.ByteTokenizer):
    """Text as its UTF-8 bytes (ids 0..255), plus special tokens with ids from 256.

    The character Transformer LM (Al-Rfou et al. 2018, §3) models text byte by byte
    (enwik8's "characters" are bytes). keras-nlp's ``ByteTokenizer`` does the byte
    mapping, in the graph; its vocabulary is only the 256 bytes, so the tokens a causal-LM
    pipeline needs besides them (``end_of_text``: the document separator of ``causal_lm``
    examples and the start token of generation) are added here after the bytes. Text is
    modelled exactly as written: no lowercasing, no Unicode normalisation, and special
    tokens never come out of ``tokenize`` (a literal ``<|endoftext|>`` in text is 13 bytes);
    they are placed by the pipeline by id.

    ``detokenize`` joins the bytes and the special tokens' text and decodes the result as
    UTF-8, replacing invalid sequences (what sampling byte by byte can produce) with U+FFFD
    (``errors="replace"``) instead of failing. Dense output (``sequence_length``) is padded
    with the ``pad`` role's id (0, the NUL byte, without one).

    Args:
        special_tokens: role -> token (roles as in ``SPECIAL_ROLES``); the distinct tokens
            get ids 256, 257, ... in role order. Each role is also an attribute
            ``<role>_token`` / ``<role>_token_id`` (keras-nlp's special-token convention).
        sequence_length, errors, replacement_char, dtype: as in keras-nlp's
            ``ByteTokenizer``.
    """

    def __init__(self, special_tokens=None, sequence_length=None, errors="replace",
                 replacement_char=65533, dtype="int32", **kwargs):
        # keras-nlp's options that would change the bytes are fixed off (see above).
        for option, off in (("lowercase", False), ("normalization_form", None)):
            if kwargs.pop(option, off) != off:
                raise ValueError(f"Utf8ByteTokenizer models text as written: {option} must "
                                 f"be {off!r}")
        special_tokens = check_byte_special_tokens(special_tokens)
        self._special_roles = dict(special_tokens)
        self._reserved = tuple(unique_special_tokens(special_tokens))
        super().__init__(lowercase=False, sequence_length=sequence_length,
                         normalization_form=None, errors=errors,
                         replacement_char=replacement_char, dtype=dtype, **kwargs)
        # id -> UTF-8 text of the token: the byte itself, then the special tokens.
        self._char_lst = tf.constant([bytes([value]) for value in range(BYTE_VALUES)]
                                     + [token.encode("utf-8") for token in self._reserved])
        for role, token in special_tokens.items():
            self._add_special_token(token, f"{role}_token")
        self._pad_id = self.token_to_id(special_tokens["pad"]) if "pad" in special_tokens \
            else 0

    def vocabulary_size(self):
        return BYTE_VALUES + len(self._reserved)

    def get_vocabulary(self):
        """Tokens by id: byte b spelled ``chr(b)`` (keras-nlp's spelling), then the special
        tokens."""
        return [chr(value) for value in range(BYTE_VALUES)] + list(self._reserved)

    def id_to_token(self, id):
        if not 0 <= int(id) < self.vocabulary_size():
            raise ValueError(f"id must lie in [0, {self.vocabulary_size()}), got {id}")
        id = int(id)
        return chr(id) if id < BYTE_VALUES else self._reserved[id - BYTE_VALUES]

    def token_to_id(self, token):
        if token in self._reserved:
            return BYTE_VALUES + self._reserved.index(token)
        if isinstance(token, str) and len(token) == 1 and ord(token) < BYTE_VALUES:
            return ord(token)
        raise ValueError(f"{token!r} is neither a byte (a character below U+0100) nor one "
                         f"of the special tokens {list(self._reserved)}")

    @preprocessing_function
    def tokenize(self, inputs):
        inputs = tf.convert_to_tensor(inputs)
        unbatched = inputs.shape.rank == 0
        if unbatched:
            inputs = tf.expand_dims(inputs, 0)
        if inputs.shape.rank != 1:
            raise ValueError(f"Utf8ByteTokenizer.tokenize takes a string or a 1-D batch of "
                             f"strings, got shape {inputs.shape}")
        pieces = tf.strings.bytes_split(inputs)  # [batch, (bytes)], one byte a string
        values = tf.reshape(tf.io.decode_raw(pieces.flat_values, tf.uint8), [-1])
        tokens = pieces.with_flat_values(tf.cast(values, self.compute_dtype))
        if self.sequence_length:
            tokens = tokens.to_tensor(default_value=self._pad_id,
                                      shape=[None, self.sequence_length])
        if unbatched:
            tokens = tf.squeeze(tokens, 0)
        return tokens

    @preprocessing_function
    def detokenize(self, inputs):
        inputs, unbatched, _ = convert_to_ragged_batch(inputs)
        inputs = tf.cast(inputs, "int32")  # e.g. an empty Python list arrives as float
        text = tf.strings.reduce_join(tf.gather(self._char_lst, inputs), axis=-1)
        text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors=self.errors,
                                            replacement_char=self.replacement_char)
        if unbatched:
            text = tf.squeeze(text, 0)
        return text

    def get_config(self):
        config = super().get_config()
        for option in ("lowercase", "normalization_form"):
            config.pop(option, None)
        config["special_tokens"] = dict(self._special_roles)
        return config


# --- Importing published Hugging Face tokenizer folders ------------------------------------
_HF_ROLES = {"pad_token": "pad", "unk_token": "unk", "cls_token": "cls", "sep_token": "sep",
             "mask_token": "mask"}
# Tokenizer classes whose SentencePiece ids are the model's ids and whose text normalisation
# is ALBERT's preprocess_text; (do_lower_case, keep_accents) defaults of each.
_SENTENCEPIECE_CLASSES = {"AlbertTokenizer": (True, False), "XLNetTokenizer": (False, False)}


def _read_json(path: str) -> dict:
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path, "r") as f:
        return json.load(f)


def _token_content(value):
    """A special token as written by HF: a string or ``{"content": ..., ...}``."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _hf_special_tokens(hf_dir: str, tokenizer_config: dict) -> dict:
    """Role -> token from special_tokens_map.json (preferred) and tokenizer_config.json.

    Encoder tokenizers (with a separator) give pad/unk/cls/sep/mask; decoder tokenizers
    without one (GPT-2) give ``end_of_text`` = the EOS token, and ``pad`` = EOS when they
    have no pad token, as our GPT-2 vocabularies do.
    """
    found = {}
    for source in (tokenizer_config, _read_json(os.path.join(hf_dir, "special_tokens_map.json"))):
        for key in list(_HF_ROLES) + ["eos_token", "bos_token"]:
            token = _token_content(source.get(key))
            if token:
                found[key] = token
    specials = {role: found[key] for key, role in _HF_ROLES.items() if key in found}
    if "sep" not in specials and "eos_token" in found:
        specials["end_of_text"] = found["eos_token"]
        specials.setdefault("pad", found["eos_token"])
    return specials


def _added_tokens(tokenizer_config: dict) -> dict[int, str]:
    decoder = tokenizer_config.get("added_tokens_decoder") or {}
    return {int(index): _token_content(entry) for index, entry in decoder.items()}


def _extend_with_added_tokens(vocabulary: dict[str, int], added: dict[int, str],
                              hf_dir: str) -> dict[str, int]:
    """Appends added tokens that sit right after the vocabulary file's ids; any other added
    token that is missing or has a different id in the file is an error."""
    vocabulary = dict(vocabulary)
    for index in sorted(added):
        token = added[index]
        if vocabulary.get(token) == index:
            continue
        if token not in vocabulary and index == len(vocabulary):
            vocabulary[token] = index
            continue
        raise ValueError(f"{hf_dir}: added token {token!r} has id {index} in "
                         f"tokenizer_config.json but {vocabulary.get(token)} in the vocabulary "
                         f"file of {len(vocabulary)} tokens; such tokenizers are not supported")
    return vocabulary


def _check_specials_known(specials: dict, known, hf_dir: str) -> None:
    missing = sorted({token for token in specials.values() if token not in known})
    if missing:
        raise ValueError(f"{hf_dir}: special token(s) {missing} are not in the vocabulary")


def _copy(source: str, target: str) -> None:
    tf.io.gfile.copy(source, target, overwrite=True)


def _merges_mark_word_ends(hf_dir: str) -> bool:
    """Whether merges.txt (or, for a vocabulary without merges, vocab.json) uses GPT-1's
    ``</w>`` end-of-word markers."""
    with tf.io.gfile.GFile(os.path.join(hf_dir, "merges.txt")) as f:
        if any("</w>" in line for _, line in zip(range(2000), f)):
            return True
    return any(token.endswith("</w>")
               for token in _read_json(os.path.join(hf_dir, "vocab.json")))


def _import_openai_gpt_bpe(hf_dir: str, out_dir: str, tokenizer_class: str, specials: dict,
                           added: dict) -> dict:
    """GPT-1's BPE (``</w>`` on word-final symbols; Hugging Face ``OpenAIGPTTokenizer``
    without ftfy/spaCy) -> a ``bpe`` folder with ``word_end_suffix``, read by
    ``models/gpt1/gpt1_tokenizer.py``."""
    if tokenizer_class not in ("", "OpenAIGPTTokenizer"):
        raise ValueError(f"{hf_dir}: {tokenizer_class} BPE with '</w>' word ends is not "
                         f"supported (its pre-tokenization differs from GPT-1's); the "
                         f"'</w>' scheme is read for OpenAIGPTTokenizer only")
    vocabulary = _extend_with_added_tokens(_read_json(os.path.join(hf_dir, "vocab.json")),
                                           added, hf_dir)
    specials = dict(specials)
    specials.setdefault("unk", "<unk>")
    _check_specials_known(specials, vocabulary, hf_dir)
    tf.io.gfile.makedirs(out_dir)
    with tf.io.gfile.GFile(os.path.join(out_dir, "vocab.json"), "w") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    _copy(os.path.join(hf_dir, "merges.txt"), os.path.join(out_dir, "merges.txt"))
    return {"kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
            "word_end_suffix": "</w>", "special_tokens": specials}


def import_huggingface_tokenizer(hf_dir: str, out_dir: str) -> dict:
    """Writes a vocabulary folder (CONTRACTS §2) from a Hugging Face tokenizer folder.

    * ``vocab.txt`` (BERT-style WordPiece) -> wordpiece; ``do_lower_case`` and
      ``strip_accents`` from ``tokenizer_config.json`` (``strip_accents: null`` follows
      ``do_lower_case``, as in BERT's tokenizer).
    * ``vocab.json`` + ``merges.txt`` (GPT-2 / RoBERTa byte-level BPE) -> bpe.
    * the same files with ``</w>`` word ends (OpenAI GPT, GPT-1: ``OpenAIGPTTokenizer``)
      -> bpe with ``"word_end_suffix": "</w>"`` (``models/gpt1/gpt1_tokenizer.py``: the
      lower-casing and BERT ``BasicTokenizer`` split Hugging Face applies without
      ftfy/spaCy).
    * ``spiece.model`` (ALBERT / XLNet SentencePiece) -> sentencepiece; lowercase per
      ``do_lower_case``, accents stripped unless ``keep_accents``.

    Special tokens come from ``special_tokens_map.json`` / ``tokenizer_config.json``.
    Returns the ``tokenizer.json`` content written. Settings our tokenizers cannot reproduce
    (e.g. no basic tokenization, ``add_prefix_space``) raise a ValueError.
    """
    if not tf.io.gfile.isdir(hf_dir):
        raise FileNotFoundError(f"Tokenizer folder {hf_dir!r} does not exist")
    tokenizer_config = _read_json(os.path.join(hf_dir, "tokenizer_config.json"))
    tokenizer_class = (tokenizer_config.get("tokenizer_class") or "").removesuffix("Fast")
    specials = _hf_special_tokens(hf_dir, tokenizer_config)
    added = _added_tokens(tokenizer_config)
    has = lambda name: tf.io.gfile.exists(os.path.join(hf_dir, name))  # noqa: E731

    if has("spiece.model"):
        if tokenizer_class and tokenizer_class not in _SENTENCEPIECE_CLASSES:
            raise ValueError(f"{hf_dir}: {tokenizer_class} SentencePiece tokenizers are not "
                             f"supported (ids or normalisation differ from ALBERT's); "
                             f"supported: {sorted(_SENTENCEPIECE_CLASSES)}")
        lower_default, accents_default = _SENTENCEPIECE_CLASSES.get(tokenizer_class,
                                                                    (True, False))
        if tokenizer_config.get("remove_space", True) is False:
            raise ValueError(f"{hf_dir}: remove_space=false is not supported")
        with tf.io.gfile.GFile(os.path.join(hf_dir, "spiece.model"), "rb") as f:
            proto = f.read()
        pieces = AlbertSentencePieceTokenizer(proto=proto, lowercase=False,
                                              strip_accents=False).get_vocabulary()
        ids = {piece: index for index, piece in enumerate(pieces)}
        if any(ids.get(token) != index for index, token in added.items()):
            raise ValueError(f"{hf_dir}: added tokens {added} are not all in spiece.model "
                             f"at their ids; such tokenizers are not supported")
        _check_specials_known(specials, ids, hf_dir)
        tf.io.gfile.makedirs(out_dir)
        _copy(os.path.join(hf_dir, "spiece.model"), os.path.join(out_dir, "spm.model"))
        config = {"kind": "sentencepiece", "model_file": "spm.model",
                  "lowercase": bool(tokenizer_config.get("do_lower_case", lower_default)),
                  "strip_accents": not tokenizer_config.get("keep_accents", accents_default),
                  "special_tokens": specials}
    elif has("vocab.json") and has("merges.txt") and (
            tokenizer_class == "OpenAIGPTTokenizer" or _merges_mark_word_ends(hf_dir)):
        config = _import_openai_gpt_bpe(hf_dir, out_dir, tokenizer_class, specials, added)
    elif has("vocab.json") and has("merges.txt"):
        if tokenizer_config.get("add_prefix_space"):
            raise ValueError(f"{hf_dir}: add_prefix_space=true is not supported by "
                             f"keras-nlp's BytePairTokenizer")
        vocabulary = _read_json(os.path.join(hf_dir, "vocab.json"))
        vocabulary = _extend_with_added_tokens(vocabulary, added, hf_dir)
        _check_specials_known(specials, vocabulary, hf_dir)
        tf.io.gfile.makedirs(out_dir)
        with tf.io.gfile.GFile(os.path.join(out_dir, "vocab.json"), "w") as f:
            json.dump(vocabulary, f, ensure_ascii=False)
        _copy(os.path.join(hf_dir, "merges.txt"), os.path.join(out_dir, "merges.txt"))
        config = {"kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
                  "special_tokens": specials}
    elif has("vocab.txt"):
        for key in ("do_basic_tokenize", "tokenize_chinese_chars"):
            if tokenizer_config.get(key, True) is False:
                raise ValueError(f"{hf_dir}: {key}=false is not supported by keras-nlp's "
                                 f"WordPieceTokenizer")
        tokens = _read_lines(os.path.join(hf_dir, "vocab.txt"))
        for index in sorted(added):
            if index < len(tokens) and tokens[index] == added[index]:
                continue
            if index == len(tokens) and added[index] not in tokens:
                tokens.append(added[index])
                continue
            raise ValueError(f"{hf_dir}: added token {added[index]!r} has id {index} in "
                             f"tokenizer_config.json, which vocab.txt ({len(tokens)} tokens) "
                             f"does not match; such tokenizers are not supported")
        _check_specials_known(specials, set(tokens), hf_dir)
        tf.io.gfile.makedirs(out_dir)
        with tf.io.gfile.GFile(os.path.join(out_dir, "vocab.txt"), "w") as f:
            f.write("".join(token + "\n" for token in tokens))
        lowercase = bool(tokenizer_config.get("do_lower_case", True))
        strip_accents = tokenizer_config.get("strip_accents")
        config = {"kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": lowercase,
                  "strip_accents": lowercase if strip_accents is None else bool(strip_accents),
                  "special_tokens": specials}
    else:
        raise ValueError(f"{hf_dir}: no tokenizer files found; expected vocab.txt "
                         f"(WordPiece), vocab.json + merges.txt (byte-level BPE) or "
                         f"spiece.model (SentencePiece)")
    write_tokenizer_config(out_dir, config)
    return config
