"""SentencePiece unigram vocabularies as ALBERT uses them: pre-tokenization, training, files.

ALBERT (Lan et al. 2020, §4.1): "a vocabulary size of 30,000, tokenized using SentencePiece
(Kudo & Richardson, 2018) as in XLNet". SentencePiece's unigram language model (Kudo 2018,
"Subword Regularization", §3.2) starts from a large seed set of sub-words and prunes it
with EM until ``vocab_size`` pieces are left; spaces are part of pieces (``"▁the"``), so
pieces never cross a word boundary (``split_by_whitespace``).

Scale-out design: Beam counts words (text normalised exactly as the tokenizer will
normalise it, then split on spaces), and the trainer of the ``sentencepiece`` package runs
once on the ``word<TAB>count`` list (its ``input_format="tsv"``). As pieces cannot cross
spaces, training on counted words sees the same statistics as training on the lines.

Special pieces follow ALBERT's model: ``<pad>``=0, ``<unk>``=1, then the control symbols
``[CLS]``=2, ``[SEP]``=3, ``[MASK]``=4; no BOS / EOS pieces. Special tokens whose roles
are ``sentinel_0``, ``sentinel_1``, ... (T5's span-corruption sentinels, Raffel et al.
2020 §3.1.4) are instead appended after the learned pieces as control symbols counting
down from the top: ``sentinel_0`` is the last id (`top_sentinels`). The model file is read by
:class:`lmfactory.models.tokenizers.AlbertSentencePieceTokenizer` through ``load_tokenizer``.
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import time
from typing import Iterable, Mapping, Sequence

MODEL_FILE = "spm.model"
SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                  "mask": "[MASK]"}
# XLNet's setting (Yang et al. 2019's released spm training command), which ALBERT follows:
# characters that together cover this share of the text get their own piece; the rarest
# remaining characters map to <unk>.
CHARACTER_COVERAGE = 0.99995


def pretokenize_lines(lines: Sequence[str], lowercase: bool = True,
                      strip_accents: bool = True) -> list[str]:
    """Normalises a batch of lines as the tokenizer does (ALBERT's ``preprocess_text``, as
    graph ops) and splits them into space-separated words."""
    import tensorflow as tf

    from lmfactory.models.tokenizers import albert_preprocess

    if not lines:
        return []
    normalized = albert_preprocess(tf.constant(list(lines)), lowercase=lowercase,
                                   strip_accents=strip_accents)
    return [word for line in normalized.numpy()
            for word in line.decode("utf-8").split(" ") if word]


SENTINEL_ROLE = "sentinel_{}"


def top_sentinels(special_tokens: Mapping[str, str] | None) -> list:
    """The tokens of the roles ``sentinel_0``, ``sentinel_1``, ... (consecutive from 0),
    which the vocabulary puts at its top, ``sentinel_0`` last."""
    special_tokens = special_tokens or {}
    sentinels = []
    while SENTINEL_ROLE.format(len(sentinels)) in special_tokens:
        sentinels.append(special_tokens[SENTINEL_ROLE.format(len(sentinels))])
    return sentinels


def _append_top_sentinels(model: bytes, sentinels: Sequence[str]) -> bytes:
    """The model with ``sentinels`` appended as control pieces, the first one last."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    for token in reversed(sentinels):
        piece = proto.pieces.add()
        piece.piece, piece.score = token, 0.0
        piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.CONTROL
    return proto.SerializeToString()


