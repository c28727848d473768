"""Parsers for the raw formats TextExampleGen reads (pure functions, no Beam).

Every record parser takes the raw bytes (or, for TFDS, the decoded feature dict) of one record
and returns either a ``tf.train.Example`` or a :class:`BadRecord` saying why the record was
skipped. The readers split a file's lines into records; they never decode text themselves, so
invalid UTF-8 only ever spoils the one record it is in.
"""

import csv
import dataclasses
import io
import json
import math
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional
from typing import Sequence, Tuple, Union

import numpy as np
from tensorflow.core.example import example_pb2
from tensorflow.core.example import feature_pb2

# Record outcomes: "good" plus one reason per kind of bad record (CONTRACTS §1).
GOOD = "good"
INVALID_UTF8 = "invalid_utf8"
NUL_BYTES = "nul_bytes"
EMPTY = "empty"
TOO_LONG = "too_long"
MALFORMED = "malformed"
BAD_REASONS = (INVALID_UTF8, NUL_BYTES, EMPTY, TOO_LONG, MALFORMED)
OUTCOMES = (GOOD,) + BAD_REASONS

TEXT_FORMAT = "text"
TSV_FORMAT = "tsv"
CSV_FORMAT = "csv"
JSONL_FORMAT = "jsonl"
TFDS_FORMAT = "tfds"
# Task formats: CoNLL tagging files (a record per sentence, conll.py), and whole-file formats
# whose file is read by its task reader, one record per question: SQuAD JSON (squad.py),
# CommonsenseQA JSONL and SWAG CSV (multiple_choice_readers.py).
CONLL_FORMAT = "conll"
SQUAD_FORMAT = "squad"
COMMONSENSEQA_FORMAT = "commonsenseqa"
SWAG_FORMAT = "swag"
PARALLEL_FORMAT = "parallel"  # aligned files, one per language (parallel.py)
WHOLE_FILE_FORMATS = (SQUAD_FORMAT, COMMONSENSEQA_FORMAT, SWAG_FORMAT, PARALLEL_FORMAT)
FILE_FORMATS = ((TEXT_FORMAT, TSV_FORMAT, CSV_FORMAT, JSONL_FORMAT, CONLL_FORMAT)
                + WHOLE_FILE_FORMATS)
TABLE_FORMATS = (TSV_FORMAT, CSV_FORMAT)
ALL_FORMATS = FILE_FORMATS + (TFDS_FORMAT,)

TEXT_FEATURE = "text"
LABEL_FEATURE = "label"
LABEL_TYPES = ("int", "float")
DEFAULT_MAX_RECORD_CHARS = 100_000

UTF8_BOM = b"\xef\xbb\xbf"
_READ_CHUNK_BYTES = 1 << 20


class BadRecord(NamedTuple):
    """A record that was skipped: ``reason`` is one of BAD_REASONS, ``detail`` says more."""
    reason: str
    detail: str = ""


ParseResult = Union[example_pb2.Example, BadRecord]


@dataclasses.dataclass(frozen=True)
class FormatOptions:
    """How to turn records of one format into Examples.

    ``text_key`` names the field/column/feature that becomes the ``text`` feature (jsonl
    ``text_field``, TFDS ``text_feature``); ``label_key`` the one that becomes ``label``
    (``label_column``, TFDS ``label_feature``).
    """
    format: str
    column_names: Optional[Tuple[str, ...]] = None
    has_header: bool = True
    label_key: Optional[str] = None
    label_type: str = "int"
    text_key: Optional[str] = None
    max_record_chars: int = DEFAULT_MAX_RECORD_CHARS
    # An int label must be a class id in [0, num_classes) (a classification task's);
    # None = any integer.
    num_classes: Optional[int] = None

    @property
    def max_line_bytes(self) -> int:
        """A line longer than this many bytes surely has more than max_record_chars characters."""
        return 4 * self.max_record_chars + 4


# ---------------------------------------------------------------------------------------------
# Reading lines and splitting them into records.


def iter_file_lines(read_chunk: Callable[[int], bytes],
                    max_line_bytes: int) -> Iterator[Optional[bytes]]:
    """Yields the lines of a file (without their b"\\n"), a UTF-8 BOM at the start removed.

    ``read_chunk(n)`` returns the next at most n bytes (b"" at the end). A line longer than
    ``max_line_bytes`` is yielded as None, without ever holding it whole in memory.
    """
    pending = b""
    overflowed = False
    at_file_start = True
    while True:
        chunk = read_chunk(_READ_CHUNK_BYTES)
        if at_file_start and chunk:
            chunk = chunk[len(UTF8_BOM):] if chunk.startswith(UTF8_BOM) else chunk
            at_file_start = False
        if not chunk:
            break
        *complete_lines, pending = (pending + chunk).split(b"\n")
        for line in complete_lines:
            yield None if overflowed or len(line) > max_line_bytes else line
            overflowed = False
        if len(pending) > max_line_bytes:
            overflowed, pending = True, b""
    if pending or overflowed:
        yield None if overflowed else pending


