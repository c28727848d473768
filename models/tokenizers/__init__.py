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
  ``models/gpt1/gpt1_tokenizer.py`` :class:`Gpt1BpeTokenizer`, which registers itself as
  the ``bpe`` kind's word-end tokenizer.
* ``{"kind": "word", "vocabulary_file": "vocab.txt", "counts_file": "counts.txt",
  "lowercase": bool, "special_tokens": {"unk": "<unk>", ...}}`` -> :class:`WordTokenizer`:
  whole whitespace-separated words (NNLM, word2vec, ELMo, AWD-LSTM), unknown words ->
  ``unk``; :func:`word_counts` reads each id's corpus count.

Example generation (Beam), training (tf.data) and the pushed SavedModel all call
:func:`load_tokenizer`, so ids agree between pretraining data and serving.
:func:`import_huggingface_tokenizer` writes such a folder from a published Hugging Face
tokenizer folder (``vocab.txt``; ``vocab.json`` + ``merges.txt``; ``spiece.model``).

Modules: ``kinds`` (the tokenizer-kind registry: :func:`kind_names`, :func:`get_kind`),
``config`` (``tokenizer.json`` and :func:`load_tokenizer`, which asks the registry),
one module per kind, each registering its record when imported (``wordpiece``,
``byte_level_bpe``, ``sentencepiece``, ``byte``, ``word``; all imported here, so every kind is
registered once this package is), ``normalization`` (text steps they share) and
``huggingface`` (the import).
"""

from lmfactory.models.tokenizers.kinds import TokenizerKind, get_kind, kind_names, register_kind
from lmfactory.models.tokenizers.config import (SPECIAL_ROLES, TOKENIZER_CONFIG, load_tokenizer,
                                                read_tokenizer_config, special_token_ids,
                                                unique_special_tokens, write_tokenizer_config)
from lmfactory.models.tokenizers.normalization import PYTHON_WHITESPACE, lowercase_characters
# Each kind's module registers the kind (registration order = `kind_names()` order).
from lmfactory.models.tokenizers.wordpiece import BertWordPieceTokenizer, bert_normalize
from lmfactory.models.tokenizers.byte_level_bpe import register_word_end_tokenizer
from lmfactory.models.tokenizers.sentencepiece import (WORD_BOUNDARY,
                                                       AlbertSentencePieceTokenizer,
                                                       albert_preprocess,
                                                       albert_preprocess_python,
                                                       combining_marks_class, digits_class)
from lmfactory.models.tokenizers.byte import (BYTE_VALUES, Utf8ByteTokenizer,
                                              check_byte_special_tokens)
from lmfactory.models.tokenizers.word import WordTokenizer, word_counts
from lmfactory.models.tokenizers.huggingface import import_huggingface_tokenizer

__all__ = [
    "AlbertSentencePieceTokenizer", "BYTE_VALUES", "BertWordPieceTokenizer",
    "PYTHON_WHITESPACE", "SPECIAL_ROLES", "TOKENIZER_CONFIG", "TokenizerKind",
    "Utf8ByteTokenizer", "WORD_BOUNDARY", "albert_preprocess", "albert_preprocess_python",
    "bert_normalize", "check_byte_special_tokens", "combining_marks_class", "digits_class",
    "get_kind", "import_huggingface_tokenizer", "kind_names", "load_tokenizer",
    "lowercase_characters", "read_tokenizer_config", "register_kind",
    "register_word_end_tokenizer", "special_token_ids", "unique_special_tokens",
    "write_tokenizer_config",
    "WordTokenizer", "word_counts",
]
