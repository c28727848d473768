"""TextExampleGen executor: raw text/TSV/CSV/JSONL files, task files (CoNLL tagging, SQuAD
JSON, CommonsenseQA JSONL, SWAG CSV) or a prepared TFDS dataset -> Examples.

:func:`ingest` does the work as a plain function (config dict in, report dict out); the TFX
:class:`Executor` only unpacks exec properties, calls it with its own Beam pipeline factory and
fills in the output artifact's properties. Output layout: CONTRACTS §1.

The steps live beside it: the ``input_config`` (``ingest_config.py``), the inputs and their
fingerprint (``inputs.py``), the Beam transforms (``transforms.py``), the outcome counts
(``counts.py``) and the ingestion report (``report.py``).
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Dict, List, Mapping, Optional

import apache_beam as beam
from absl import logging
import tensorflow as tf
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from lmfactory.components import beam_options
from lmfactory.components.example_gen import formats, sampling
from lmfactory.components.example_gen.counts import (choose_counts, counts_from_metrics,
                                                     counts_from_side_output)
from lmfactory.components.example_gen.ingest_config import (TRAIN_SPLIT, IngestConfig,
                                                            parse_input_config)
from lmfactory.components.example_gen.inputs import (check_tfds_inputs, fingerprint_inputs,
                                                     load_tfds_builder, match_input_files,
                                                     read_table_header)
from lmfactory.components.example_gen.report import (check_splits_have_good_records,
                                                     make_report, summary_line, write_report)
from lmfactory.components.example_gen.transforms import (parse_and_write_split,
                                                         read_file_splits, read_tfds_splits,
                                                         write_counts)

EXAMPLES_KEY = "examples"
INPUT_CONFIG_KEY = "input_config"
INPUT_FINGERPRINT_KEY = "input_fingerprint"

FILE_FORMAT = "tfrecords_gzip"

_COUNTS_FILE_NAME = ".ingest_counts.json"
_BUDGET_FILE_NAME = ".label_budget.json"


def _check_inputs(config: IngestConfig):
    """Raises FileNotFoundError/ValueError before any Beam work.

    Returns the config (TFDS splits filled in) and, for TFDS, the read-only dataset builder.
    """
    if config.is_tfds:
        builder = load_tfds_builder(config.tfds_name, config.tfds_data_dir)
        if not config.tfds_splits:
            config = dataclasses.replace(
                config, tfds_splits={split: split for split in builder.info.splits.keys()})
        check_tfds_inputs(builder, config)
        return config, builder
    for glob in config.input_globs:
        for path in match_input_files(glob):
            if config.options.format in formats.TABLE_FORMATS:
                read_table_header(path, config.options)
    return config, None


def ingest(input_config: Any, output_dir: str, beam_pipeline_args: Optional[List[str]] = None,
           make_pipeline: Optional[Callable[[], beam.Pipeline]] = None) -> Dict[str, Any]:
    """Reads the inputs of ``input_config`` into an Examples layout under ``output_dir``.

    Writes ``Split-<name>/data_tfrecord-*.gz`` and ``ingestion_report.json`` and returns the
    report. ``make_pipeline`` (the TFX executor's) wins over ``beam_pipeline_args``.
    Raises FileNotFoundError for missing inputs, ValueError for inputs of an unexpected shape
    or a split without any good record.
    """
    config, builder = _check_inputs(parse_input_config(input_config))
    input_fingerprint = fingerprint_inputs(input_config)
    counts_path = os.path.join(output_dir, _COUNTS_FILE_NAME)
    make_pipeline = make_pipeline or functools.partial(
        beam.Pipeline, argv=beam_options.resolve_args(
            beam_pipeline_args, input_bytes(config), "TextExampleGen"))
    pipeline = make_pipeline()
    split_records = (read_tfds_splits(pipeline, config, builder) if config.is_tfds
                     else read_file_splits(pipeline, config))
    budget = (sampling.LabelBudget(config.train_examples, config.seed,
                                   os.path.join(output_dir, _BUDGET_FILE_NAME))
              if config.train_examples else None)
    if budget is not None and TRAIN_SPLIT not in split_records:
        raise ValueError(f"input_config train_examples needs a {TRAIN_SPLIT!r} split, got "
                         f"{list(split_records)}")
    write_counts([parse_and_write_split(split, records, output_dir, config.options,
                                        budget if split == TRAIN_SPLIT else None)
                  for split, records in split_records.items()], counts_path)
    result = pipeline.run()
    result.wait_until_finish()
    split_names = list(split_records)
    split_counts, counts_source = choose_counts(
        counts_from_metrics(result, split_names), counts_from_side_output(counts_path, split_names))
    tf.io.gfile.remove(counts_path)
    report = make_report(config, split_counts, counts_source, input_fingerprint)
    if budget is not None:
        report["label_budget"] = sampling.read_summary(budget.summary_path)
        tf.io.gfile.remove(budget.summary_path)
    write_report(report, output_dir)
    logging.info("%s", summary_line(report))
    if (report.get("split_check") or {}).get("warning"):
        logging.warning("TextExampleGen: %s", report["split_check"]["warning"])
    check_splits_have_good_records(report)
    if budget is not None:
        sampling.check_budget(report["label_budget"], TRAIN_SPLIT)
    return report


def record_examples_properties(examples, report: Mapping[str, Any]) -> None:
    """Sets what TFX's own ExampleGen sets on its Examples artifact."""
    examples.split_names = artifact_utils.encode_split_names(list(report["split_names"]))
    examples.span = 0
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    examples_utils.set_file_format(examples, FILE_FORMAT)
    examples.set_string_custom_property(INPUT_FINGERPRINT_KEY, report["input_fingerprint"])


def input_bytes(config: IngestConfig) -> Optional[int]:
    """Bytes of the input files (None for a TFDS dataset): what the Beam mode policy reads
    (``components/beam_options.py``)."""
    return None if config.is_tfds else beam_options.input_size(config.input_globs)


class Executor(base_beam_executor.BaseBeamExecutor):
    """TFX executor of TextExampleGen: exec properties -> :func:`ingest` -> Examples artifact."""

    def Do(self, input_dict: Dict[str, List[Any]], output_dict: Dict[str, List[Any]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        input_config = exec_properties[INPUT_CONFIG_KEY]
        size = input_bytes(parse_input_config(input_config))
        report = ingest(input_config, examples.uri,
                        make_pipeline=beam_options.executor_pipeline(self, size))
        expected_fingerprint = exec_properties.get(INPUT_FINGERPRINT_KEY)
        if expected_fingerprint and expected_fingerprint != report["input_fingerprint"]:
            logging.warning("Input files changed since the component was built (fingerprint "
                            "%s, now %s); the output reflects the files as read now",
                            expected_fingerprint, report["input_fingerprint"])
        record_examples_properties(examples, report)