def _strip_line_end(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def split_documents(lines: Iterable[Optional[bytes]],
                    max_document_bytes: int) -> Iterator[Optional[bytes]]:
    """Groups the lines of a BERT-style corpus into documents (their lines joined by b"\\n").

    Lines are stripped of surrounding ASCII whitespace; a blank line ends a document. Each
    further blank line right after it stands for an empty document and is yielded as b"" (blank
    lines at the start or the end of a file are ignored). A document larger than
    ``max_document_bytes`` (or holding an over-long line, None) is yielded as None.
    """
    document: List[bytes] = []
    document_bytes = 0
    overflowed = False
    blank_lines_since_document = 0
    seen_a_document = False
    for raw_line in lines:
        line = None if raw_line is None else raw_line.strip()
        if line == b"":
            if document or overflowed:
                yield None if overflowed else b"\n".join(document)
                document, document_bytes, overflowed = [], 0, False
            blank_lines_since_document += 1
            continue
        if not document and not overflowed:
            if seen_a_document:
                yield from [b""] * max(0, blank_lines_since_document - 1)
            seen_a_document = True
        blank_lines_since_document = 0
        if line is None or overflowed or document_bytes + len(line) + 1 > max_document_bytes:
            document, document_bytes, overflowed = [], 0, True
            continue
        document.append(line)
        document_bytes += len(line) + 1
    if document or overflowed:
        yield None if overflowed else b"\n".join(document)


def split_table_rows(lines: Iterable[Optional[bytes]], file_format: str,
                     max_row_bytes: int) -> Iterator[Optional[bytes]]:
    """Yields the rows of a TSV/CSV file as bytes; None for an over-long row.

    TSV rows are single lines. A CSV row goes on over line ends while a quoted field is open (an
    odd number of '"' so far), so quoted fields may hold newlines.
    """
    if file_format == TSV_FORMAT:
        for line in lines:
            yield None if line is None else _strip_line_end(line)
        return
    row_lines: List[bytes] = []
    row_bytes = 0
    quote_count = 0
    for line in lines:
        if line is None or row_bytes + len(line) + 1 > max_row_bytes:
            yield None
            row_lines, row_bytes, quote_count = [], 0, 0
            continue
        row_lines.append(line)
        row_bytes += len(line) + 1
        quote_count += line.count(b'"')
        if quote_count % 2 == 0:
            yield _strip_line_end(b"\n".join(row_lines))
            row_lines, row_bytes, quote_count = [], 0, 0
    if row_lines:
        yield _strip_line_end(b"\n".join(row_lines))


# ---------------------------------------------------------------------------------------------
# Decoding and checking one record.


def decode_record(payload: Optional[bytes], max_chars: int) -> Union[str, BadRecord]:
    """Decodes a record's bytes as UTF-8, or says why it is bad (None = over-long while read)."""
    if payload is None:
        return BadRecord(TOO_LONG, "record longer than the reader's limit")
    if b"\x00" in payload:
        return BadRecord(NUL_BYTES, "record holds a NUL byte")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as error:
        return BadRecord(INVALID_UTF8, str(error))
    if not text.strip():
        return BadRecord(EMPTY, "record is empty")
    if len(text) > max_chars:
        return BadRecord(TOO_LONG, f"{len(text)} characters > max_record_chars={max_chars}")
    return text


def bytes_feature(values: Sequence[bytes]) -> feature_pb2.Feature:
    return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=list(values)))


def int64_feature(values: Sequence[int]) -> feature_pb2.Feature:
    return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=list(values)))


def float_feature(values: Sequence[float]) -> feature_pb2.Feature:
    return feature_pb2.Feature(float_list=feature_pb2.FloatList(value=list(values)))


def make_example(features: Mapping[str, feature_pb2.Feature]) -> example_pb2.Example:
    return example_pb2.Example(features=feature_pb2.Features(feature=dict(features)))


