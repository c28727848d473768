"""TextExampleGen's ingestion report (``ingestion_report.json``): the outcome counts per split
and in total, its one-line summary, and the check that every split has a good record."""

import json
import os
from typing import Any, Dict, Mapping

import tensorflow as tf

from lmfactory.components.example_gen import formats
from lmfactory.components.example_gen.counts import METRICS_NAMESPACE, sum_counts, with_totals
from lmfactory.components.example_gen.ingest_config import IngestConfig

REPORT_FILE_NAME = "ingestion_report.json"


def make_report(config: IngestConfig, split_counts: Mapping[str, Mapping[str, int]],
                counts_source: str, input_fingerprint: str) -> Dict[str, Any]:
    totals = with_totals(sum_counts(
        {key: value for key, value in counts.items() if key in formats.OUTCOMES}
        for counts in split_counts.values()))
    return {
        "format": config.options.format,
        "split_names": list(split_counts),
        "splits": {split: dict(counts) for split, counts in split_counts.items()},
        "totals": totals,
        "counts_source": counts_source,
        "metrics_namespace": METRICS_NAMESPACE,
        "max_record_chars": config.options.max_record_chars,
        "input_fingerprint": input_fingerprint,
        **({"split_check": split_check(config.eval_fraction, split_counts)}
           if config.path and config.eval_fraction > 0 else {}),
    }


# A hashed split whose eval share is off the requested fraction by more than this share of
# it (e.g. under 15% or over 25% for 20%) gets a warning.
SPLIT_TOLERANCE = 0.25


def split_check(requested: float, split_counts: Mapping[str, Mapping[str, int]]
                ) -> Dict[str, Any]:
    """How far the eval split's share of the good examples landed from ``eval_fraction``.

    The split hashes whole input records (a line, a document, a SQuAD article with all its
    questions), so a file of few or unequal records can land far from the request; the
    returned ``warning`` (None when the share is within `SPLIT_TOLERANCE` of the request) says
    so and is logged by the ingestion."""
    good = {split: counts.get(formats.GOOD, 0) for split, counts in split_counts.items()}
    examples = sum(good.values())
    share = good.get("eval", 0) / examples if examples else 0.0
    warning = None
    if abs(share - requested) > SPLIT_TOLERANCE * requested:
        warning = (f"eval_fraction {requested:g} gave an eval split of {share:.1%} of the "
                   f"{examples} good examples ({good.get('eval', 0)}): the split hashes whole "
                   f"input records, so few or unequal records land far from the request; use "
                   f"more records or name the split files with 'splits'")
    return {"requested_eval_fraction": requested, "eval_fraction": round(share, 6),
            "eval_examples": good.get("eval", 0), "examples": examples, "warning": warning}


def summary_line(report: Mapping[str, Any]) -> str:
    totals = report["totals"]
    reasons = ", ".join(f"{reason}={totals[reason]}" for reason in formats.BAD_REASONS
                        if totals[reason])
    splits = ", ".join(f"{split}={counts['good']}" for split, counts in report["splits"].items())
    budget = report.get("label_budget")
    kept = (f"; label budget: {budget['kept']} of {budget['good']} train examples kept, "
            f"{budget['left_out']} left out" if budget else "")
    return (f"TextExampleGen ({report['format']}): {totals['good']} good, {totals['bad']} bad "
            f"records ({reasons or 'none'}); good per split: {splits}{kept} "
            f"[counts from {report['counts_source']}]")


def write_report(report: Mapping[str, Any], output_dir: str) -> str:
    path = os.path.join(output_dir, REPORT_FILE_NAME)
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return path


def check_splits_have_good_records(report: Mapping[str, Any]) -> None:
    """ValueError naming every split without a single good record."""
    problems = []
    for split, counts in report["splits"].items():
        if counts["good"] == 0:
            bad = {reason: counts[reason] for reason in formats.BAD_REASONS if counts[reason]}
            problems.append(f"split {split!r}: all {counts['total']} records were bad {bad}"
                            if counts["total"] else f"split {split!r}: no records")
    if problems:
        raise ValueError("TextExampleGen found no good records in " + "; ".join(problems))
