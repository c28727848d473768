"""SentencePiece with ALBERT's text normalisation: the ``sentencepiece`` kind.

``{"kind": "sentencepiece", "model_file": "spm.model", "lowercase": bool,
"strip_accents": bool, "special_tokens": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]",
"sep": "[SEP]", "mask": "[MASK]"}}`` -> :class:`AlbertSentencePieceTokenizer`, a
``keras_nlp.tokenizers.SentencePieceTokenizer`` that first normalises text the way ALBERT's
tokenizer does.
"""

from __future__ import annotations

import functools
import sys
import unicodedata

import keras
import keras_nlp
from keras_hub.src.utils.tensor_utils import is_string_dtype, preprocessing_function

from lmfactory.models.backend import tf, tf_text
from lmfactory.models.tokenizers.config import vocabulary_path
from lmfactory.models.tokenizers.kinds import TokenizerKind, register_kind
from lmfactory.models.tokenizers.normalization import PYTHON_WHITESPACE, lowercase_characters

MODEL_FILE = "spm.model"

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


def load(vocab_dir: str, config: dict, sequence_length: int | None = None):
    """The `AlbertSentencePieceTokenizer` of a ``sentencepiece`` vocabulary folder."""
    with tf.io.gfile.GFile(vocabulary_path(vocab_dir, config, "model_file", MODEL_FILE),
                           "rb") as f:
        proto = f.read()
    return AlbertSentencePieceTokenizer(
        proto=proto, sequence_length=sequence_length,
        lowercase=config.get("lowercase", True),
        strip_accents=config.get("strip_accents", True))


KIND = register_kind(TokenizerKind("sentencepiece", load))

__all__ = ["AlbertSentencePieceTokenizer", "KIND", "WORD_BOUNDARY", "albert_preprocess",
           "albert_preprocess_python", "combining_marks_class", "digits_class", "load"]
