"""`KnowledgeGraph`: entities (with their surface forms), relations and index triples per
split, built from the recipe's ``knowledge_graph`` section and saved as the ``KnowledgeGraph``
artifact folder (CONTRACTS "Knowledge graphs"):

* ``entities.tsv``: ``index<TAB>id<TAB>surface forms joined by "|"`` per line;
* ``relations.tsv``: ``index<TAB>id``;
* ``triples-<split>.npy``: int32 [N, 3] (head, relation, tail indices);
* ``counts.json``: per file and split what was read and what was dropped, and totals
  (also ``entities_without_label`` and ``surface_forms_skipped``: forms too short, without a
  letter or a stop word, settings.LINKING_DEFAULTS, are not used for linking);
* ``graph.json``: the format, the split names and the linking settings.

Entities and relations are those of the train split. Entities are ordered by their number of
train triples (most first, then by id), so the entity linker's rule "a shared surface form
links to the lowest index" picks the most connected entity. A valid/test triple naming an
entity or relation that train lacks cannot be scored by an embedding model
(``unknown_entity_triples``, dropped, as in the usual filtered evaluation protocol); a
triple repeated within a split is kept once (``duplicate_triples``).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import logging
import os
from typing import Mapping

import numpy as np
import tensorflow as tf

from lmfactory.components.knowledge_graph.settings import LINKING_DEFAULTS as DEFAULT_LINKING
from lmfactory.components.knowledge_graph.settings import STOPWORDS
from lmfactory.components.knowledge_graph.triples import conceptnet_label, read_triples

ENTITIES_FILE, RELATIONS_FILE = "entities.tsv", "relations.tsv"
COUNTS_FILE, GRAPH_FILE = "counts.json", "graph.json"
# Totals summed over files / splits into counts.json's top level.
TOTALS = ("malformed_lines", "blank_lines", "skipped_non_english", "skipped_non_concept",
          "duplicate_triples", "unknown_entity_triples")


def triples_file(split: str) -> str:
    return f"triples-{split}.npy"


@dataclasses.dataclass
class KnowledgeGraph:
    """Attributes:
        entities: entity ids as in the triple files; the list index is the entity index.
        labels: per entity, its surface forms (lowercased when ``linking["lowercase"]``).
        relations: relation ids; the list index is the relation index.
        splits: split name -> int32 [N, 3] array of (head, relation, tail) indices.
        counts: what was read and dropped (module docstring).
        linking: the entity linker's settings (``max_ngram``, ``lowercase``).
    """

    entities: list
    labels: list
    relations: list
    splits: dict
    counts: dict = dataclasses.field(default_factory=dict)
    linking: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_LINKING))

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def entity_index(self) -> dict:
        """Entity id -> index."""
        return {entity: index for index, entity in enumerate(self.entities)}

    def all_triples(self) -> np.ndarray:
        """Every split's triples together (the filter of the filtered ranking protocol)."""
        arrays = [array for array in self.splits.values() if len(array)]
        return np.concatenate(arrays) if arrays else np.zeros((0, 3), np.int32)

    def save(self, uri: str) -> None:
        tf.io.gfile.makedirs(uri)
        with tf.io.gfile.GFile(os.path.join(uri, ENTITIES_FILE), "w") as f:
            for index, (entity, forms) in enumerate(zip(self.entities, self.labels)):
                f.write(f"{index}\t{entity}\t{'|'.join(forms)}\n")
        with tf.io.gfile.GFile(os.path.join(uri, RELATIONS_FILE), "w") as f:
            for index, relation in enumerate(self.relations):
                f.write(f"{index}\t{relation}\n")
        for split, array in self.splits.items():
            buffer = io.BytesIO()
            np.save(buffer, np.asarray(array, np.int32).reshape(-1, 3))
            with tf.io.gfile.GFile(os.path.join(uri, triples_file(split)), "wb") as f:
                f.write(buffer.getvalue())
        _write_json(os.path.join(uri, COUNTS_FILE), self.counts)
        _write_json(os.path.join(uri, GRAPH_FILE),
                    {"splits": list(self.splits), "linking": self.linking,
                     "num_entities": self.num_entities, "num_relations": self.num_relations})

    @classmethod
    def load(cls, uri: str) -> "KnowledgeGraph":
        info = _read_json(os.path.join(uri, GRAPH_FILE))
        entities, labels = [], []
        for line in _read_lines(os.path.join(uri, ENTITIES_FILE)):
            _, entity, forms = line.split("\t")
            entities.append(entity)
            labels.append(forms.split("|") if forms else [])
        relations = [line.split("\t")[1] for line in _read_lines(os.path.join(uri,
                                                                              RELATIONS_FILE))]
        splits = {}
        for split in info["splits"]:
            with tf.io.gfile.GFile(os.path.join(uri, triples_file(split)), "rb") as f:
                splits[split] = np.load(io.BytesIO(f.read())).astype(np.int32)
        return cls(entities, labels, relations, splits,
                   _read_json(os.path.join(uri, COUNTS_FILE)), dict(info["linking"]))


