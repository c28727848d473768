"""Causal language-model blocks in the GPT-2 manner (Radford et al. 2019, §2 and §2.2).

GPT-2 trains on a stream of byte-level-BPE tokens in which documents are delimited by the
``<|endoftext|>`` token, cut into fixed-length contexts. Here every document is followed by
the end-of-text id and the stream is cut into non-overlapping blocks of ``max_seq_length + 1``
ids: the model reads ``block[:-1]`` and predicts ``block[1:]`` (CONTRACTS §3).

Scale-out: the stream is built per shard (documents hashed into shards, each shard's
documents sorted by content hash, see ``executor.py``), so the output is the same however Beam
orders elements. The partial block left at the end of each shard is dropped and counted
(``dropped_tail_tokens``): at most ``max_seq_length`` tokens per shard.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import tensorflow as tf


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


def shard_examples(documents: Sequence[Sequence[int]], config: dict,
                   end_of_text_id: int) -> tuple:
    """Serialized blocks of one shard (documents in canonical order) and their counts."""
    packer = BlockPacker(int(config["max_seq_length"]) + 1, end_of_text_id)
    serialized = [to_tf_example(block).SerializeToString(deterministic=True)
                  for document in documents for block in packer.add(document)]
    stats = {"blocks": len(serialized), "tokens": packer.tokens,
             "dropped_tail_tokens": packer.dropped_tail_tokens}
    return serialized, stats
