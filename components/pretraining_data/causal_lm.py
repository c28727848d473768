"""Causal language-model blocks in the GPT-2 manner (Radford et al. 2019, §2 and §2.2).

GPT-2 trains on a stream of byte-level-BPE tokens in which documents are delimited by the
``<|endoftext|>`` token, cut into fixed-length contexts. Here every document is followed by
the end-of-text id and the stream is cut into non-overlapping blocks of ``max_seq_length + 1``
ids: the model reads ``block[:-1]`` and predicts ``block[1:]`` (CONTRACTS §3).

Scale-out: the stream is built per shard (documents hashed into shards, each shard's
documents sorted by content hash, see ``executor.py``), so the output is the same however Beam
orders elements. The partial block left at the end of each shard is dropped and counted
(``dropped_tail_tokens``): at most ``max_seq_length`` tokens per shard.

Registry record (``OBJECTIVE``): a document is one token stream (``registry.STREAM``); the
vocabulary state is the end-of-text id, recorded as ``end_of_text_id`` in
``pretraining_config.json``; records are ``input_ids[L+1]``; the tf.data converter gives
x = ``{"token_ids", "padding_mask"}`` [B, L], y = the next ids [B, L] and sample_weight [B, L]
(ones: packed blocks hold no padding); ``causal`` is true. The masked-LM option
``ngram_masking`` is refused (``whole_word_masking`` / ``dynamic_masking`` have no effect).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry

OBJECTIVE_NAME = "causal_lm"


class BlockPacker:
    """Appends documents (each followed by end-of-text) to a stream and cuts full blocks."""

    def __init__(self, block_length: int, end_of_text_id: int):
        self.block_length = block_length
        self.end_of_text_id = end_of_text_id
        self._pending: list = []
        self.documents = 0
        self.tokens = 0

    def add(self, document_ids: Sequence[int]) -> list:
        """Adds one document; returns the blocks it completes (often none)."""
        self._pending.extend(document_ids)
        self._pending.append(self.end_of_text_id)
        self.documents += 1
        self.tokens += len(document_ids) + 1
        full = len(self._pending) // self.block_length * self.block_length
        blocks = [self._pending[start:start + self.block_length]
                  for start in range(0, full, self.block_length)]
        del self._pending[:full]
        return blocks

    @property
    def dropped_tail_tokens(self) -> int:
        """Tokens of the incomplete last block (dropped once the shard ends)."""
        return len(self._pending)


def pack_documents(documents: Iterable[Sequence[int]], block_length: int,
                   end_of_text_id: int) -> tuple:
    """Packs documents into blocks; returns ``(blocks, dropped_tail_tokens)``."""
    packer = BlockPacker(block_length, end_of_text_id)
    blocks = [block for document in documents for block in packer.add(document)]
    return blocks, packer.dropped_tail_tokens


def to_tf_example(block: Sequence[int]) -> tf.train.Example:
    feature = tf.train.Feature(int64_list=tf.train.Int64List(value=block))
    return tf.train.Example(features=tf.train.Features(feature={"input_ids": feature}))


def shard_examples(documents: Sequence[Sequence[int]], end_of_text_id: int, config: dict,
                   seed_scope: Iterable = ()) -> tuple:
    """Serialized blocks of one shard (documents in canonical order) and their counts.

    Packing draws nothing at random, so ``seed_scope`` (the registry's common signature) is
    not used.
    """
    packer = BlockPacker(int(config["max_seq_length"]) + 1, end_of_text_id)
    serialized = [to_tf_example(block).SerializeToString(deterministic=True)
                  for document in documents for block in packer.add(document)]
    stats = {"blocks": len(serialized), "tokens": packer.tokens,
             "dropped_tail_tokens": packer.dropped_tail_tokens}
    return serialized, stats


# --------------------------------------------------------------------------- registry record


def end_of_text_id(tokenizer, tokenizer_config: dict) -> int:
    """The document delimiter: the ``end_of_text`` special token (GPT-2), else ``sep``."""
    special_tokens = tokenizer_config.get("special_tokens", {})
    token = special_tokens.get("end_of_text") or special_tokens.get("sep")
    if token is None:
        raise ValueError(f"{OBJECTIVE_NAME} needs an 'end_of_text' (or 'sep') special token")
    return int(tokenizer.token_to_id(token))


def check_config(config: dict) -> None:
    """Next-token blocks have no masked-LM targets, so n-gram masking cannot apply."""
    if config["ngram_masking"] > 0:
        raise ValueError(f"ngram_masking applies to the masked-LM objectives, not "
                         f"{OBJECTIVE_NAME!r}; set it to 0")


def feature_spec(config: dict) -> dict:
    """``input_ids[L+1]``: a block the model reads as ``[:-1]`` and predicts as ``[1:]``."""
    return {"input_ids": tf.io.FixedLenFeature([int(config["max_seq_length"]) + 1], tf.int64)}


def converter(config: dict):
    """The same converter for every config: blocks have one layout."""
    return causal_lm_batch


def causal_lm_batch(features: dict):
    """Block of L+1 ids -> model reads ``[:-1]`` and predicts ``[1:]`` (GPT-2 §2)."""
    ids = tf.cast(features["input_ids"], tf.int32)
    token_ids, next_ids = ids[:, :-1], ids[:, 1:]
    # Packed blocks hold no padding: every position is a real token.
    padding_mask = tf.ones_like(token_ids, dtype=tf.bool)
    x = {"token_ids": token_ids, "padding_mask": padding_mask}
    return x, next_ids, tf.cast(padding_mask, tf.float32)


def vocabulary_record(end_of_text: int) -> dict:
    """What ``pretraining_config.json`` records: ``end_of_text_id``."""
    return {"end_of_text_id": end_of_text}


OBJECTIVE = registry.register(registry.Objective(
    name=OBJECTIVE_NAME,
    document=registry.STREAM,
    vocabulary_state=end_of_text_id,
    shard_examples=shard_examples,
    feature_spec=feature_spec,
    converter=converter,
    causal=True,
    check_config=check_config,
    vocabulary_record=vocabulary_record,
    paper="Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2), "
          "§2 and §2.2 (byte-level BPE stream, <|endoftext|> between documents)"))