def add_linking_files(vocab_dir: str, graph_uri: str, destination: str) -> None:
    """Copies the vocabulary folder ``vocab_dir`` to ``destination`` and adds the graph's
    ``entities.tsv`` and a ``linking.json`` with its linking settings (the files
    `lmfactory.models.knowledge.read_linking_vocabulary` reads)."""
    from lmfactory.models.knowledge import ENTITIES_FILE as VOCAB_ENTITIES, LINKING_FILE

    if tf.io.gfile.exists(destination):
        tf.io.gfile.rmtree(destination)
    tf.io.gfile.makedirs(destination)
    for name in tf.io.gfile.listdir(vocab_dir):
        source = os.path.join(vocab_dir, name.rstrip("/"))
        if not tf.io.gfile.isdir(source):
            tf.io.gfile.copy(source, os.path.join(destination, name), overwrite=True)
    tf.io.gfile.copy(os.path.join(graph_uri, ENTITIES_FILE),
                     os.path.join(destination, VOCAB_ENTITIES), overwrite=True)
    linking = _read_json(os.path.join(graph_uri, GRAPH_FILE))["linking"]
    _write_json(os.path.join(destination, LINKING_FILE), linking)


def _write_json(path: str, value) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)


def _read_json(path: str):
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def _read_lines(path: str) -> list[str]:
    with tf.io.gfile.GFile(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def _clean_form(form) -> str:
    """A surface form as entities.tsv can hold it (no "|", tab or newline inside)."""
    text = str(form)
    for char in "|\t\r\n":
        text = text.replace(char, " ")
    return " ".join(text.split())


def read_labels(path: str) -> dict[str, list[str]]:
    """Entity id -> surface forms from ``path``: a JSON object (FB15k-237's
    ``entity2wikidata.json``: id -> {"label": ..., "alternatives" / "alias": [...]}, or id ->
    a string or a list of strings) or a TSV file (``id<TAB>form[<TAB>form...]``)."""
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"knowledge graph labels file {path} does not exist")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    if path.endswith(".json"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"knowledge graph labels file {path} is not valid JSON: "
                             f"{error}") from None
        labels = {}
        for entity, value in data.items():
            if isinstance(value, dict):
                forms = [value.get("label")]
                for key in ("alternatives", "alias", "aliases"):
                    extra = value.get(key) or []
                    forms.extend([extra] if isinstance(extra, str) else extra)
            else:
                forms = [value] if isinstance(value, str) else list(value or [])
            labels[entity] = [form for form in forms if isinstance(form, str)]
        return labels
    labels = {}
    for line in raw.splitlines():
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0]:
            labels.setdefault(fields[0], []).extend(fields[1:])
    return labels


