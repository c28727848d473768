"""TextExampleGen executor: raw text/TSV/CSV/JSONL files, task files (CoNLL tagging, SQuAD
JSON, CommonsenseQA JSONL, SWAG CSV) or a prepared TFDS dataset -> Examples.

:func:`ingest` does the work as a plain function (config dict in, report dict out); the TFX
:class:`Executor` only unpacks exec properties, calls it with its own Beam pipeline factory and
fills in the output artifact's properties. Output layout: CONTRACTS §1.
"""

import collections
import dataclasses
import functools
import hashlib
import json
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional
from typing import Sequence, Tuple

import apache_beam as beam
from absl import logging
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.transforms import window
from apache_beam.utils import windowed_value
import tensorflow as tf
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from lmfactory.components.example_gen import conll, formats, multiple_choice, squad

EXAMPLES_KEY = "examples"
INPUT_CONFIG_KEY = "input_config"
INPUT_FINGERPRINT_KEY = "input_fingerprint"

REPORT_FILE_NAME = "ingestion_report.json"
METRICS_NAMESPACE = "lmfactory.ingest"
SPLIT_DIR_PREFIX = "Split-"
RECORD_FILE_PREFIX = "data_tfrecord"
FILE_FORMAT = "tfrecords_gzip"
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
DEFAULT_EVAL_FRACTION = 0.1

_COUNTS_TAG = "outcome_counts"
_COUNTS_FILE_NAME = ".ingest_counts.json"
_MAX_LOGGED_BAD_RECORDS = 5

_COMMON_KEYS = {"format", "splits", "path", "eval_fraction", "max_record_chars"}
_FILE_KEYS = {"column_names", "has_header", "label_column", "label_type", "text_field"}
_TFDS_KEYS = {"name", "data_dir", "tfds_splits", "text_feature", "label_feature", "label_type"}


# ---------------------------------------------------------------------------------------------
# Configuration.


@dataclasses.dataclass(frozen=True)
class IngestConfig:
    """A validated ``input_config``.

    File formats read either ``split_globs`` (split -> glob) or one ``path`` glob whose records
    go to "eval" with probability ``eval_fraction`` (by a hash of their content) and else to
    "train". TFDS reads ``tfds_splits`` (split -> TFDS split string) of ``tfds_name``.
    """
    options: formats.FormatOptions
    split_globs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    path: Optional[str] = None
    eval_fraction: float = DEFAULT_EVAL_FRACTION
    tfds_name: Optional[str] = None
    tfds_data_dir: Optional[str] = None
    tfds_splits: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def is_tfds(self) -> bool:
        return self.options.format == formats.TFDS_FORMAT

    @property
    def input_globs(self) -> List[str]:
        return [self.path] if self.path else list(self.split_globs.values())

    def split_names(self) -> List[str]:
        if self.path:
            return [TRAIN_SPLIT, EVAL_SPLIT] if self.eval_fraction > 0 else [TRAIN_SPLIT]
        return list(self.tfds_splits if self.is_tfds else self.split_globs)


def parse_input_config(input_config: Any) -> IngestConfig:
    """Validates an ``input_config`` (dict or JSON string); raises ValueError when it is wrong."""
    raw = json.loads(input_config) if isinstance(input_config, str) else dict(input_config)
    file_format = raw.get("format")
    if file_format not in formats.ALL_FORMATS:
        raise ValueError(f"input_config format {file_format!r}: expected one of "
                         f"{formats.ALL_FORMATS}")
    allowed_keys = _COMMON_KEYS | (_TFDS_KEYS if file_format == formats.TFDS_FORMAT else _FILE_KEYS)
    unknown_keys = sorted(set(raw) - allowed_keys)
    if unknown_keys:
        raise ValueError(f"input_config: unknown keys {unknown_keys} for format {file_format!r}; "
                         f"expected some of {sorted(allowed_keys)}")
    options = _format_options(raw)
    if file_format == formats.TFDS_FORMAT:
        return _tfds_config(raw, options)
    return _file_config(raw, options)


