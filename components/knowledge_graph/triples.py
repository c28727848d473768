"""Reading knowledge-graph triple files: ``(head, relation, tail)`` strings plus counts of
what was left out.

Formats:

* ``tsv``: ``head<TAB>relation<TAB>tail`` per line (FB15k-237, Toutanova & Chen 2015;
  WN18RR, Dettmers et al. 2018). A line with another number of fields, an empty field, or
  bytes that are not UTF-8 is ``malformed_lines``; blank lines are ``blank_lines``.
* ``conceptnet``: the ConceptNet 5 assertions CSV (Speer et al. 2017), tab separated:
  ``/a/[...] assertion URI, /r/Relation, /c/<lang>/<term>[/pos[/...]], /c/<lang>/..., JSON``.
  Only assertions whose two ends are English concepts (``/c/en/``) are kept (KagNet, Lin et
  al. 2019 §3.1, uses the English part); others are ``skipped_non_english``; an end that is
  not a concept (``/r/ExternalURL``'s web addresses) is ``skipped_non_concept``. A concept's
  id keeps its term only (``/c/en/new_york/n/wn/...`` -> ``/c/en/new_york``) and its label is
  the term with spaces (`conceptnet_label`: "new york").

Files are read with ``tf.io.gfile`` (local paths, ``gs://``). A missing file is a one-line
``FileNotFoundError``.
"""

from __future__ import annotations

import logging
from typing import Iterator

import tensorflow as tf

from lmfactory.components.knowledge_graph.settings import FORMATS

CONCEPTNET_ENGLISH = "/c/en/"
_LOGGED_PER_REASON = 5  # bad lines logged (file:line) per reason; all are counted


def conceptnet_concept(uri: str) -> str:
    """``/c/en/new_york/n/wn/location`` -> ``/c/en/new_york`` (language and term only)."""
    parts = uri.split("/")
    return "/".join(parts[:4])


def conceptnet_label(uri: str) -> str:
    """A ConceptNet concept's surface form: ``/c/en/new_york/n`` -> ``"new york"``."""
    parts = uri.split("/")
    return parts[3].replace("_", " ") if len(parts) > 3 else uri


def _lines(path: str) -> Iterator[bytes]:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"knowledge graph file {path} does not exist")
    with tf.io.gfile.GFile(path, "rb") as f:
        for line in f:
            yield line


class _Counter:
    def __init__(self, path: str):
        self.path = path
        self.counts = {"lines": 0, "triples": 0, "blank_lines": 0, "malformed_lines": 0,
                       "skipped_non_english": 0, "skipped_non_concept": 0}

    def bad(self, reason: str, number: int, detail: str) -> None:
        self.counts[reason] += 1
        if self.counts[reason] <= _LOGGED_PER_REASON:
            logging.warning("%s:%d: %s (%s)", self.path, number, reason.replace("_", " "),
                            detail)


def _tsv_triple(fields: list[str], counter: _Counter, number: int):
    if len(fields) != 3 or not all(fields):
        counter.bad("malformed_lines", number, f"{len(fields)} tab-separated fields, "
                                               f"expected head, relation, tail")
        return None
    return tuple(fields)


def _conceptnet_triple(fields: list[str], counter: _Counter, number: int):
    if len(fields) < 4 or not fields[1].startswith("/r/") or not all(fields[1:4]):
        counter.bad("malformed_lines", number, "expected assertion URI, /r/relation, head, "
                                               "tail, JSON")
        return None
    relation, head, tail = fields[1], fields[2], fields[3]
    if not (head.startswith("/c/") and tail.startswith("/c/")):
        counter.bad("skipped_non_concept", number, f"{head} -> {tail}")
        return None
    if not (head.startswith(CONCEPTNET_ENGLISH) and tail.startswith(CONCEPTNET_ENGLISH)):
        counter.counts["skipped_non_english"] += 1  # most of ConceptNet: not logged
        return None
    head, tail = conceptnet_concept(head), conceptnet_concept(tail)
    if head == CONCEPTNET_ENGLISH or tail == CONCEPTNET_ENGLISH:
        counter.bad("malformed_lines", number, "a concept without a term")
        return None
    return head, relation, tail


def read_triples(path: str, fmt: str) -> tuple[list[tuple[str, str, str]], dict]:
    """All ``(head, relation, tail)`` triples of the file ``path`` in format ``fmt`` (``tsv``
    or ``conceptnet``), in file order, and the counts: ``lines``, ``triples``,
    ``blank_lines``, ``malformed_lines`` (wrong shape or not UTF-8), ``skipped_non_english``
    and ``skipped_non_concept`` (conceptnet). Bad lines are logged (the first few per
    reason, with file:line) and counted, never fatal; a missing file raises
    ``FileNotFoundError``."""
    if fmt not in FORMATS:
        raise ValueError(f"knowledge graph format must be one of {FORMATS}, got {fmt!r}")
    parse = _tsv_triple if fmt == "tsv" else _conceptnet_triple
    counter = _Counter(path)
    triples = []
    for number, raw in enumerate(_lines(path), start=1):
        counter.counts["lines"] += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            counter.bad("malformed_lines", number, f"not UTF-8: {error.reason}")
            continue
        line = line.rstrip("\r\n")
        if not line.strip():
            counter.counts["blank_lines"] += 1
            continue
        triple = parse([field.strip() for field in line.split("\t")], counter, number)
        if triple is not None:
            triples.append(triple)
    counter.counts["triples"] = len(triples)
    logging.info("Read %d triples from %s (%s)", len(triples), path,
                 ", ".join(f"{k} {v}" for k, v in counter.counts.items() if v and k not in
                           ("lines", "triples")) or "no bad lines")
    return triples, counter.counts
