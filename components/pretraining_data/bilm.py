"""Bidirectional language-model windows (Peters et al. 2018 §3.1; the biLM of §3.4 trained
on sentences framed by ``<S>`` / ``</S>``, as Jozefowicz et al. 2016 §4 do on the 1B Word
Benchmark).

Every sentence of a document becomes ``[<S>] ids [</S>]`` (the vocabulary's ``cls`` and
``sep`` tokens); the sentences of a shard's documents, in canonical order, form one stream,
cut into windows of N = ``max_seq_length`` ids with a stride of N - 1 (consecutive windows
share one id). In a window the forward LM predicts ids 1..N-1 from their left context (§3.1:
p(t_k | t_1..t_{k-1})) and the backward LM ids 0..N-2 from their right context
(p(t_k | t_{k+1}..t_N)); with that stride every id of the stream but the first is a forward
target exactly once, and every id but the last a backward target exactly once. The
incomplete window at the end of a shard is dropped and counted (``dropped_tail_tokens``).

Character ids. The biLM reads tokens through their characters (§3.4), so a record also
carries the character ids of its N tokens (`models/tokenizers/word_characters.py`: UTF-8
bytes + 1, begin/end-of-word, padding, the boundary tokens' own characters; 50 per token,
the original's width), computed once per worker from the vocabulary's word strings.
Carrying them in the record (rather than computing them in the tf.data converter) keeps the
converter a pure function of the pretraining config, which is all the registry gives it (it
has no vocabulary), and makes records self-contained for the trainer and evaluator. A word
outside the vocabulary is read as its ``unk`` token's characters, since the corpus reaches
this stage as ids (served text keeps its own spelling: serving computes character ids from
the raw words).

Registry record (``OBJECTIVE``): documents as sentences (``registry.SENTENCES``); records
``token_ids[N]`` and ``character_ids[N*50]``; the converter gives x = ``{"token_ids" [B, N],
"character_ids" [B, N, 50], "padding_mask" [B, N]}``, y = the token ids (what the two LMs
predict, each position from either side) and sample_weight = ones [B, N] (windows hold no
padding). Not ``causal``: the trained model is bidirectional and does not generate.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.models.tokenizers.word_characters import (MAX_CHARACTERS_PER_TOKEN,
                                                         word_character_ids)

OBJECTIVE_NAME = "bilm"
CHARACTERS = MAX_CHARACTERS_PER_TOKEN


class BilmVocabulary:
    """What building windows needs from the vocabulary: the boundary ids and the character
    ids of every word [V, 50]."""

    def __init__(self, begin_id: int, end_id: int, character_table: np.ndarray):
        self.begin_id = int(begin_id)
        self.end_id = int(end_id)
        self.character_table = character_table


def vocabulary_state(tokenizer, tokenizer_config: dict) -> BilmVocabulary:
    """The ``cls`` / ``sep`` tokens frame sentences (``<S>`` / ``</S>``); raises when the
    vocabulary reserves neither."""
    specials = tokenizer_config.get("special_tokens", {})
    missing = [role for role in ("cls", "sep") if role not in specials]
    if missing:
        raise ValueError(f"{OBJECTIVE_NAME} frames sentences with the vocabulary's 'cls' and "
                         f"'sep' tokens (<S>, </S>); it reserves no {missing}")
    words = [str(word) for word in tokenizer.get_vocabulary()]
    table = word_character_ids(tf.constant(words, tf.string), CHARACTERS,
                               begin_sentence=specials["cls"],
                               end_sentence=specials["sep"]).numpy().astype(np.int64)
    return BilmVocabulary(tokenizer.token_to_id(specials["cls"]),
                          tokenizer.token_to_id(specials["sep"]), table)


def sentence_stream(documents: Iterable[Sequence[Sequence[int]]], begin_id: int,
                    end_id: int) -> list:
    """Every sentence of every document framed by ``begin_id`` / ``end_id``, in order."""
    stream = []
    for document in documents:
        for sentence in document:
            stream.append(begin_id)
            stream.extend(int(i) for i in sentence)
            stream.append(end_id)
    return stream


def windows(stream: Sequence[int], length: int) -> tuple:
    """Windows of ``length`` ids at a stride of ``length - 1``; returns ``(windows,
    dropped_tail_tokens)`` (the ids after the last window)."""
    stride = length - 1
    count = (len(stream) - length) // stride + 1 if len(stream) >= length else 0
    cut = [list(stream[index * stride:index * stride + length]) for index in range(count)]
    used = (count - 1) * stride + length if count else 0
    return cut, len(stream) - used


def to_tf_example(window: Sequence[int], character_table: np.ndarray) -> tf.train.Example:
    characters = character_table[np.asarray(window)].reshape(-1)
    feature = {
        "token_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=window)),
        "character_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=characters)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def shard_examples(documents, state: BilmVocabulary, config: dict, seed_scope=()) -> tuple:
    """Serialized windows of one shard (documents in canonical order) and their counts.
    Nothing is drawn at random, so ``seed_scope`` is not used."""
    stream = sentence_stream(documents, state.begin_id, state.end_id)
    cut, dropped = windows(stream, int(config["max_seq_length"]))
    serialized = [to_tf_example(window, state.character_table).SerializeToString(
        deterministic=True) for window in cut]
    return serialized, {"windows": len(serialized), "tokens": len(stream),
                        "dropped_tail_tokens": dropped}


def check_config(config: dict) -> None:
    """Windows have no masked-LM targets."""
    if config["ngram_masking"] > 0:
        raise ValueError(f"ngram_masking applies to the masked-LM objectives, not "
                         f"{OBJECTIVE_NAME!r}; set it to 0")


def feature_spec(config: dict) -> dict:
    length = int(config["max_seq_length"])
    return {"token_ids": tf.io.FixedLenFeature([length], tf.int64),
            "character_ids": tf.io.FixedLenFeature([length * CHARACTERS], tf.int64)}


def converter(config: dict):
    length = int(config["max_seq_length"])

    def bilm_batch(features: dict):
        ids = tf.cast(features["token_ids"], tf.int32)
        characters = tf.reshape(tf.cast(features["character_ids"], tf.int32),
                                [-1, length, CHARACTERS])
        padding_mask = tf.ones_like(ids, dtype=tf.bool)
        x = {"token_ids": ids, "character_ids": characters, "padding_mask": padding_mask}
        return x, ids, tf.cast(padding_mask, tf.float32)

    return bilm_batch


def vocabulary_record(state: BilmVocabulary) -> dict:
    return {"begin_sentence_id": state.begin_id, "end_sentence_id": state.end_id,
            "max_characters_per_token": CHARACTERS}


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.SENTENCES,
    vocabulary_state=vocabulary_state,
    shard_examples=shard_examples,
    feature_spec=feature_spec,
    converter=converter,
    causal=False,
    check_config=check_config,
    vocabulary_record=vocabulary_record,
    paper="Peters et al. 2018, Deep contextualized word representations (ELMo), §3.1 "
          "(forward + backward LM log likelihood) and §3.4 (character inputs)"))
