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
"""

from __future__ import annotations

import copy

from lmfactory.components.knowledge_graph import settings

SECTION = "knowledge_graph"


def schema() -> dict:
    """The section's key tree for recipe.check_known_keys (None marks a leaf)."""
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


def check_knowledge_graph(check, recipe: dict, architecture) -> None:
    """Completes ``recipe["knowledge_graph"]`` with the defaults and checks it; an
    architecture that links entities or finds concept paths (``Architecture.links_entities``,
    ``concept_paths``) requires it."""
    section = recipe.get(SECTION)
    if not section:
        if architecture.links_entities or architecture.concept_paths:
            check.fail(SECTION, f"{architecture.name} links text to a knowledge graph: give "
                                f"a knowledge_graph section (format, splits, labels)")
        return
    if not isinstance(section, dict):
        check.fail(SECTION, "must be a mapping (format, splits, labels, embedding, linking)")
    if not isinstance(section.get("splits"), dict):
        check.fail(f"{SECTION}.splits", "must map train (and optionally valid, test) to "
                                        "triple files")
    recipe[SECTION] = section = _merge(settings.SECTION_DEFAULTS, section)
    section["splits"] = {split: path for split, path in section["splits"].items()
                         if path is not None}
    check.choice(f"{SECTION}.format", settings.FORMATS)
    for split, path in section["splits"].items():
        if not isinstance(path, str) or not path:
            check.fail(f"{SECTION}.splits.{split}", f"must be a file path, got {path!r}")
    if "train" not in section["splits"]:
        check.fail(f"{SECTION}.splits.train", "is required")
    labels = section.get("labels")
    if labels is not None and (not isinstance(labels, str) or not labels):
        check.fail(f"{SECTION}.labels", f"must be a file path, got {labels!r}")
    field = f"{SECTION}.embedding"
    check.choice(f"{field}.method", settings.METHODS)
    check.positive_int(f"{field}.dim")
    check.fraction(f"{field}.margin", 1e-6, 1e6)
    norm = section["embedding"]["norm"]
    if isinstance(norm, bool) or norm not in settings.NORMS:
        check.fail(f"{field}.norm", f"must be 1 (L1) or 2 (L2), got {norm!r}")
    check.positive_int(f"{field}.epochs")
    check.positive_int(f"{field}.batch_size")
    check.fraction(f"{field}.learning_rate", 1e-8, 100.0)
    seed = section["embedding"]["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        check.fail(f"{field}.seed", f"must be an integer >= 0, got {seed!r}")
    check.choice(f"{field}.optimizer", settings.OPTIMIZERS)
    check.positive_int(f"{SECTION}.linking.max_ngram")
    check.boolean(f"{SECTION}.linking.lowercase")
    check.positive_int(f"{SECTION}.linking.min_label_chars")
    check.boolean(f"{SECTION}.linking.skip_stopwords")


__all__ = ["SECTION", "check_knowledge_graph", "schema"]