def _format_options(raw: Mapping[str, Any]) -> formats.FormatOptions:
    is_tfds = raw["format"] == formats.TFDS_FORMAT
    column_names = raw.get("column_names")
    if column_names is not None and not _is_list_of_strings(column_names):
        raise ValueError(f"input_config column_names must be a list of strings, got "
                         f"{column_names!r}")
    options = formats.FormatOptions(
        format=raw["format"],
        column_names=tuple(column_names) if column_names is not None else None,
        has_header=bool(raw.get("has_header", True)),
        label_key=raw.get("label_feature" if is_tfds else "label_column"),
        label_type=raw.get("label_type", "int"),
        text_key=raw.get("text_feature" if is_tfds else "text_field"),
        max_record_chars=raw.get("max_record_chars", formats.DEFAULT_MAX_RECORD_CHARS))
    _check_format_options(options)
    return options


def _check_format_options(options: formats.FormatOptions) -> None:
    if options.label_type not in formats.LABEL_TYPES:
        raise ValueError(f"input_config label_type {options.label_type!r}: expected one of "
                         f"{formats.LABEL_TYPES}")
    if not isinstance(options.max_record_chars, int) or options.max_record_chars <= 0:
        raise ValueError(f"input_config max_record_chars must be a positive int, got "
                         f"{options.max_record_chars!r}")
    if options.format in formats.TABLE_FORMATS and not options.has_header:
        if not options.column_names:
            raise ValueError("input_config has_header=false needs column_names")


def _file_config(raw: Mapping[str, Any], options: formats.FormatOptions) -> IngestConfig:
    has_splits, has_path = "splits" in raw, "path" in raw
    if has_splits == has_path:
        raise ValueError("input_config needs exactly one of 'splits' (split -> glob) or 'path'")
    if has_splits:
        if "eval_fraction" in raw:
            raise ValueError("input_config eval_fraction only goes with 'path', not with 'splits'")
        return IngestConfig(options=options, split_globs=_split_mapping(raw["splits"], "splits"))
    eval_fraction = raw.get("eval_fraction", DEFAULT_EVAL_FRACTION)
    if not isinstance(eval_fraction, (int, float)) or not 0 <= eval_fraction < 1:
        raise ValueError(f"input_config eval_fraction must be in [0, 1), got {eval_fraction!r}")
    if not isinstance(raw["path"], str) or not raw["path"]:
        raise ValueError(f"input_config path must be a glob string, got {raw['path']!r}")
    return IngestConfig(options=options, path=raw["path"], eval_fraction=float(eval_fraction))


def _tfds_config(raw: Mapping[str, Any], options: formats.FormatOptions) -> IngestConfig:
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ValueError("input_config for format 'tfds' needs 'name' (the TFDS dataset name)")
    if "splits" in raw or "path" in raw or "eval_fraction" in raw:
        raise ValueError("input_config for format 'tfds' takes 'tfds_splits', not splits/path")
    tfds_splits = raw.get("tfds_splits")
    return IngestConfig(
        options=options, tfds_name=raw["name"], tfds_data_dir=raw.get("data_dir"),
        tfds_splits=_split_mapping(tfds_splits, "tfds_splits") if tfds_splits else {})


def _split_mapping(mapping: Any, key: str) -> Dict[str, str]:
    if not isinstance(mapping, Mapping) or not mapping:
        raise ValueError(f"input_config {key} must be a non-empty mapping split -> string")
    for split, value in mapping.items():
        if not split or not all(char.isalnum() or char in "_-" for char in split):
            raise ValueError(f"input_config {key}: bad split name {split!r} (letters, digits, _ -)")
        if not isinstance(value, str) or not value:
            raise ValueError(f"input_config {key}[{split!r}] must be a non-empty string")
    return dict(mapping)


