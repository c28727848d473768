"""One place that turns a vocabulary folder into the keras-nlp tokenizer every stage uses.

A vocabulary folder holds ``tokenizer.json`` plus the vocabulary files it names:

* ``{"kind": "wordpiece", "vocabulary_file": "vocab.txt", "lowercase": bool,
  "strip_accents": bool, "special_tokens": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]",
  "sep": "[SEP]", "mask": "[MASK]"}}`` -> ``keras_nlp.tokenizers.WordPieceTokenizer``
* ``{"kind": "bpe", "vocabulary_file": "vocab.json", "merges_file": "merges.txt",
  "special_tokens": {"end_of_text": "<|endoftext|>", "pad": "<|endoftext|>"}}``
  -> ``keras_nlp.tokenizers.BytePairTokenizer`` (GPT-2's byte-level scheme)

Example generation (Beam), training (tf.data) and the pushed SavedModel all call
:func:`load_tokenizer`, so ids agree between pretraining data and serving.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

TOKENIZER_CONFIG = "tokenizer.json"
KINDS = ("wordpiece", "bpe")


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


def load_tokenizer(vocab_dir: str, sequence_length: int | None = None):
    """Builds the keras-nlp tokenizer described by ``vocab_dir/tokenizer.json``.

    Vocabularies are passed to keras-nlp as in-memory lists/dicts (not file paths) so a
    SavedModel that tracks the tokenizer carries them as its own constants.
    """
    import keras_nlp

    config = read_tokenizer_config(vocab_dir)
    specials = config.get("special_tokens", {})
    if config["kind"] == "wordpiece":
        vocabulary = _read_lines(os.path.join(vocab_dir, config.get("vocabulary_file", "vocab.txt")))
        return keras_nlp.tokenizers.WordPieceTokenizer(
            vocabulary=vocabulary,
            sequence_length=sequence_length,
            lowercase=config.get("lowercase", True),
            strip_accents=config.get("strip_accents", True),
            oov_token=specials.get("unk", "[UNK]"),
        )
    with tf.io.gfile.GFile(os.path.join(vocab_dir, config.get("vocabulary_file", "vocab.json"))) as f:
        vocabulary = json.load(f)
    merges = _read_lines(os.path.join(vocab_dir, config.get("merges_file", "merges.txt")))
    merges = [m for m in merges if m and not m.startswith("#version")]
    end_of_text = specials.get("end_of_text", "<|endoftext|>")
    return keras_nlp.tokenizers.BytePairTokenizer(
        vocabulary=vocabulary,
        merges=merges,
        sequence_length=sequence_length,
        unsplittable_tokens=[end_of_text],
    )


def special_token_ids(vocab_dir: str) -> dict:
    """Maps each special-token role ("pad", "cls", "end_of_text", ...) to its id."""
    config = read_tokenizer_config(vocab_dir)
    tokenizer = load_tokenizer(vocab_dir)
    return {role: int(tokenizer.token_to_id(token))
            for role, token in config.get("special_tokens", {}).items()}
