"""WordPiece with BERT's text normalisation: the ``wordpiece`` kind.

``{"kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": bool,
"strip_accents": bool, "special_tokens": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]",
"sep": "[SEP]", "mask": "[MASK]"}}`` -> :class:`BertWordPieceTokenizer`, a
``keras_nlp.tokenizers.WordPieceTokenizer`` that first normalises text the way BERT's basic
tokenizer does.
"""

from __future__ import annotations

import keras
import keras_nlp
from keras_hub.src.utils.tensor_utils import preprocessing_function

from lmfactory.models.backend import tf, tf_text
from lmfactory.models.tokenizers.config import read_lines, vocabulary_path
from lmfactory.models.tokenizers.kinds import TokenizerKind, register_kind
from lmfactory.models.tokenizers.normalization import PYTHON_WHITESPACE, lowercase_characters

VOCABULARY_FILE = "vocab.txt"
DEFAULT_SPECIAL_TOKENS = {"unk": "[UNK]"}

# --- BERT's text normalisation before WordPiece, in TensorFlow ops -----------------------
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



def load(vocab_dir: str, config: dict, sequence_length: int | None = None):
    """The `BertWordPieceTokenizer` of a ``wordpiece`` vocabulary folder."""
    specials = config.get("special_tokens", {})
    vocabulary = read_lines(vocabulary_path(vocab_dir, config, "vocabulary_file",
                                            VOCABULARY_FILE))
    return BertWordPieceTokenizer(
        vocabulary=vocabulary,
        sequence_length=sequence_length,
        lowercase=config.get("lowercase", True),
        strip_accents=config.get("strip_accents", True),
        oov_token=specials.get("unk", DEFAULT_SPECIAL_TOKENS["unk"]),
    )


KIND = register_kind(TokenizerKind("wordpiece", load, DEFAULT_SPECIAL_TOKENS))

__all__ = ["BertWordPieceTokenizer", "KIND", "bert_normalize", "load"]
