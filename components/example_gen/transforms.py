"""TextExampleGen's Beam transforms: read files (or TFDS splits) into raw records, split them
train / eval by a content hash, parse each into a tf.train.Example counting every outcome,
and write the splits and the per-bundle counts."""

import collections
import hashlib
import os
from typing import Any, Dict, Iterator, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from absl import logging
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.transforms import window
from apache_beam.utils import windowed_value
from tensorflow.core.example import example_pb2

from lmfactory.components.example_gen import (conll, formats, multiple_choice_readers,
                                              parallel, sampling, squad)
from lmfactory.components.example_gen.counts import (METRICS_NAMESPACE, merge_split_counts,
                                                     parse_step_label, write_json_file)
from lmfactory.components.example_gen.ingest_config import (EVAL_SPLIT, TRAIN_SPLIT,
                                                            IngestConfig)
from lmfactory.components.example_gen.inputs import table_rows

SPLIT_DIR_PREFIX = "Split-"
RECORD_FILE_PREFIX = "data_tfrecord"
COUNTS_TAG = "outcome_counts"
_MAX_LOGGED_BAD_RECORDS = 5


class RawRecord(NamedTuple):
    """One record as read from a file: its bytes (None when over-long) and the file's columns.

    ``bad``: why a task reader rejected the record (it is counted as ``malformed``);
    ``partition_key``: the bytes the train/eval hash split looks at instead of the payload
    (a SQuAD question's article title, so an article's questions share a split)."""
    source: str
    payload: Optional[bytes]
    columns: Tuple[str, ...] = ()
    bad: Optional[str] = None
    partition_key: Optional[bytes] = None


def file_records(path: str, handle, options: formats.FormatOptions) -> Iterator[RawRecord]:
    """The raw records of one open file: documents, table rows or JSON lines."""
    if options.format in formats.TABLE_FORMATS:
        rows = table_rows(handle, options)
        header = next(rows, None) if options.has_header else None
        columns = formats.table_columns(header, options, path)
        yield from (RawRecord(path, row, columns) for row in rows)
        return
    lines = formats.iter_file_lines(handle.read, options.max_line_bytes)
    if options.format == formats.TEXT_FORMAT:
        lines = formats.split_documents(lines, options.max_line_bytes)
    elif options.format == formats.CONLL_FORMAT:
        lines = conll.split_sentences(lines)
    yield from (RawRecord(path, line) for line in lines)


def whole_file_records(path: str, options: formats.FormatOptions) -> Iterator[RawRecord]:
    """The records of a file its task reader reads whole: one serialized Example per question
    (SQuAD JSON, CommonsenseQA JSONL, SWAG CSV), and one ``bad`` record per malformed entry
    or line, so the ingestion report counts them. A training or evaluation split needs
    answers: a multiple-choice file without them (a released test split) fails here."""
    if options.format == formats.SQUAD_FORMAT:
        for entry in squad.iter_questions(path):
            if isinstance(entry, squad.MalformedSquadEntry):
                yield RawRecord(path, None, bad=str(entry))
            else:
                yield RawRecord(path, squad.to_tf_example(entry).SerializeToString(),
                                partition_key=entry.title.encode("utf-8"))
        return
    if options.format == formats.PARALLEL_FORMAT:
        for example in parallel.iter_examples(path, options):
            if isinstance(example, formats.BadRecord):
                yield RawRecord(path, None, bad=f"{example.reason}: {example.detail}")
            else:
                yield RawRecord(path, example.SerializeToString())
        return
    data = multiple_choice_readers.read_multiple_choice(path, format=options.format,
                                                        require_labels=True)
    for example in data.examples:
        yield RawRecord(path,
                        multiple_choice_readers.to_tf_example(example).SerializeToString())
    for line in data.malformed:
        yield RawRecord(path, None, bad=str(line))


class _ReadFileRecordsFn(beam.DoFn):
    """ReadableFile -> RawRecords, streaming the file so documents stay whole."""

    def __init__(self, options: formats.FormatOptions):
        self._options = options

    def process(self, readable_file: fileio.ReadableFile) -> Iterator[RawRecord]:
        path = readable_file.metadata.path
        if self._options.format in formats.WHOLE_FILE_FORMATS:
            yield from whole_file_records(path, self._options)
            return
        with readable_file.open(compression_type=CompressionTypes.AUTO) as handle:
            yield from file_records(path, handle, self._options)


def eval_partition(record: RawRecord, num_partitions: int, eval_fraction: float) -> int:
    """1 (eval) for a fraction ``eval_fraction`` of records chosen by a hash of their content."""
    del num_partitions  # Always [train, eval].
    content = record.partition_key or record.payload
    content = content if content is not None else record.source.encode("utf-8")
    bucket = int.from_bytes(hashlib.blake2b(content, digest_size=8).digest(), "big")
    return int(bucket / 2**64 < eval_fraction)


def parse_record(record: Any, options: formats.FormatOptions,
                 columns: Sequence[str] = ()) -> formats.ParseResult:
    """Dispatches one raw record to its format's parser."""
    if options.format == formats.TEXT_FORMAT:
        return formats.parse_text_document(record, options)
    if options.format in formats.TABLE_FORMATS:
        return formats.parse_table_row(record, columns, options)
    if options.format == formats.JSONL_FORMAT:
        return formats.parse_json_line(record, options)
    if options.format == formats.TFDS_FORMAT:
        return formats.parse_tfds_record(record, options)
    if options.format == formats.CONLL_FORMAT:
        return conll.parse_conll_sentence(record, options)
    if options.format in formats.WHOLE_FILE_FORMATS:
        # The task reader already made (and checked) the Example: the payload is its bytes.
        return example_pb2.Example.FromString(record)
    raise ValueError(f"unknown format {options.format!r}; expected one of {formats.ALL_FORMATS}")


