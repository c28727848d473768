"""Pieces shared by the task-data builders over KG-linked text (relation_data.py: ERNIE §4.4
relation classification; typing_data.py: ERNIE §4.1 entity typing): reading the text
sources (bad input counted, never raised), sentence splitting, the hashed split by entity
key, the marked form of a sentence at linked spans, and writing the TSV splits and
``counts.json``."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
from typing import Iterable, Iterator

SOURCE_FORMATS = ("text", "squad")  # one paragraph a line (WikiText) | SQuAD v1.1 JSON
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def default_sources(data_dir: str) -> tuple:
    """The text the builders link by default: WikiText-2 valid and the SQuAD v1.1 dev
    contexts, in ``data_dir`` laid out as the shared data folder (``wikitext-2/``,
    ``squad/``)."""
    return ({"format": "text", "path": os.path.join(data_dir, "wikitext-2", "valid.txt")},
            {"format": "squad", "path": os.path.join(data_dir, "squad", "dev-v1.1.json")})


def default_graph(data_dir: str) -> dict:
    """The knowledge_graph section of FB15k-237's train triples and Wikidata labels in
    ``data_dir`` (``kg/FB15k-237/``)."""
    folder = os.path.join(data_dir, "kg", "FB15k-237")
    return {"format": "tsv", "splits": {"train": os.path.join(folder, "train.txt")},
            "labels": os.path.join(folder, "entity2wikidata.json"),
            "linking": {"max_ngram": 4, "lowercase": True}}


def resolve_inputs(data_dir: str | None, graph_section: dict | None,
                   sources: Iterable[dict] | None) -> tuple:
    """``(graph_section, sources)``: each as given, else the default one in ``data_dir``;
    a missing ``data_dir`` is a one-line error."""
    if data_dir is None and (graph_section is None or sources is None):
        raise ValueError("give data_dir (the folder holding wikitext-2/, squad/ and "
                         "kg/FB15k-237/) or both the graph section and the text sources")
    return (graph_section if graph_section is not None else default_graph(data_dir),
            tuple(sources) if sources is not None else default_sources(data_dir))


def paragraphs(source: dict, counts: collections.Counter) -> Iterator[str]:
    """The paragraphs of one source; unreadable parts are counted, never raised."""
    fmt, path = source["format"], source["path"]
    if fmt not in SOURCE_FORMATS:
        raise ValueError(f"source format must be one of {SOURCE_FORMATS}, got {fmt!r}")
    with open(path, "rb") as handle:
        raw = handle.read()
    if fmt == "squad":
        try:
            data = json.loads(raw.decode("utf-8"))["data"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            counts["unreadable_sources"] += 1
            print(f"skipping {path}: not SQuAD JSON ({error})")
            return
        for article in data:
            for paragraph in article.get("paragraphs", []):
                context = paragraph.get("context")
                if isinstance(context, str):
                    yield context
                else:
                    counts["malformed_paragraphs"] += 1
        return
    for line in raw.split(b"\n"):
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            counts["non_utf8_lines"] += 1
            continue
        if not text or (text.startswith("=") and text.endswith("=")):
            counts["empty_or_heading_lines"] += 1
            continue
        yield text


def sentences(sources: Iterable[dict], counts: collections.Counter) -> Iterator[str]:
    for source in sources:
        for paragraph in paragraphs(source, counts):
            yield from (s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip())


def split_of(keys, eval_fraction: float, seed: int) -> str:
    """``eval`` or ``train`` by a hash of the entity keys (order-free), so every example of
    the same entities (pair) lands in the same split."""
    key = "|".join(sorted(keys)) + f"|{seed}"
    bucket = int(hashlib.md5(key.encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "eval" if bucket < eval_fraction else "train"


def marked_at(sentence: str, spans) -> str:
    """The sentence with each ``(start_char, end_char, mark)`` span written ``mark text
    mark`` (the marking preprocessors' form), at the linked spans themselves."""
    out, last = [], 0
    for start, end, mark in sorted(spans):
        out += [sentence[last:start], f"{mark} {sentence[start:end]} {mark}"]
        last = end
    return "".join(out + [sentence[last:]])


def write_splits(output_dir: str, columns, splits: dict) -> None:
    """``<split>.tsv`` of each split's rows, a header line first (tabs in values become
    spaces)."""
    os.makedirs(output_dir, exist_ok=True)
    for split, rows in splits.items():
        with open(os.path.join(output_dir, f"{split}.tsv"), "w", encoding="utf-8") as out:
            out.write("\t".join(columns) + "\n")
            for row in rows:
                out.write("\t".join(value.replace("\t", " ") for value in row) + "\n")


def write_json(output_dir: str, name: str, value: dict) -> None:
    with open(os.path.join(output_dir, name), "w", encoding="utf-8") as out:
        json.dump(value, out, indent=1)