def trainer_special_pieces(special_tokens: Mapping[str, str] | None) -> dict:
    """SentencePiece trainer arguments that reserve the special tokens: ``pad`` (if any) at
    id 0, ``unk`` next, the other roles' tokens as control symbols in the given order."""
    special_tokens = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
    sentinels = set(top_sentinels(special_tokens))
    special_tokens = {role: token for role, token in special_tokens.items()
                      if token not in sentinels}
    if "unk" not in special_tokens:
        raise ValueError(f"A SentencePiece vocabulary needs an 'unk' special token, got "
                         f"roles {sorted(special_tokens)}")
    arguments = {"bos_id": -1, "eos_id": -1, "pad_id": -1}
    next_id = 0
    if "pad" in special_tokens:
        arguments.update(pad_id=0, pad_piece=special_tokens["pad"])
        next_id = 1
    arguments.update(unk_id=next_id, unk_piece=special_tokens["unk"])
    controls = []
    for role, token in special_tokens.items():
        if role not in ("pad", "unk") and token not in controls and token not in (
                special_tokens["unk"], special_tokens.get("pad")):
            controls.append(token)
    arguments["control_symbols"] = controls
    return arguments


def learn_model(word_counts: Iterable[tuple[str, int]], vocab_size: int,
                special_tokens: Mapping[str, str] | None = None) -> bytes:
    """Trains a unigram SentencePiece model of exactly ``vocab_size`` pieces (special pieces
    included) on counted words and returns the serialized model.

    Args:
      word_counts: (word, count) pairs, words normalised by :func:`pretokenize_lines`.
      vocab_size: the number of pieces, special pieces included.
      special_tokens: role -> token; None = ALBERT's set (:data:`SPECIAL_TOKENS`). Roles
          ``sentinel_<i>`` go to the top (`top_sentinels`): the unigram model learns
          ``vocab_size`` minus their number.
    """
    import sentencepiece

    sentinels = top_sentinels(special_tokens)

    word_counts = [(word, int(count)) for word, count in word_counts if word]
    if not word_counts:
        raise ValueError("No words to learn a SentencePiece vocabulary from")
    bad = [word for word, _ in word_counts if "\t" in word or "\n" in word]
    if bad:
        raise ValueError(f"Words must not hold tabs or newlines, got {bad[:3]}")
    started = time.perf_counter()
    model = io.BytesIO()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "word_counts.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{word}\t{count}\n" for word, count in sorted(word_counts))
        try:
            sentencepiece.SentencePieceTrainer.train(
                input=path, input_format="tsv", model_writer=model, model_type="unigram",
                vocab_size=vocab_size - len(sentinels), character_coverage=CHARACTER_COVERAGE,
                minloglevel=2, **trainer_special_pieces(special_tokens))
        except RuntimeError as error:
            extra = f" (+ {len(sentinels)} sentinels)" if sentinels else ""
            raise ValueError(f"SentencePiece could not learn {vocab_size - len(sentinels)} "
                             f"pieces{extra} from {len(word_counts)} distinct words: "
                             f"{error}") from error
    seconds = time.perf_counter() - started
    logging.info("SentencePiece unigram trainer: %d pieces from %d distinct words in %.2fs",
                 vocab_size, len(word_counts), seconds)
    return _append_top_sentinels(_without_input_path(model.getvalue()), sentinels)


def _without_input_path(model: bytes) -> bytes:
    """The model with the temporary input path in its stored trainer settings replaced by
    the file's base name, so equal inputs give byte-identical models."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    inputs = [os.path.basename(path) for path in proto.trainer_spec.input]
    del proto.trainer_spec.input[:]
    proto.trainer_spec.input.extend(inputs)
    return proto.SerializeToString()


def tokenizer_config(lowercase: bool, strip_accents: bool,
                     special_tokens: Mapping[str, str] | None = None) -> dict:
    """The ``tokenizer.json`` content for a SentencePiece folder (CONTRACTS §2)."""
    return {"kind": "sentencepiece", "model_file": MODEL_FILE, "lowercase": bool(lowercase),
            "strip_accents": bool(strip_accents),
            "special_tokens": dict(SPECIAL_TOKENS if special_tokens is None
                                   else special_tokens)}


def write_files(output_dir: str, model: bytes) -> None:
    """Writes the serialized model as ``spm.model``."""
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, MODEL_FILE), "wb") as f:
        f.write(model)


def vocabulary_size(model: bytes) -> int:
    """Number of pieces in a serialized SentencePiece model."""
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=model).get_piece_size()