def _is_list_of_strings(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


# ---------------------------------------------------------------------------------------------
# Input files, TFDS datasets and their fingerprint.


def match_input_metadata(glob: str) -> List[Any]:
    """FileMetadata of the files a glob (or plain path) matches, sorted by path.

    Raises FileNotFoundError naming the glob when it matches no file.
    """
    try:
        matched = FileSystems.match([glob])[0].metadata_list
    except Exception as error:  # Beam wraps per-filesystem errors in BeamIOError.
        raise FileNotFoundError(f"No input files match {glob!r}: {error}") from error
    files = [metadata for metadata in matched if not tf.io.gfile.isdir(metadata.path)]
    if not files:
        raise FileNotFoundError(f"No input files match {glob!r}")
    return sorted(files, key=lambda metadata: metadata.path)


def match_input_files(glob: str) -> List[str]:
    """The paths a glob matches, sorted; FileNotFoundError naming the glob if none."""
    return [metadata.path for metadata in match_input_metadata(glob)]


def load_tfds_builder(name: str, data_dir: Optional[str]):
    """A read-only builder of the prepared TFDS dataset; FileNotFoundError if not prepared.

    Never downloads or prepares anything: the dataset must already be in ``data_dir``.
    """
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as error:  # DatasetNotFoundError and friends.
        raise FileNotFoundError(f"TFDS dataset {name!r} not found in data_dir {data_dir!r}: "
                                f"{error}") from error
    if not tf.io.gfile.exists(os.path.join(builder.data_dir, "dataset_info.json")):
        raise FileNotFoundError(f"TFDS dataset {name!r} is not prepared in data_dir {data_dir!r} "
                                f"(no {builder.data_dir}/dataset_info.json); TextExampleGen never "
                                "downloads: run download_and_prepare first")
    return tfds.builder_from_directory(builder.data_dir)


def _fingerprint_globs(config: IngestConfig) -> List[str]:
    if config.is_tfds:
        builder = load_tfds_builder(config.tfds_name, config.tfds_data_dir)
        return [os.path.join(builder.data_dir, "*")]
    return config.input_globs


def fingerprint_inputs(input_config: Any, strict: bool = True) -> str:
    """A fingerprint of the input files (paths, sizes, modification times).

    It changes whenever a matched file is added, removed or rewritten, so TFX's cache does not
    reuse a result made from older files. With ``strict=False`` missing inputs are recorded in
    the fingerprint instead of raising FileNotFoundError.
    """
    config = parse_input_config(input_config)
    try:
        globs = _fingerprint_globs(config)
    except FileNotFoundError as error:
        if strict:
            raise
        return f"missing:{error}"
    lines = []
    total_files = total_bytes = missing_globs = 0
    for glob in globs:
        try:
            metadata_list = match_input_metadata(glob)
        except FileNotFoundError:
            if strict:
                raise
            lines.append(f"missing\t{glob}")
            missing_globs += 1
            continue
        for metadata in metadata_list:
            lines.append(f"{metadata.path}\t{metadata.size_in_bytes}\t"
                         f"{metadata.last_updated_in_seconds}")
            total_files += 1
            total_bytes += metadata.size_in_bytes
    digest = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    missing = f",missing:{missing_globs}" if missing_globs else ""
    return f"files:{total_files},bytes:{total_bytes}{missing},sha256:{digest}"


def read_table_header(path: str, options: formats.FormatOptions) -> Tuple[str, ...]:
    """The column names of one TSV/CSV file; ValueError when it lacks the expected columns."""
    with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as handle:
        rows = _table_rows(handle, options)
        header = next(rows, None) if options.has_header else None
    return formats.table_columns(header, options, path)


def _table_rows(handle, options: formats.FormatOptions) -> Iterator[Optional[bytes]]:
    lines = formats.iter_file_lines(handle.read, options.max_line_bytes)
    return formats.split_table_rows(lines, options.format, options.max_line_bytes)


def _check_tfds_inputs(builder, config: IngestConfig) -> None:
    """ValueError naming the dataset when a configured split or feature is not in it."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    available_splits = sorted(builder.info.splits.keys())
    for split, tfds_split in config.tfds_splits.items():
        base_splits = [part.split("[")[0] for part in tfds_split.split("+")]
        unknown = [base for base in base_splits if base not in available_splits]
        if unknown:
            raise ValueError(f"TFDS dataset {config.tfds_name!r}: split {split!r} -> "
                             f"{tfds_split!r} names unknown TFDS splits {unknown}; "
                             f"available: {available_splits}")
    feature_types = _flat_tfds_features(builder.info.features, tfds)
    missing = [key for key in (config.options.text_key, config.options.label_key)
               if key and key not in feature_types]
    unsupported = [name for name, feature in feature_types.items()
                   if not isinstance(feature, tfds.features.Tensor)]
    if missing or unsupported:
        raise ValueError(f"TFDS dataset {config.tfds_name!r} has features {sorted(feature_types)}; "
                         f"expected the configured features {missing} and only text/number "
                         f"features (unsupported: {unsupported})")


def _flat_tfds_features(features, tfds, prefix: str = "") -> Dict[str, Any]:
    flat = {}
    for name, feature in features.items():
        if isinstance(feature, tfds.features.FeaturesDict):
            flat.update(_flat_tfds_features(feature, tfds, prefix=f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = feature
    return flat


# ---------------------------------------------------------------------------------------------
# Beam transforms.


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
        rows = _table_rows(handle, options)
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
    data = multiple_choice.read_multiple_choice(path, format=options.format,
                                                require_labels=True)
    for example in data.examples:
        yield RawRecord(path, multiple_choice.to_tf_example(example).SerializeToString())
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
            result = formats.parse_record(record.payload, self._options, record.columns)
        else:
            result = formats.parse_record(record, self._options)
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
            yield beam.pvalue.TaggedOutput(_COUNTS_TAG, counts)

    def _log_bad_record(self, record: Any, bad: formats.BadRecord) -> None:
        if self._logged_bad_records < _MAX_LOGGED_BAD_RECORDS:
            source = record.source if isinstance(record, RawRecord) else "tfds"
            logging.warning("Skipping a bad record (%s) from %s: %s", bad.reason, source,
                            bad.detail)
        self._logged_bad_records += 1


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


def split_output_dir(output_dir: str, split: str) -> str:
    return os.path.join(output_dir, f"{SPLIT_DIR_PREFIX}{split}")


def _parse_label(split: str) -> str:
    return f"ParseRecords[{split}]"


def _read_file_splits(pipeline: beam.Pipeline, config: IngestConfig) -> Dict[str, Any]:
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


def _read_tfds_splits(pipeline: beam.Pipeline, config: IngestConfig, builder) -> Dict[str, Any]:
    """Split name -> PCollection of decoded TFDS examples (dicts of NumPy values)."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return {split: (pipeline
                    | f"ReadTfds[{split}]" >> tfds.beam.ReadFromTFDS(builder, split=tfds_split)
                    | f"AsNumpy[{split}]" >> beam.Map(tfds.as_numpy))
            for split, tfds_split in config.tfds_splits.items()}


