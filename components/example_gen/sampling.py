"""A label budget: a seeded, class-stratified sample of N train examples.

``data.task.train_examples: N`` fine-tunes on N of the train split's good examples, so a run
can measure what pre-training buys when labels are few (ULMFiT §4.4's Figure 3, BERT §5).
The sample is drawn in the Beam pipeline that ingests the split:

- each parsed example gets a rank, a keyed hash of its bytes and the seed (the same example
  gets the same rank on every runner and in every bundle order);
- its stratum is its ``label`` feature when that is one class id or one string (a
  classifier's class, a multiple-choice answer position); regression scores, tag sequences
  and span answers have one stratum;
- each stratum keeps its share of N (largest remainders, ties to the smaller stratum name),
  the examples of lowest rank, so a class holding 30% of the split holds 30% of the sample.

The counts (good and kept per stratum) go to a small JSON file the ingestion report reads;
a budget larger than the split's good examples is an error raised after the pipeline, with
the counts at hand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Dict, Iterator, Mapping, Tuple

import apache_beam as beam
from tensorflow.core.example import example_pb2

from lmfactory.components.example_gen.counts import write_json_file
from lmfactory.components.example_gen.formats import LABEL_FEATURE

ONE_STRATUM = ""  # examples without a class label


@dataclasses.dataclass(frozen=True)
class LabelBudget:
    """``examples`` train examples kept, drawn with ``seed``; counts written to
    ``summary_path``."""
    examples: int
    seed: int
    summary_path: str


def stratum(serialized: bytes) -> str:
    """The class an example is stratified by: its ``label`` when it holds one int or one
    string, else `ONE_STRATUM`."""
    return _stratum(example_pb2.Example.FromString(serialized))


def _stratum(example) -> str:
    feature = example.features.feature.get(LABEL_FEATURE)
    kind = feature.WhichOneof("kind") if feature is not None else None
    if kind not in ("int64_list", "bytes_list"):
        return ONE_STRATUM
    values = getattr(feature, kind).value
    if len(values) != 1:
        return ONE_STRATUM
    value = values[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _rank(example, seed: int) -> int:
    """A 64-bit draw fixed by the example's content and the seed. The bytes hashed are the
    deterministic serialization: a feature map's order in the bytes a parser wrote may
    differ between processes."""
    content = example.SerializeToString(deterministic=True)
    key = int(seed).to_bytes(8, "big", signed=True)
    return int.from_bytes(hashlib.blake2b(content, digest_size=8, key=key).digest(), "big")


def _keyed(serialized: bytes, seed: int) -> Tuple[str, Tuple[int, bytes]]:
    example = example_pb2.Example.FromString(serialized)
    return _stratum(example), (_rank(example, seed), serialized)


def quotas(budget: int, sizes: Mapping[str, int]) -> Dict[str, int]:
    """Each stratum's share of ``budget`` in proportion to its size (largest remainders;
    ties go to the smaller stratum name). ``budget`` is at most the total size."""
    total = sum(sizes.values())
    if budget > total:
        raise ValueError(f"a budget of {budget} examples is more than the {total} there are")
    exact = {name: budget * size / total for name, size in sizes.items()}
    shares = {name: int(value) for name, value in exact.items()}
    left = budget - sum(shares.values())
    by_remainder = sorted(sizes, key=lambda name: (-(exact[name] - shares[name]), name))
    for name in by_remainder[:left]:
        shares[name] += 1
    return shares


def _keep_quota(item: Tuple[str, list], budget: int, sizes: Mapping[str, int]
                ) -> Iterator[bytes]:
    name, lowest = item
    if budget > sum(sizes.values()):
        return  # reported after the pipeline (`check_budget`)
    for _, serialized in lowest[:quotas(budget, sizes)[name]]:
        yield serialized


def _summary(sizes: Mapping[str, int], budget: int) -> Dict[str, Any]:
    good = sum(sizes.values())
    kept = quotas(budget, sizes) if budget <= good else {name: 0 for name in sizes}
    return {"requested": budget, "good": good, "kept": sum(kept.values()),
            "left_out": good - sum(kept.values()),
            "per_class": {name: {"good": sizes[name], "kept": kept[name]}
                          for name in sorted(sizes)}}


def sample(examples, budget: LabelBudget, label: str):
    """The PCollection of serialized Examples cut to the budget's stratified sample; the
    counts go to ``budget.summary_path``."""
    keyed = examples | f"Stratify[{label}]" >> beam.Map(_keyed, budget.seed)
    sizes = keyed | f"StratumSizes[{label}]" >> beam.combiners.Count.PerKey()
    lowest = keyed | f"LowestRanks[{label}]" >> beam.combiners.Top.SmallestPerKey(
        budget.examples)
    _ = (sizes
         | f"SizesToDict[{label}]" >> beam.combiners.ToDict()
         | f"WriteBudgetCounts[{label}]" >> beam.Map(
             lambda found: write_json_file(_summary(found, budget.examples),
                                           budget.summary_path)))
    return lowest | f"KeepQuotas[{label}]" >> beam.FlatMap(
        _keep_quota, budget.examples, beam.pvalue.AsDict(sizes))


def read_summary(path: str) -> Dict[str, Any]:
    import tensorflow as tf

    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def check_budget(summary: Mapping[str, Any], split: str) -> None:
    """ValueError when the budget asks for more examples than the split's good ones."""
    if summary["requested"] > summary["good"]:
        raise ValueError(f"data.task.train_examples: {summary['requested']} is more than the "
                         f"{summary['good']} good examples of the {split!r} split")
