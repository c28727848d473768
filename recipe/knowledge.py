"""The recipe's optional ``knowledge_graph`` section (ERNIE, KagNet): the triple
files the KG stages read (components/knowledge_graph), the embedding method's settings and
the entity linker's. ``knowledge_graph: null`` (the default) means no KG stages.

    knowledge_graph:
      format: tsv                 # or conceptnet (ConceptNet 5 assertions CSV)
      splits: {train: ..., valid: ..., test: ...}   # valid / test optional
      labels: .../entity2wikidata.json             # optional
      embedding: {method: transe, dim: 100, margin: 1.0, norm: 1, epochs: 10,
                  batch_size: 1024, learning_rate: 0.01, seed: 0, optimizer: sgd}
      linking: {max_ngram: 4, lowercase: true, min_label_chars: 3, skip_stopwords: true}

The defaults and choices are components/knowledge_graph/settings.py's (the KG stages read
them too).
"""

from __future__ import annotations

import copy
import dataclasses

from lmfactory.components.knowledge_graph import settings
from lmfactory.recipe.checker import Checker
from lmfactory.recipe.section import Section

SECTION = "knowledge_graph"


def schema() -> dict:
    """The section's key tree for the recipe's known-key check (None marks a leaf)."""
    def tree(node):
        return {key: tree(value) for key, value in node.items()} if isinstance(node, dict) \
            else None

    return tree(settings.SECTION_DEFAULTS)


def _merge(defaults: dict, values: dict) -> dict:
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclasses.dataclass(frozen=True)
class Embedding(Section):
    """``knowledge_graph.embedding``: the KG embedding method's settings."""

    method: str
    dim: int
    margin: float
    norm: int
    epochs: int
    batch_size: int
    learning_rate: float
    seed: int
    optimizer: str

    @classmethod
    def from_dict(cls, values: dict) -> "Embedding":
        check = Checker(values, f"{SECTION}.embedding")
        check.choice("method", settings.METHODS)
        check.positive_int("dim")
        check.fraction("margin", 1e-6, 1e6)
        if isinstance(values["norm"], bool) or values["norm"] not in settings.NORMS:
            check.fail("norm", f"must be 1 (L1) or 2 (L2), got {values['norm']!r}")
        check.positive_int("epochs")
        check.positive_int("batch_size")
        check.fraction("learning_rate", 1e-8, 100.0)
        check.non_negative_int("seed")
        check.choice("optimizer", settings.OPTIMIZERS)
        return cls.from_values(values)


@dataclasses.dataclass(frozen=True)
class Linking(Section):
    """``knowledge_graph.linking``: the entity linker's settings."""

    max_ngram: int
    lowercase: bool
    min_label_chars: int
    skip_stopwords: bool

    @classmethod
    def from_dict(cls, values: dict) -> "Linking":
        check = Checker(values, f"{SECTION}.linking")
        check.positive_int("max_ngram")
        check.boolean("lowercase")
        check.positive_int("min_label_chars")
        check.boolean("skip_stopwords")
        return cls.from_values(values)


@dataclasses.dataclass(frozen=True)
class KnowledgeGraph(Section):
    """``knowledge_graph``: triple files by split, their format, the entity labels."""

    format: str
    splits: dict
    labels: str | None
    embedding: Embedding
    linking: Linking

    @classmethod
    def from_dict(cls, section, architecture) -> "KnowledgeGraph | None":
        """The section completed with the defaults and checked, or None without one; an
        architecture that links entities or finds concept paths
        (``Architecture.links_entities``, ``concept_paths``) requires it."""
        check = Checker({SECTION: section})
        if not section:
            if architecture.links_entities or architecture.concept_paths:
                check.fail(SECTION, f"{architecture.name} links text to a knowledge graph: "
                                    f"give a knowledge_graph section (format, splits, labels)")
            return None
        if not isinstance(section, dict):
            check.fail(SECTION, "must be a mapping (format, splits, labels, embedding, "
                                "linking)")
        check = Checker(section, SECTION)
        if not isinstance(section.get("splits"), dict):
            check.fail("splits", "must map train (and optionally valid, test) to triple files")
        section = _merge(settings.SECTION_DEFAULTS, section)
        section["splits"] = {split: path for split, path in section["splits"].items()
                             if path is not None}
        check = Checker(section, SECTION)
        check.choice("format", settings.FORMATS)
        for split, path in section["splits"].items():
            if not isinstance(path, str) or not path:
                check.fail(f"splits.{split}", f"must be a file path, got {path!r}")
        if "train" not in section["splits"]:
            check.fail("splits.train", "is required")
        labels = section.get("labels")
        if labels is not None and (not isinstance(labels, str) or not labels):
            check.fail("labels", f"must be a file path, got {labels!r}")
        return cls(format=section["format"], splits=section["splits"], labels=labels,
                   embedding=Embedding.from_dict(section["embedding"]),
                   linking=Linking.from_dict(section["linking"]))


__all__ = ["Embedding", "KnowledgeGraph", "Linking", "SECTION", "schema"]
