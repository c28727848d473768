"""Text as its UTF-8 bytes: the ``byte`` kind.

``{"kind": "byte", "special_tokens": {"end_of_text": "<|endoftext|>", "pad":
"<|endoftext|>"}}`` -> :class:`Utf8ByteTokenizer`: the 256 UTF-8 byte values are ids 0..255
(no vocabulary file: nothing is learned), the distinct special tokens follow from id 256
(the character LM of Al-Rfou et al. 2018, ``models/charlm``).
"""

from __future__ import annotations

import keras
import keras_nlp
from keras_hub.src.utils.tensor_utils import convert_to_ragged_batch, preprocessing_function

from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.config import unique_special_tokens
from lmfactory.models.tokenizers.kinds import TokenizerKind, register_kind

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


def load(vocab_dir: str, config: dict, sequence_length: int | None = None):
    """The `Utf8ByteTokenizer` of a ``byte`` vocabulary folder (its special tokens only)."""
    try:
        return Utf8ByteTokenizer(special_tokens=config.get("special_tokens", {}),
                                 sequence_length=sequence_length)
    except ValueError as error:
        raise ValueError(f"Vocabulary folder {vocab_dir!r}: {error}") from error


KIND = register_kind(TokenizerKind("byte", load))

__all__ = ["BYTE_VALUES", "KIND", "Utf8ByteTokenizer", "check_byte_special_tokens", "load"]