def _linkable(form: str, linking: Mapping) -> bool:
    """Whether a surface form is used for linking (settings.LINKING_DEFAULTS): a letter in
    it, at least ``min_label_chars`` characters besides spaces, not a stop word."""
    if not any(char.isalpha() for char in form):
        return False
    if len(form.replace(" ", "")) < linking.get("min_label_chars", 1):
        return False
    return not (linking.get("skip_stopwords") and form.lower() in STOPWORDS)


def _surface_forms(entities, fmt: str, labels_path: str | None, linking: Mapping, counts):
    """Per entity its cleaned, de-duplicated surface forms that can be linked (the skipped
    ones are counted as ``surface_forms_skipped``)."""
    lowercase = linking["lowercase"]
    given = read_labels(labels_path) if labels_path else None
    without = skipped = 0
    result = []
    for entity in entities:
        if given is not None:
            forms = list(given.get(entity, []))
            if fmt == "conceptnet":
                forms.insert(0, conceptnet_label(entity))
            if not forms:
                without += 1
        else:
            forms = [conceptnet_label(entity) if fmt == "conceptnet" else entity]
        cleaned = [_clean_form(form) for form in forms]
        if lowercase:
            cleaned = [form.lower() for form in cleaned]
        kept = [form for form in dict.fromkeys(cleaned) if form and _linkable(form, linking)]
        skipped += len(set(form for form in cleaned if form)) - len(kept)
        result.append(kept)
    counts["entities_without_label"] = without
    counts["surface_forms_skipped"] = skipped
    if without:
        logging.warning("%d of %d entities have no surface form in %s (they are never "
                        "linked in text)", without, len(entities), labels_path)
    return result


def build_graph(section: Mapping) -> KnowledgeGraph:
    """The graph of the recipe's ``knowledge_graph`` section (``format``, ``splits`` with
    ``train`` and optional ``valid`` / ``test`` paths, optional ``labels`` path, ``linking``).
    Raises FileNotFoundError for a missing file, ValueError for a train split without a
    single good triple."""
    fmt = section.get("format", "tsv")
    linking = {**DEFAULT_LINKING, **(section.get("linking") or {})}
    paths = dict(section["splits"])
    counts: dict = {"files": {}, "splits": {}}
    raw = {}
    for split, path in paths.items():
        raw[split], counts["files"][split] = read_triples(path, fmt)
    if not raw.get("train"):
        raise ValueError(f"knowledge graph train split {paths.get('train')} has no good "
                         f"triple ({counts['files'].get('train')})")
    unique = {}
    for split, triples in raw.items():
        unique[split] = list(dict.fromkeys(triples))
        counts["splits"][split] = {"duplicate_triples": len(triples) - len(unique[split])}
    degree = collections.Counter()
    relation_count = collections.Counter()
    for head, relation, tail in unique["train"]:
        degree[head] += 1
        degree[tail] += 1
        relation_count[relation] += 1
    entities = sorted(degree, key=lambda entity: (-degree[entity], entity))
    relations = sorted(relation_count)
    entity_index = {entity: index for index, entity in enumerate(entities)}
    relation_index = {relation: index for index, relation in enumerate(relations)}
    splits = {}
    for split, triples in unique.items():
        kept = [(entity_index[h], relation_index[r], entity_index[t]) for h, r, t in triples
                if h in entity_index and r in relation_index and t in entity_index]
        unknown = len(triples) - len(kept)
        counts["splits"][split].update(unknown_entity_triples=unknown, triples=len(kept))
        if unknown:
            logging.warning("%s split: %d triple(s) name an entity or relation the train "
                            "split lacks; dropped", split, unknown)
        splits[split] = np.asarray(kept, np.int32).reshape(-1, 3)
    labels = _surface_forms(entities, fmt, section.get("labels"), linking, counts)
    for key in TOTALS:
        counts[key] = sum(c.get(key, 0) for c in counts["files"].values()) + \
            sum(c.get(key, 0) for c in counts["splits"].values())
    counts.update(entities=len(entities), relations=len(relations))
    return KnowledgeGraph(entities, labels, relations, splits, counts, linking)
