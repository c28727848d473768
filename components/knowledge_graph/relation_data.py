"""Relation-classification data built from KG-linked text (ERNIE §4.4 fine-tunes
on FewRel and TACRED, sentences whose two marked entities hold a relation).

Sentences of the given text sources are linked to the knowledge graph (`EntityMatcher`, the
rules of the pipeline's EntityLinker); each ordered pair of two different linked entities
that a train triple (head, relation, tail) of the graph connects is an example: the
sentence, the head and tail mentions as they appear in it, and the relation. This is
distant supervision (Mintz et al. 2009): the label is what the graph says of the pair,
not what the sentence says. Only the ``top_k`` most frequent relations are kept; a pair
the graph links by two of them is ambiguous and dropped. Examples are split by entity pair
(unordered, hashed), so the eval split's pairs never occur in train.

Everything left out is counted (``counts.json``): empty lines and headings, sentences too
long or without two entities, pairs whose relation is outside the top k, ambiguous pairs,
mentions that are not the first free-standing occurrence of their string (the serving model
marks mentions by string, models/tasks/relation_marking.py), duplicates.

Writes ``train.tsv`` / ``eval.tsv`` (header ``text head tail relation``), ``relations.txt``
(the kept relations, most frequent first) and ``counts.json``. Usage:

    python -m lmfactory.components.knowledge_graph.relation_data OUT_DIR \\
        [--top-k 10] [--eval-fraction 0.2]   (sources and graph: FB15k-237 defaults below)
"""

from __future__ import annotations

import argparse
import collections
import json
from typing import Iterable

from lmfactory.components.knowledge_graph.graph import build_graph
from lmfactory.components.knowledge_graph.linked_text import (  # noqa: F401  (re-exported)
    SOURCE_FORMATS, default_sources, marked_at, paragraphs, resolve_inputs, sentences,
    split_of, write_json, write_splits)
from lmfactory.components.knowledge_graph.linking import EntityMatcher
from lmfactory.models.tasks.relation_marking import DEFAULT_MARKERS, mark_mentions

COLUMNS = ("text", "head", "tail", "relation")


def candidates(graph, sentence_iter, max_words: int, counts, markers: dict):
    """(sentence, head mention, tail mention, relation ids, head id, tail id) of every
    ordered pair of linked entities a train triple connects."""
    matcher = EntityMatcher(graph)
    relations_of = collections.defaultdict(set)
    for head, relation, tail in graph.splits["train"]:
        relations_of[(int(head), int(tail))].add(int(relation))
    for sentence in sentence_iter:
        counts["sentences"] += 1
        if len(sentence.split()) > max_words:
            counts["sentences_too_long"] += 1
            continue
        mentions = matcher.link(sentence)
        if len({m.entity_index for m in mentions}) < 2:
            counts["sentences_without_two_entities"] += 1
            continue
        first = {}  # an entity's first mention in the sentence stands for it
        for mention in mentions:
            first.setdefault(mention.entity_index, mention)
        found = False
        for a in first.values():
            for b in first.values():
                rels = relations_of.get((a.entity_index, b.entity_index))
                if a.entity_index == b.entity_index or not rels:
                    continue
                found = True
                head = sentence[a.start_char:a.end_char]
                tail = sentence[b.start_char:b.end_char]
                spans = [(a.start_char, a.end_char, markers["head_marker"]),
                         (b.start_char, b.end_char, markers["tail_marker"])]
                if mark_mentions(sentence, head, tail, **markers) != marked_at(sentence,
                                                                                spans):
                    counts["mention_not_first_occurrence"] += 1
                    continue
                yield sentence, head, tail, rels, a.entity_index, b.entity_index
        if not found:
            counts["sentences_without_related_pair"] += 1


def build(output_dir: str, data_dir: str | None = None, graph_section: dict | None = None,
          sources: Iterable[dict] | None = None, top_k: int = 10,
          eval_fraction: float = 0.2, max_words: int = 40, seed: int = 0,
          markers: dict | None = None) -> dict:
    """Builds the data (see the module docstring) into ``output_dir``; returns the counts.
    The graph and the text come from ``data_dir`` (`linked_text.default_graph` /
    `default_sources`) unless given."""
    graph_section, sources = resolve_inputs(data_dir, graph_section, sources)
    markers = dict(markers or DEFAULT_MARKERS)
    graph = build_graph(graph_section)
    counts: collections.Counter = collections.Counter()
    found = list(candidates(graph, sentences(sources, counts), max_words, counts, markers))
    frequency = collections.Counter(r for *_, rels, _h, _t in found for r in rels)
    kept = [r for r, _ in sorted(frequency.items(), key=lambda item: (-item[1], item[0]))
            ][:top_k]
    kept_set = set(kept)
    splits: dict = {"train": [], "eval": []}
    seen = set()
    for sentence, head, tail, rels, head_id, tail_id in found:
        label = rels & kept_set
        if not label:
            counts["relation_outside_top_k"] += 1
            continue
        if len(label) > 1:
            counts["ambiguous_pairs"] += 1
            continue
        row = (sentence, head, tail, graph.relations[label.pop()])
        if row in seen:
            counts["duplicates"] += 1
            continue
        seen.add(row)
        split = split_of((graph.entities[head_id], graph.entities[tail_id]),
                         eval_fraction, seed)
        splits[split].append(row)
    write_splits(output_dir, COLUMNS, splits)
    result = {"examples": {split: len(rows) for split, rows in splits.items()},
              "pairs": {split: len({tuple(sorted(r[1:3])) for r in rows})
                        for split, rows in splits.items()},
              "per_relation": {split: dict(collections.Counter(r[3] for r in rows))
                               for split, rows in splits.items()},
              "relations": [graph.relations[r] for r in kept],
              "skipped": dict(sorted(counts.items())), "markers": markers}
    with open(f"{output_dir}/relations.txt", "w", encoding="utf-8") as out:
        out.write("".join(f"{graph.relations[r]}\n" for r in kept))
    write_json(output_dir, "counts.json", result)
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir")
    parser.add_argument("--data-dir", required=True,
                        help="the folder holding wikitext-2/, squad/ and kg/FB15k-237/")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--eval-fraction", type=float, default=0.2)
    parser.add_argument("--max-words", type=int, default=40)
    args = parser.parse_args(argv)
    result = build(args.output_dir, args.data_dir, top_k=args.top_k,
                   eval_fraction=args.eval_fraction,
                   max_words=args.max_words)
    print(json.dumps({k: result[k] for k in ("examples", "pairs", "skipped")}, indent=1))


if __name__ == "__main__":
    main()
