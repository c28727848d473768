"""Corpus documents annotated with knowledge-graph entities -> sentences of (token ids,
entity tags), for objectives whose ``document`` format is ``LINKED_SENTENCES``
(registry.py; ERNIE's ``ernie_dea``).

The corpus Examples come from the EntityLinker (components/knowledge_graph): besides
``text`` they hold ``text_entity_starts`` / ``text_entity_ends`` (code-point offsets into the
decoded text, end exclusive) and ``text_entity_ids`` (int64 entity indices). A document's
sentences are its non-blank lines, stripped (CONTRACTS §1, as ``executor.document_sentences``);
each sentence is cut at its mentions' boundaries and the pieces are tokenized separately:
for a tokenizer that splits words at spaces and punctuation first (BERT's WordPiece) the
pieces' tokens are the sentence's tokens, and a mention's entity is aligned to the first
token of its piece (Zhang et al. 2019 §3.4: "align each entity to the first token of its
mention"; the same rule as `models/ernie/ernie_preprocessor.align_entities` at serving).

An entity tag is the entity index + 1 on a mention's first token, 0 on every other token.
What cannot be aligned is counted, never dropped silently: a mention crossing a line break
(``mentions_across_lines``), overlapping an earlier one (``overlapping_mentions``) or out of
the text (``mentions_out_of_range``), or whose text tokenizes to nothing
(``mentions_without_tokens``).
"""

from __future__ import annotations

import array

import tensorflow as tf

TEXT = "text"
STARTS, ENDS, IDS = (f"{TEXT}_entity_starts", f"{TEXT}_entity_ends", f"{TEXT}_entity_ids")


def read_linked_document(example: tf.train.Example):
    """``(text bytes, [(start, end, entity), ...])`` of a linked corpus Example; raises a
    one-line ValueError when the Example has no entity features (not linked)."""
    features = example.features.feature
    missing = [name for name in (STARTS, ENDS, IDS) if name not in features]
    if missing:
        raise ValueError(f"This objective needs entity-linked corpus Examples (the "
                         f"EntityLinker's {STARTS} / {ENDS} / {IDS}); missing {missing}")
    values = features[TEXT].bytes_list.value
    text = values[0] if values else b""
    mentions = list(zip(features[STARTS].int64_list.value, features[ENDS].int64_list.value,
                        features[IDS].int64_list.value))
    return text, mentions


def sentence_pieces(text: bytes, mentions) -> tuple[list, dict]:
    """The document's sentences as ``[(pieces, entities), ...]``: ``pieces`` the sentence cut
    at its mentions (str), ``entities`` per piece the entity index or -1; plus the counts of
    mentions that could not be placed (module docstring)."""
    decoded = text.decode("utf-8")
    counts = {"mentions_across_lines": 0, "overlapping_mentions": 0,
              "mentions_out_of_range": 0}
    ordered = sorted((int(s), int(e), int(i)) for s, e, i in mentions)
    sentences, offset, m = [], 0, 0
    for line in decoded.split("\n"):
        stripped = line.strip()
        begin = offset + (len(line) - len(line.lstrip()))
        end = begin + len(stripped)
        line_end = offset + len(line)
        local = []
        while m < len(ordered) and ordered[m][0] < line_end + 1:
            start, stop, entity = ordered[m]
            m += 1
            if start < 0 or stop > len(decoded) or stop <= start:
                counts["mentions_out_of_range"] += 1
            elif stop > line_end:
                counts["mentions_across_lines"] += 1
            elif local and start < local[-1][1]:
                counts["overlapping_mentions"] += 1
            elif begin <= start and stop <= end:
                local.append((start - begin, stop - begin, entity))
            else:
                counts["mentions_out_of_range"] += 1
        offset = line_end + 1
        if not stripped:
            continue
        pieces, entities, position = [], [], 0
        for start, stop, entity in local:
            pieces += [stripped[position:start], stripped[start:stop]]
            entities += [-1, entity]
            position = stop
        pieces.append(stripped[position:])
        entities.append(-1)
        sentences.append((pieces, entities))
    counts["mentions_out_of_range"] += len(ordered) - m
    return sentences, counts


def assemble(sentences, piece_tokens) -> tuple[list, dict]:
    """Sentences of ``(token ids, entity tags)`` arrays from `sentence_pieces` output and the
    token ids of every piece in order (``piece_tokens``, one sequence per piece); sentences
    without tokens are left out. Returns ``(sentences, counts)``."""
    result, counts, k = [], {"mentions_without_tokens": 0, "linked_tokens": 0}, 0
    for pieces, entities in sentences:
        tokens, tags = array.array("i"), array.array("i")
        for entity in entities:
            ids = piece_tokens[k]
            k += 1
            if entity >= 0:
                if len(ids):
                    counts["linked_tokens"] += 1
                else:
                    counts["mentions_without_tokens"] += 1
            tokens.extend(ids)
            tags.extend([entity + 1 if entity >= 0 and j == 0 else 0 for j in range(len(ids))])
        del pieces
        if len(tokens):
            result.append((tokens, tags))
    return result, counts
