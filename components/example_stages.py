"""Plumbing shared by the Beam stages that read an Examples artifact and write one with the
same splits and added features (EntityLinker, ConceptPaths): per split, read the GZIP
TFRecords, apply the stage's transform, write GZIP TFRecords under ``Split-<split>/``;
read the stage's Beam counters per split and write them as JSON beside the data; and the
executor's artifact bookkeeping around it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Mapping, Sequence

import apache_beam as beam
import tensorflow as tf
from apache_beam.metrics.metric import MetricsFilter
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

DATA_FILE_PREFIX = "data_tfrecord"


def transform_splits(input_uris: Mapping[str, str], output_uri: str, label: str,
                     make_transform: Callable[[], beam.PTransform],
                     make_pipeline: Callable[[], beam.Pipeline] | None = None):
    """Runs ``read -> make_transform() -> write`` for every split (split -> folder of GZIP
    TFRecords of serialized Examples) in one pipeline; the transform of split S is labelled
    ``<label>[S]`` (what :func:`split_counters` filters on). Returns the pipeline result."""
    make_pipeline = make_pipeline or beam.Pipeline
    with make_pipeline() as pipeline:
        for split, uri in input_uris.items():
            _ = (pipeline
                 | f"Read[{split}]" >> beam.io.ReadFromTFRecord(
                     os.path.join(uri, "*"),
                     compression_type=beam.io.filesystem.CompressionTypes.GZIP)
                 | f"{label}[{split}]" >> make_transform()
                 | f"Write[{split}]" >> beam.io.WriteToTFRecord(
                     os.path.join(output_uri, f"Split-{split}", DATA_FILE_PREFIX),
                     file_name_suffix=".gz"))
    return pipeline.result


def split_counters(result, namespace: str, names: Sequence[str], label: str,
                   split: str) -> dict:
    """The counters ``names`` of ``namespace`` reported by split ``split``'s transform
    (``<label>[split]``); every value None (logged) on a runner that reports no metrics."""
    values = dict.fromkeys(names, 0)
    try:
        query = result.metrics().query(MetricsFilter().with_namespace(namespace)
                                       .with_step(f"{label}[{split}]"))
    except (NotImplementedError, AttributeError) as error:
        logging.warning("Counters of %s unavailable on this runner: %s", namespace, error)
        return dict.fromkeys(names)
    for counter in query["counters"]:
        values[counter.key.metric.name] += counter.committed or counter.attempted or 0
    return values


def run_counted_stage(input_uris: Mapping[str, str], output_uri: str, label: str,
                      make_transform: Callable[[], beam.PTransform], namespace: str,
                      counter_names: Sequence[str], counts_file: str,
                      make_pipeline: Callable[[], beam.Pipeline] | None = None) -> dict:
    """:func:`transform_splits`, then the stage's counters per split (split -> name ->
    value), written to ``<output_uri>/<counts_file>``, logged and returned."""
    result = transform_splits(input_uris, output_uri, label, make_transform, make_pipeline)
    counts = {split: split_counters(result, namespace, counter_names, label, split)
              for split in input_uris}
    write_counts(counts, output_uri, counts_file)
    logging.info("%s counters: %s", namespace, counts)
    return counts


def write_counts(counts: dict, output_uri: str, file_name: str) -> None:
    with tf.io.gfile.GFile(os.path.join(output_uri, file_name), "w") as f:
        json.dump(counts, f, indent=2, sort_keys=True)


def input_split_uris(input_dict: dict, key: str) -> tuple[list[str], dict[str, str]]:
    """(split names, split -> folder) of the single Examples artifact ``input_dict[key]``."""
    examples = artifact_utils.get_single_instance(input_dict[key])
    splits = artifact_utils.decode_split_names(examples.split_names)
    return splits, {split: artifact_utils.get_split_uri([examples], split)
                    for split in splits}


def finish_examples_output(output, splits: Sequence[str]) -> None:
    """Marks the output Examples artifact: its splits and the tf.Example payload format."""
    output.split_names = artifact_utils.encode_split_names(list(splits))
    examples_utils.set_payload_format(output, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
