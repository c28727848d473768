"""Importing published Hugging Face tokenizer folders: :func:`import_huggingface_tokenizer`
writes a vocabulary folder (docs/CONTRACTS.md §2) from ``vocab.txt`` (WordPiece),
``vocab.json`` + ``merges.txt`` (byte-level BPE, or GPT-1's ``</w>`` BPE) or ``spiece.model``
(SentencePiece)."""

from __future__ import annotations

import json
import os


from lmfactory.models.backend import tf
from lmfactory.models.tokenizers.config import read_lines, write_tokenizer_config
from lmfactory.models.tokenizers.sentencepiece import AlbertSentencePieceTokenizer

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
        tokens = read_lines(os.path.join(hf_dir, "vocab.txt"))
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


__all__ = ["import_huggingface_tokenizer"]