def _parse_and_write_split(split: str, records, output_dir: str,
                           options: formats.FormatOptions):
    """Parses and writes one split; returns its PCollection of per-bundle outcome counts."""
    parsed = records | _parse_label(split) >> beam.ParDo(
        _ParseRecordsFn(split, options)).with_outputs(_COUNTS_TAG, main="examples")
    _ = (parsed.examples
         | f"WriteSplit[{split}]" >> beam.io.WriteToTFRecord(
             os.path.join(split_output_dir(output_dir, split), RECORD_FILE_PREFIX),
             file_name_suffix=".gz", compression_type=CompressionTypes.GZIP))
    return parsed[_COUNTS_TAG]


def _write_counts(bundle_counts: Sequence[Any], counts_path: str) -> None:
    """Sums the per-bundle counts of all splits into one small JSON file (written once)."""
    _ = (tuple(bundle_counts)
         | "FlattenCounts" >> beam.Flatten()
         | "SumCounts" >> beam.CombineGlobally(merge_split_counts)
         | "WriteCounts" >> beam.Map(write_json_file, counts_path))


# ---------------------------------------------------------------------------------------------
# The ingestion report.


def empty_counts() -> Dict[str, int]:
    return {outcome: 0 for outcome in formats.OUTCOMES}


def _with_totals(counts: Mapping[str, int]) -> Dict[str, int]:
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
    matching = [split for split in split_names if _parse_label(split) in (step or "")]
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
        return {split: _with_totals(split_counts) for split, split_counts in counts.items()}

    if metric_counts is not None and normalized(metric_counts) == normalized(side_counts):
        return normalized(metric_counts), "beam_metrics"
    if metric_counts is not None:
        logging.warning("Beam counters %s disagree with the side-output counts %s; reporting the "
                        "latter", metric_counts, side_counts)
    return normalized(side_counts), "side_output"