class _ParseRecordsFn(beam.DoFn):
    """Raw record -> serialized tf.train.Example; counts every outcome.

    Each outcome increments a Beam counter (namespace ``lmfactory.ingest``) and a per-bundle
    tally ``{split: {outcome: count}}`` that goes out on the ``outcome_counts`` side output, so
    the report can be made even where the runner does not report metrics.
    """

    def __init__(self, split: str, options: formats.FormatOptions):
        self._split = split
        self._options = options
        self._counters = {}
        self._bundle_counts = collections.Counter()
        self._logged_bad_records = 0

    def setup(self):
        self._counters = {outcome: beam.metrics.Metrics.counter(METRICS_NAMESPACE, outcome)
                          for outcome in formats.OUTCOMES}

    def start_bundle(self):
        self._bundle_counts = collections.Counter()

    def process(self, record: Any) -> Iterator[bytes]:
        if isinstance(record, RawRecord) and record.bad:
            result = formats.BadRecord(formats.MALFORMED, record.bad)
        elif isinstance(record, RawRecord):
            result = parse_record(record.payload, self._options, record.columns)
        else:
            result = parse_record(record, self._options)
        outcome = result.reason if isinstance(result, formats.BadRecord) else formats.GOOD
        self._counters[outcome].inc()
        self._bundle_counts[outcome] += 1
        if outcome == formats.GOOD:
            yield result.SerializeToString()
        else:
            self._log_bad_record(record, result)

    def finish_bundle(self):
        if self._bundle_counts:
            counts = windowed_value.WindowedValue(
                {self._split: dict(self._bundle_counts)}, window.GlobalWindow().max_timestamp(),
                [window.GlobalWindow()])
            yield beam.pvalue.TaggedOutput(COUNTS_TAG, counts)

    def _log_bad_record(self, record: Any, bad: formats.BadRecord) -> None:
        if self._logged_bad_records < _MAX_LOGGED_BAD_RECORDS:
            source = record.source if isinstance(record, RawRecord) else "tfds"
            logging.warning("Skipping a bad record (%s) from %s: %s", bad.reason, source,
                            bad.detail)
        self._logged_bad_records += 1


def split_output_dir(output_dir: str, split: str) -> str:
    return os.path.join(output_dir, f"{SPLIT_DIR_PREFIX}{split}")


def read_file_splits(pipeline: beam.Pipeline, config: IngestConfig) -> Dict[str, Any]:
    """Split name -> PCollection of RawRecords."""
    def read(label: str, glob: str):
        return (pipeline
                | f"MatchFiles[{label}]" >> fileio.MatchFiles(glob)
                | f"ReadMatches[{label}]" >> fileio.ReadMatches()
                | f"ReadRecords[{label}]" >> beam.ParDo(_ReadFileRecordsFn(config.options)))

    if not config.path:
        return {split: read(split, glob) for split, glob in config.split_globs.items()}
    records = read("all", config.path)
    if config.eval_fraction == 0:
        return {TRAIN_SPLIT: records}
    train, evaluation = records | "SplitByContentHash" >> beam.Partition(
        eval_partition, 2, config.eval_fraction)
    return {TRAIN_SPLIT: train, EVAL_SPLIT: evaluation}


def read_tfds_splits(pipeline: beam.Pipeline, config: IngestConfig, builder) -> Dict[str, Any]:
    """Split name -> PCollection of decoded TFDS examples (dicts of NumPy values)."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return {split: (pipeline
                    | f"ReadTfds[{split}]" >> tfds.beam.ReadFromTFDS(builder, split=tfds_split)
                    | f"AsNumpy[{split}]" >> beam.Map(tfds.as_numpy))
            for split, tfds_split in config.tfds_splits.items()}


def parse_and_write_split(split: str, records, output_dir: str,
                           options: formats.FormatOptions,
                           budget: Optional[sampling.LabelBudget] = None):
    """Parses and writes one split (with a ``budget``, only its stratified sample,
    sampling.py); returns its PCollection of per-bundle outcome counts."""
    parsed = records | parse_step_label(split) >> beam.ParDo(
        _ParseRecordsFn(split, options)).with_outputs(COUNTS_TAG, main="examples")
    examples = parsed.examples
    if budget is not None:
        examples = sampling.sample(examples, budget, split)
    _ = (examples
         | f"WriteSplit[{split}]" >> beam.io.WriteToTFRecord(
             os.path.join(split_output_dir(output_dir, split), RECORD_FILE_PREFIX),
             file_name_suffix=".gz", compression_type=CompressionTypes.GZIP))
    return parsed[COUNTS_TAG]


def write_counts(bundle_counts: Sequence[Any], counts_path: str) -> None:
    """Sums the per-bundle counts of all splits into one small JSON file (written once)."""
    _ = (tuple(bundle_counts)
         | "FlattenCounts" >> beam.Flatten()
         | "SumCounts" >> beam.CombineGlobally(merge_split_counts)
         | "WriteCounts" >> beam.Map(write_json_file, counts_path))
