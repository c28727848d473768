"""Counting TextExampleGen's record outcomes: Beam counters and the per-bundle side-output
tallies, merged and checked against each other."""

import collections
import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from absl import logging
from apache_beam.metrics.metric import MetricsFilter
import tensorflow as tf

from lmfactory.components.example_gen import formats

METRICS_NAMESPACE = "lmfactory.ingest"


def parse_step_label(split: str) -> str:
    return f"ParseRecords[{split}]"


def sum_counts(count_dicts: Iterable[Mapping[str, int]]) -> Dict[str, int]:
    total = collections.Counter()
    for counts in count_dicts:
        total.update(counts)
    return dict(total)


def merge_split_counts(split_count_dicts: Iterable[Mapping[str, Mapping[str, int]]]
                       ) -> Dict[str, Dict[str, int]]:
    """Sums ``{split: {outcome: count}}`` dicts (associative, as CombineGlobally needs)."""
    merged = collections.defaultdict(collections.Counter)
    for split_counts in split_count_dicts:
        for split, counts in split_counts.items():
            merged[split].update(counts)
    return {split: dict(counts) for split, counts in merged.items()}


def write_json_file(value: Any, path: str) -> None:
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(json.dumps(value))


def empty_counts() -> Dict[str, int]:
    return {outcome: 0 for outcome in formats.OUTCOMES}


def with_totals(counts: Mapping[str, int]) -> Dict[str, int]:
    full = empty_counts()
    full.update(counts)
    full["bad"] = sum(full[reason] for reason in formats.BAD_REASONS)
    full["total"] = full["bad"] + full[formats.GOOD]
    return full


def counts_from_metrics(result, split_names: Sequence[str]) -> Optional[Dict[str, Dict[str, int]]]:
    """Split -> outcome -> count from the pipeline's Beam counters; None if not available."""
    try:
        counters = result.metrics().query(
            MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    except Exception as error:  # Runners may not support metrics at all.
        logging.info("Beam metrics unavailable (%s); using the side-output counts", error)
        return None
    counts = {split: collections.Counter() for split in split_names}
    for counter in counters:
        split = _split_of_step(counter.key.step, split_names)
        value = counter.committed if counter.committed is not None else counter.attempted
        if split is None or value is None:
            return None
        counts[split][counter.key.metric.name] += value
    return {split: dict(split_counts) for split, split_counts in counts.items()}


def _split_of_step(step: str, split_names: Sequence[str]) -> Optional[str]:
    matching = [split for split in split_names if parse_step_label(split) in (step or "")]
    return matching[0] if len(matching) == 1 else None


def counts_from_side_output(counts_path: str,
                            split_names: Sequence[str]) -> Dict[str, Dict[str, int]]:
    with tf.io.gfile.GFile(counts_path) as handle:
        counts = json.loads(handle.read())
    return {split: counts.get(split, {}) for split in split_names}


def choose_counts(metric_counts, side_counts) -> Tuple[Dict[str, Dict[str, int]], str]:
    """The counts for the report and where they came from.

    Beam counters are used when the runner reports them and they agree with the side-output
    tallies (written exactly once, so always right); otherwise the side-output tallies are used.
    """
    def normalized(counts):
        return {split: with_totals(split_counts) for split, split_counts in counts.items()}

    if metric_counts is not None and normalized(metric_counts) == normalized(side_counts):
        return normalized(metric_counts), "beam_metrics"
    if metric_counts is not None:
        logging.warning("Beam counters %s disagree with the side-output counts %s; reporting the "
                        "latter", metric_counts, side_counts)
    return normalized(side_counts), "side_output"