def make_report(config: IngestConfig, split_counts: Mapping[str, Mapping[str, int]],
                counts_source: str, input_fingerprint: str) -> Dict[str, Any]:
    totals = _with_totals(sum_counts(
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
    }


def summary_line(report: Mapping[str, Any]) -> str:
    totals = report["totals"]
    reasons = ", ".join(f"{reason}={totals[reason]}" for reason in formats.BAD_REASONS
                        if totals[reason])
    splits = ", ".join(f"{split}={counts['good']}" for split, counts in report["splits"].items())
    return (f"TextExampleGen ({report['format']}): {totals['good']} good, {totals['bad']} bad "
            f"records ({reasons or 'none'}); good per split: {splits} "
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


# ---------------------------------------------------------------------------------------------
# Ingestion end to end.


def _check_inputs(config: IngestConfig):
    """Raises FileNotFoundError/ValueError before any Beam work.

    Returns the config (TFDS splits filled in) and, for TFDS, the read-only dataset builder.
    """
    if config.is_tfds:
        builder = load_tfds_builder(config.tfds_name, config.tfds_data_dir)
        if not config.tfds_splits:
            config = dataclasses.replace(
                config, tfds_splits={split: split for split in builder.info.splits.keys()})
        _check_tfds_inputs(builder, config)
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
        beam.Pipeline, argv=list(beam_pipeline_args or []))
    pipeline = make_pipeline()
    split_records = (_read_tfds_splits(pipeline, config, builder) if config.is_tfds
                     else _read_file_splits(pipeline, config))
    _write_counts([_parse_and_write_split(split, records, output_dir, config.options)
                   for split, records in split_records.items()], counts_path)
    result = pipeline.run()
    result.wait_until_finish()
    split_names = list(split_records)
    split_counts, counts_source = choose_counts(
        counts_from_metrics(result, split_names), counts_from_side_output(counts_path, split_names))
    tf.io.gfile.remove(counts_path)
    report = make_report(config, split_counts, counts_source, input_fingerprint)
    write_report(report, output_dir)
    logging.info("%s", summary_line(report))
    check_splits_have_good_records(report)
    return report


def record_examples_properties(examples, report: Mapping[str, Any]) -> None:
    """Sets what TFX's own ExampleGen sets on its Examples artifact."""
    examples.split_names = artifact_utils.encode_split_names(list(report["split_names"]))
    examples.span = 0
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    examples_utils.set_file_format(examples, FILE_FORMAT)
    examples.set_string_custom_property(INPUT_FINGERPRINT_KEY, report["input_fingerprint"])


class Executor(base_beam_executor.BaseBeamExecutor):
    """TFX executor of TextExampleGen: exec properties -> :func:`ingest` -> Examples artifact."""

    def Do(self, input_dict: Dict[str, List[Any]], output_dict: Dict[str, List[Any]],
           exec_properties: Dict[str, Any]) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        report = ingest(exec_properties[INPUT_CONFIG_KEY], examples.uri,
                        make_pipeline=self._make_beam_pipeline)
        expected_fingerprint = exec_properties.get(INPUT_FINGERPRINT_KEY)
        if expected_fingerprint and expected_fingerprint != report["input_fingerprint"]:
            logging.warning("Input files changed since the component was built (fingerprint "
                            "%s, now %s); the output reflects the files as read now",
                            expected_fingerprint, report["input_fingerprint"])
        record_examples_properties(examples, report)
