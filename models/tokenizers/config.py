"""A vocabulary folder's ``tokenizer.json`` (docs/CONTRACTS.md §2) and the loader that turns
the folder into its keras-nlp tokenizer through the kind registry (``kinds.py``)."""

from __future__ import annotations

import json
import os


from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.kinds import get_kind, kind_names

TOKENIZER_CONFIG = "tokenizer.json"
# Token roles a vocabulary may reserve (see models/registry.py `Architecture.special_tokens`).
# start / delimiter / extract: GPT-1's fine-tuning tokens (Radford et al. 2018 §3.3).
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask", "end_of_text", "start", "delimiter",
                 "extract")
# Numbered roles ``sentinel_0``, ``sentinel_1``, ...: span-corruption sentinels (T5 §3.1.4),
# which a SentencePiece vocabulary puts at its top (components/vocabulary/sentence_piece.py).
SENTINEL_ROLE_PREFIX = "sentinel_"


def is_special_role(role) -> bool:
    """Whether ``role`` is one of `SPECIAL_ROLES` or a numbered sentinel role."""
    if role in SPECIAL_ROLES:
        return True
    return isinstance(role, str) and role.startswith(SENTINEL_ROLE_PREFIX) \
        and role[len(SENTINEL_ROLE_PREFIX):].isdigit()



def read_tokenizer_config(vocab_dir: str) -> dict:
    path = os.path.join(vocab_dir, TOKENIZER_CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"No {TOKENIZER_CONFIG} in vocabulary folder {vocab_dir!r}")
    with tf.io.gfile.GFile(path, "r") as f:
        config = json.load(f)
    if config.get("kind") not in kind_names():
        raise ValueError(f"{path}: 'kind' must be one of {kind_names()}, got {config.get('kind')!r}")
    return config


def write_tokenizer_config(vocab_dir: str, config: dict) -> None:
    tf.io.gfile.makedirs(vocab_dir)
    with tf.io.gfile.GFile(os.path.join(vocab_dir, TOKENIZER_CONFIG), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def read_lines(path: str) -> list[str]:
    with tf.io.gfile.GFile(path, "r") as f:
        return [line.rstrip("\n") for line in f]


def vocabulary_path(vocab_dir: str, config: dict, key: str, default: str) -> str:
    """The path of the file ``tokenizer.json`` names under ``key`` (``default`` when it names
    none); FileNotFoundError when it does not exist."""
    path = os.path.join(vocab_dir, config.get(key, default))
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
    return get_kind(config["kind"]).load(vocab_dir, config, sequence_length)


def special_token_ids(vocab_dir: str) -> dict:
    """Maps each special-token role ("pad", "cls", "end_of_text", ...) to its id."""
    config = read_tokenizer_config(vocab_dir)
    tokenizer = load_tokenizer(vocab_dir)
    return {role: int(tokenizer.token_to_id(token))
            for role, token in config.get("special_tokens", {}).items()}


__all__ = ["SENTINEL_ROLE_PREFIX", "SPECIAL_ROLES", "TOKENIZER_CONFIG", "get_kind",
           "is_special_role", "kind_names", "load_tokenizer", "read_lines",
           "read_tokenizer_config", "special_token_ids", "unique_special_tokens",
           "vocabulary_path", "write_tokenizer_config"]
