"""Entity-typing data built from KG-linked text (ERNIE §4.1 fine-tunes on FIGER
and Open Entity: a sentence, one marked entity mention, the entity's fine-grained types,
several at once).

Sentences of the given text sources are linked to the knowledge graph (`EntityMatcher`, the
rules of the pipeline's EntityLinker, as relation_data.py); each linked mention of an
entity (its first in the sentence) is an example: the sentence, the mention as it appears
in it, and the entity's types. FB15k-237 has no type triples, so an entity's types come
from the relations it heads (train triples): a Freebase relation path names its subject's
type, ``/domain/type/property`` (``/people/person/nationality`` -> ``person``,
``/film/film/genre`` -> ``film``: the component before the property, `relation_type`;
the domains /common, /base and /user hold no entity types and are left out). This is
distant supervision, as FIGER's labels are (Ling & Weld 2012 label mentions with their
entity's Freebase types):
the label is what the graph says of the entity, not what the sentence says. The ``top_k``
types held by the most linked entities are kept (multi-label: an example holds every kept
type of its entity). Examples are split by entity (hashed), so no eval entity is in train,
and at most ``max_per_entity`` examples of one entity are kept (frequent entities would
otherwise fill the data).

Everything left out is counted (``counts.json``): empty lines and headings, non-UTF-8 lines,
malformed SQuAD paragraphs, sentences too long or without a linked entity, repeated
mentions of an entity in a sentence, mentions that are not the first free-standing
occurrence of their string (the serving model marks a mention by string,
models/tasks/relation_marking.py), entities heading no relation or none of the kept types,
mentions over the per-entity cap, duplicates; relation names without a type path.

Writes ``train.tsv`` / ``eval.tsv`` (header ``text mention types``; the types separated by
spaces, most frequent first), ``types.txt`` (the kept types, most frequent first) and
``counts.json``. Usage:

    python -m lmfactory.components.knowledge_graph.typing_data OUT_DIR \\
        [--top-k 10] [--eval-fraction 0.2] [--max-per-entity 20]
"""

from __future__ import annotations

import argparse
import collections
import json
from typing import Iterable

from lmfactory.components.knowledge_graph.graph import build_graph
from lmfactory.components.knowledge_graph.linked_text import (
    marked_at, resolve_inputs, sentences, split_of, write_json, write_splits)
from lmfactory.components.knowledge_graph.linking import EntityMatcher
from lmfactory.models.tasks.relation_marking import DEFAULT_ENTITY_MARKER, mark_entity

COLUMNS = ("text", "mention", "types")


# Freebase domains whose types are no entity types in FIGER's sense: /common (``topic``,
# schema metadata every entity has), /base and /user (user-contributed schemas).
EXCLUDED_DOMAINS = ("common", "base", "user")


def relation_type(relation: str) -> str | None:
    """The type of a relation's subject from its Freebase path (module docstring); None for
    a name that is not a path of at least ``/domain/type/property``."""
    first = relation.split(".")[0].strip("/").split("/")
    if len(first) < 3 or not all(part and part.replace("_", "").isalnum() for part in first):
        return None
    return first[-2]


def entity_types(graph, counts: collections.Counter,
                 excluded_domains=EXCLUDED_DOMAINS) -> dict:
    """``{entity index: set of types}`` from the train triples each entity heads."""
    type_of, types = {}, collections.defaultdict(set)
    for index, name in enumerate(graph.relations):
        type_of[index] = relation_type(name)
        if type_of[index] is None:
            counts["relations_without_type"] += 1
        elif name.strip("/").split("/")[0] in excluded_domains:
            type_of[index] = None
            counts["relations_of_excluded_domains"] += 1
    for head, relation, _tail in graph.splits["train"]:
        found = type_of[int(relation)]
        if found is not None:
            types[int(head)].add(found)
    return types


