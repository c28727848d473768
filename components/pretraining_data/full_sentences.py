"""RoBERTa pretraining blocks: masked LM on FULL-SENTENCES inputs, no NSP (objective ``mlm``).

Follows Liu et al. 2019, "RoBERTa" §4.2 ("Model input format and next sentence prediction"),
the FULL-SENTENCES format RoBERTa adopts: an input holds whole sentences taken one after the
other from one or more documents, at most ``max_seq_length`` tokens in all (512 in the paper);
at the end of a document it goes on with the next document, with one extra separator token
between the two. There is no next-sentence loss, so every input is one segment.

Packing (:func:`pack_full_sentences`): the sentences of the shard's documents are read in
order and appended to the current block while the block (``max_seq_length - 2`` tokens of
content) has room for the whole sentence; otherwise the block is closed and the sentence
starts the next one. The first sentence of a document that joins a block already holding text
is preceded by the ``sep`` token (the extra separator between documents); a block never
starts or ends with that separator. A sentence longer than a whole block is cut into
block-sized pieces (the only place a sentence is split). Each block is laid out as
``<cls> content <sep>`` with the vocabulary's ``cls``/``sep`` roles (``<s>``/``</s>`` for a
RoBERTa byte-level BPE, ``[CLS]``/``[SEP]`` for WordPiece), and the last block of a shard may
be shorter than the others (it is padded, not dropped).

Masking is BERT's (§3.1, shared ``masking.py``): ~``masked_lm_prob`` of the tokens other than
``cls``/``sep`` (document separators included) are chosen, 80/10/10; with ``dynamic_masking``
(RoBERTa §4.1) the records keep the unmasked ids and ``features.make_dataset`` masks them on
every read. ``dupe_factor`` rounds repeat the same blocks with fresh masks (static masking;
the reference's way of showing each sequence with several masks), drawn for a whole shard in
numpy batches (``masked_records.block_records``, the shard's seeded generator); under dynamic
masking they only repeat the records.

Scale-out: "contiguously" here means within one shard. The Beam pipeline hashes documents into
shards (see ``executor.py``) and sorts each shard's documents by content hash, so blocks cross
document boundaries between documents that are neighbours in that canonical order, not in the
source corpus order (which a distributed read does not preserve anyway). Whole sentences never
cross shards.

Registered as objective ``mlm`` (``OBJECTIVE``, built by ``mlm_objective.masked_lm_objective``
with no sentence-level task: one-segment records, ``segment_ids`` all zeros in tf.data).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import tensorflow as tf

from lmfactory.components.pretraining_data import registry
from lmfactory.components.pretraining_data.masked_records import block_records
from lmfactory.components.pretraining_data.masking import (
    BertVocabulary, MaskedLmPredictions, int_feature, masked_lm_features, masking_stats,
    padded)
from lmfactory.components.pretraining_data.mlm_objective import masked_lm_objective


class PackedBlocks(NamedTuple):
    blocks: list              # token-id lists, each <cls> content <sep>
    document_separators: int  # extra separators put between documents inside blocks
    split_sentences: int      # sentences longer than a block, cut into pieces


def pack_full_sentences(documents: Iterable[Sequence[Sequence[int]]], max_seq_length: int,
                        cls_id: int, sep_id: int) -> PackedBlocks:
    """FULL-SENTENCES blocks of ``documents`` (each a list of token-id sentences), in order."""
    capacity = max_seq_length - 2
    if capacity < 1:
        raise ValueError(f"max_seq_length must leave room for content, got {max_seq_length}")
    blocks, current = [], []
    separators = split = 0

    def close(content):
        if content:
            blocks.append([cls_id] + content + [sep_id])

    for document in documents:
        starts_document = True
        for sentence in document:
            sentence = list(sentence)
            if not sentence:
                continue
            separator = [sep_id] if starts_document and current else []
            starts_document = False
            if len(current) + len(separator) + len(sentence) <= capacity:
                separators += len(separator)
                current.extend(separator + sentence)
            elif len(sentence) <= capacity:
                close(current)
                current = sentence
            else:  # longer than a block: cut into block-sized pieces
                close(current)
                split += 1
                pieces = [sentence[start:start + capacity]
                          for start in range(0, len(sentence), capacity)]
                for piece in pieces[:-1]:
                    close(piece)
                current = pieces[-1]
    close(current)
    return PackedBlocks(blocks, separators, split)


def to_tf_example(tokens: Sequence[int], max_seq_length: int,
                  masked: MaskedLmPredictions | None, max_predictions_per_seq: int
                  ) -> tf.train.Example:
    """``input_ids[L]``, ``input_mask[L]`` and, with static masking, ``masked_lm_*[P]``."""
    input_ids = masked.output_tokens if masked is not None else tokens
    features = {
        "input_ids": int_feature(padded(input_ids, max_seq_length)),
        "input_mask": int_feature(padded([1] * len(tokens), max_seq_length)),
    }
    if masked is not None:
        features.update(masked_lm_features(masked, max_predictions_per_seq))
    return tf.train.Example(features=tf.train.Features(feature=features))


def shard_examples(documents: Sequence, vocab: BertVocabulary, config: dict,
                   seed_scope: Iterable) -> tuple:
    """All serialized blocks of one shard (documents in canonical order), shuffled, and
    their counts: each block ``dupe_factor`` times, masked and serialized in batches with
    numpy (``masked_records.block_records``)."""
    seed_scope = tuple(seed_scope)
    dupe_factor = int(config["dupe_factor"])
    packed = pack_full_sentences(documents, int(config["max_seq_length"]), vocab.cls_id,
                                 vocab.sep_id)
    content = sum(sum(1 for t in block if t not in (vocab.cls_id, vocab.sep_id))
                  for block in packed.blocks)
    stats = {"instances": len(packed.blocks) * dupe_factor, "blocks": len(packed.blocks),
             "tokens": content * dupe_factor,
             "document_separators": packed.document_separators,
             "split_sentences": packed.split_sentences}
    stats.update(masking_stats(int(config["ngram_masking"])))
    serialized = block_records(packed.blocks, dupe_factor, vocab, config, seed_scope, stats)
    return serialized, stats


OBJECTIVE = registry.register(masked_lm_objective(
    "mlm", shard_examples, None,
    paper="Liu et al. 2019, RoBERTa: A Robustly Optimized BERT Pretraining Approach, §4.1 "
          "(dynamic masking), §4.2 (FULL-SENTENCES, no NSP)"))