def parse_label(value: Any, label_type: str,
                num_classes: Optional[int] = None) -> Union[feature_pb2.Feature, BadRecord]:
    """A label (a string or a JSON/NumPy number) as an int64 or float feature; an int label
    outside [0, ``num_classes``) is a malformed record."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, np.generic):
        value = value.item()
    try:
        if isinstance(value, bool) or value is None:
            raise ValueError(f"not a number: {value!r}")
        if label_type == "float":
            number = float(value.strip() if isinstance(value, str) else value)
            if not math.isfinite(number):
                raise ValueError(f"not a finite number: {value!r}")
            return float_feature([number])
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, float):
            raise ValueError(f"not an integer: {value!r}")
        label = int(value.strip() if isinstance(value, str) else value)
        if num_classes is not None and not 0 <= label < num_classes:
            raise ValueError(f"not a class id of the task's {num_classes} classes "
                             f"[0, {num_classes})")
        return int64_feature([label])
    except (TypeError, ValueError, OverflowError) as error:
        return BadRecord(MALFORMED, f"bad {label_type} label {value!r}: {error}")


def _text_feature_or_bad(value: Any) -> Union[feature_pb2.Feature, BadRecord]:
    if not isinstance(value, str):
        return BadRecord(MALFORMED, f"text field is not a string: {value!r}")
    if not value.strip():
        return BadRecord(EMPTY, "text field is empty")
    return bytes_feature([value.encode("utf-8")])


# ---------------------------------------------------------------------------------------------
# Record parsers, one per format.


def parse_text_document(payload: Optional[bytes], options: FormatOptions) -> ParseResult:
    """A corpus document (lines joined by b"\\n") -> Example with feature ``text``."""
    text = decode_record(payload, options.max_record_chars)
    if isinstance(text, BadRecord):
        return text
    sentences = [line.strip() for line in text.split("\n")]
    document = "\n".join(sentence for sentence in sentences if sentence)
    return make_example({TEXT_FEATURE: bytes_feature([document.encode("utf-8")])})


def split_table_fields(row: str, file_format: str) -> Union[List[str], BadRecord]:
    """The fields of one TSV row (plain tab split, no quoting) or CSV row (RFC 4180 quoting)."""
    if file_format == TSV_FORMAT:
        return row.split("\t")
    try:
        rows = list(csv.reader(io.StringIO(row, newline=""), strict=True))
    except csv.Error as error:
        return BadRecord(MALFORMED, f"bad CSV quoting: {error}")
    if len(rows) != 1:
        return BadRecord(MALFORMED, f"expected one CSV row, got {len(rows)}")
    return rows[0]


def parse_table_row(payload: Optional[bytes], columns: Sequence[str],
                    options: FormatOptions) -> ParseResult:
    """A TSV/CSV row -> Example: one bytes feature per column, label/text columns renamed."""
    row = decode_record(payload, options.max_record_chars)
    if isinstance(row, BadRecord):
        return row
    fields = split_table_fields(row, options.format)
    if isinstance(fields, BadRecord):
        return fields
    if len(fields) != len(columns):
        return BadRecord(MALFORMED, f"expected {len(columns)} columns, got {len(fields)}")
    features = {}
    for column, value in zip(columns, fields):
        name, feature = _column_feature(column, value, options)
        if isinstance(feature, BadRecord):
            return feature
        features[name] = feature
    return make_example(features)


def _column_feature(column: str, value: str, options: FormatOptions):
    if column == options.label_key:
        return LABEL_FEATURE, parse_label(value, options.label_type, options.num_classes)
    if column == options.text_key:
        return TEXT_FEATURE, _text_feature_or_bad(value)
    return column, bytes_feature([value.encode("utf-8")])


def table_columns(header: Optional[bytes], options: FormatOptions, source: str) -> Tuple[str, ...]:
    """The column names of a TSV/CSV file from its header row and the options.

    Raises ValueError naming the file and the expected columns when the file does not have the
    configured shape (no header, a header without the label/text column, a count mismatch).
    """
    names = _header_names(header, options, source)
    _check_columns(names, options, source)
    return names


def _header_names(header: Optional[bytes], options: FormatOptions, source: str):
    if not options.has_header:
        return tuple(options.column_names)
    expected = list(options.column_names or _required_columns(options))
    if header is None:
        raise ValueError(f"{source}: file is empty; expected a header row with columns {expected}")
    try:
        fields = split_table_fields(_strip_line_end(header).decode("utf-8"), options.format)
    except UnicodeDecodeError as error:
        raise ValueError(f"{source}: header row is not UTF-8 ({error}); "
                         f"expected columns {expected}") from error
    if isinstance(fields, BadRecord):
        raise ValueError(f"{source}: unreadable header row ({fields.detail}); "
                         f"expected columns {expected}")
    if options.column_names is None:
        return tuple(field.strip() for field in fields)
    if len(fields) != len(options.column_names):
        raise ValueError(f"{source}: header has {len(fields)} columns {fields}; expected "
                         f"{len(options.column_names)} columns {list(options.column_names)}")
    return tuple(options.column_names)


def _required_columns(options: FormatOptions) -> List[str]:
    return [key for key in (options.text_key, options.label_key) if key]


def _check_columns(columns: Tuple[str, ...], options: FormatOptions, source: str) -> None:
    missing = [key for key in _required_columns(options) if key not in columns]
    if missing:
        raise ValueError(f"{source}: columns {list(columns)} lack {missing}; expected columns "
                         f"including {_required_columns(options)}")
    if len(set(columns)) != len(columns):
        raise ValueError(f"{source}: duplicate column names in {list(columns)}")
    renamed = {options.label_key: LABEL_FEATURE, options.text_key: TEXT_FEATURE}
    feature_names = [renamed.get(column, column) for column in columns]
    if len(set(feature_names)) != len(feature_names):
        raise ValueError(f"{source}: columns {list(columns)} clash with the renamed features "
                         f"{feature_names}; expected unique feature names")


def parse_json_line(payload: Optional[bytes], options: FormatOptions) -> ParseResult:
    """A JSON-lines record (one object) -> Example; see :func:`value_to_feature`."""
    line = decode_record(payload, options.max_record_chars)
    if isinstance(line, BadRecord):
        return line
    try:
        record = json.loads(line)
    except ValueError as error:
        return BadRecord(MALFORMED, f"bad JSON: {error}")
    if not isinstance(record, dict):
        return BadRecord(MALFORMED, f"expected a JSON object, got {type(record).__name__}")
    return record_to_example(record, options)


def record_to_example(record: Mapping[str, Any], options: FormatOptions) -> ParseResult:
    """A dict of field -> value -> Example; text_key -> ``text``, label_key -> ``label``."""
    missing = [key for key in _required_columns(options) if key not in record]
    if missing:
        return BadRecord(MALFORMED, f"record lacks fields {missing}")
    features = {}
    for key, value in record.items():
        name, feature = _record_feature(key, value, options)
        if isinstance(feature, BadRecord):
            return feature
        if feature is not None:
            features[name] = feature
    if not features:
        return BadRecord(EMPTY, "record has no fields")
    return make_example(features)


def _record_feature(key: str, value: Any, options: FormatOptions):
    if key == options.label_key:
        return LABEL_FEATURE, parse_label(value, options.label_type, options.num_classes)
    if key == options.text_key:
        return TEXT_FEATURE, _text_feature_or_bad(_as_text(value))
    return key, value_to_feature(value)


def _as_text(value: Any) -> Any:
    """A single str/bytes value (NumPy scalars included) as str; anything else unchanged."""
    values = _as_value_list(value)
    if not values or len(values) != 1 or not isinstance(values[0], (str, bytes)):
        return value
    return values[0] if isinstance(values[0], str) else values[0].decode("utf-8", "replace")


def value_to_feature(value: Any) -> Optional[feature_pb2.Feature]:
    """A JSON/NumPy value as a Feature: strings -> bytes, ints/bools -> int64, floats -> float.

    Lists of one kind become lists; None and empty lists are left out (None); anything else
    (objects, mixed lists) is kept as its JSON text.
    """
    values = _as_value_list(value)
    if values is None or not values:
        return None
    if all(isinstance(item, (str, bytes)) for item in values):
        return bytes_feature([_to_bytes(item) for item in values])
    if all(isinstance(item, (bool, int)) for item in values):
        if all(-2**63 <= item < 2**63 for item in values):
            return int64_feature([int(item) for item in values])
    elif all(isinstance(item, (bool, int, float)) for item in values):
        return float_feature([float(item) for item in values])
    return bytes_feature([json.dumps(value, sort_keys=True, default=str).encode("utf-8")])


def _as_value_list(value: Any) -> Optional[list]:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value.ravel().tolist()
    if isinstance(value, np.generic):
        return [value.item()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _to_bytes(item: Union[str, bytes]) -> bytes:
    return item if isinstance(item, bytes) else item.encode("utf-8")


def flatten_features(record: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested feature dicts (TFDS FeaturesDict) flattened to "outer/inner" keys."""
    flat = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_features(value, prefix=f"{name}/"))
        else:
            flat[name] = value
    return flat


def parse_tfds_record(record: Mapping[str, Any], options: FormatOptions) -> ParseResult:
    """A decoded TFDS example (NumPy values) -> Example, string features checked like text."""
    flat = flatten_features(record)
    checked = decode_record(_record_text_bytes(flat, options), options.max_record_chars)
    if isinstance(checked, BadRecord):
        return checked
    return record_to_example(flat, options)


def _record_text_bytes(flat: Mapping[str, Any], options: FormatOptions) -> bytes:
    """The bytes a record's bad-record checks look at: its text feature, else all strings."""
    if options.text_key in flat:
        return b"\n".join(_string_values(flat[options.text_key]))
    return b"\n".join(item for value in flat.values() for item in _string_values(value))


def _string_values(value: Any) -> List[bytes]:
    values = _as_value_list(value) or []
    return [_to_bytes(item) for item in values if isinstance(item, (str, bytes))]