def candidates(graph, sentence_iter, max_words: int, counts, marker: str, types: dict):
    """(sentence, mention, entity index) of every first linked mention of an entity that
    heads a typed relation and that string marking finds at its own span."""
    matcher = EntityMatcher(graph)
    for sentence in sentence_iter:
        counts["sentences"] += 1
        if len(sentence.split()) > max_words:
            counts["sentences_too_long"] += 1
            continue
        mentions = matcher.link(sentence)
        if not mentions:
            counts["sentences_without_entities"] += 1
            continue
        seen = set()
        for found in mentions:
            if found.entity_index in seen:
                counts["repeated_mentions_in_sentence"] += 1
                continue
            seen.add(found.entity_index)
            mention = sentence[found.start_char:found.end_char]
            if mark_entity(sentence, mention, marker) != marked_at(
                    sentence, [(found.start_char, found.end_char, marker)]):
                counts["mention_not_first_occurrence"] += 1
                continue
            if not types.get(found.entity_index):
                counts["entity_heads_no_typed_relation"] += 1
                continue
            yield sentence, mention, found.entity_index


def build(output_dir: str, data_dir: str | None = None, graph_section: dict | None = None,
          sources: Iterable[dict] | None = None, top_k: int = 10,
          eval_fraction: float = 0.2, max_words: int = 40, seed: int = 0,
          max_per_entity: int = 20, marker: str = DEFAULT_ENTITY_MARKER) -> dict:
    """Builds the data (see the module docstring) into ``output_dir``; returns the counts.
    The graph and the text come from ``data_dir`` (`linked_text.default_graph` /
    `default_sources`) unless given."""
    graph_section, sources = resolve_inputs(data_dir, graph_section, sources)
    if top_k < 1 or max_per_entity < 1:
        raise ValueError(f"top_k and max_per_entity must be >= 1, got {top_k}, "
                         f"{max_per_entity}")
    graph = build_graph(graph_section)
    counts: collections.Counter = collections.Counter()
    types = entity_types(graph, counts)
    found = list(candidates(graph, sentences(sources, counts), max_words, counts, marker,
                            types))
    frequency = collections.Counter(t for entity in {e for *_, e in found}
                                    for t in types[entity])
    kept = [t for t, _ in sorted(frequency.items(), key=lambda item: (-item[1], item[0]))
            ][:top_k]
    rank = {name: i for i, name in enumerate(kept)}
    splits: dict = {"train": [], "eval": []}
    entities: dict = {"train": set(), "eval": set()}
    seen, per_entity = set(), collections.Counter()
    for sentence, mention, entity in found:
        label = sorted(types[entity] & rank.keys(), key=rank.get)
        if not label:
            counts["entity_without_kept_type"] += 1
            continue
        row = (sentence, mention, " ".join(label))
        if row in seen:
            counts["duplicates"] += 1
            continue
        if per_entity[entity] >= max_per_entity:
            counts["over_entity_cap"] += 1
            continue
        seen.add(row)
        per_entity[entity] += 1
        split = split_of((graph.entities[entity],), eval_fraction, seed)
        splits[split].append(row)
        entities[split].add(entity)
    write_splits(output_dir, COLUMNS, splits)
    result = {"examples": {split: len(rows) for split, rows in splits.items()},
              "entities": {split: len(found_in) for split, found_in in entities.items()},
              "per_type": {split: dict(collections.Counter(
                  t for r in rows for t in r[2].split())) for split, rows in splits.items()},
              "types_per_example": {split: round(sum(len(r[2].split()) for r in rows)
                                                 / max(1, len(rows)), 3)
                                    for split, rows in splits.items()},
              "types": kept, "skipped": dict(sorted(counts.items())), "marker": marker}
    with open(f"{output_dir}/types.txt", "w", encoding="utf-8") as out:
        out.write("".join(f"{name}\n" for name in kept))
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
    parser.add_argument("--max-per-entity", type=int, default=20)
    args = parser.parse_args(argv)
    result = build(args.output_dir, args.data_dir, top_k=args.top_k,
                   eval_fraction=args.eval_fraction,
                   max_words=args.max_words, max_per_entity=args.max_per_entity)
    print(json.dumps({k: result[k] for k in ("examples", "entities", "types", "skipped")},
                     indent=1))


if __name__ == "__main__":
    main()
