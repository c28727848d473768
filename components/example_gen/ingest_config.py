"""The ``input_config`` of TextExampleGen, validated into an :class:`IngestConfig`."""

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional

from lmfactory.components.example_gen import formats

TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
DEFAULT_EVAL_FRACTION = 0.1

_COMMON_KEYS = {"format", "splits", "path", "eval_fraction", "max_record_chars",
                "train_examples", "seed"}
_FILE_KEYS = {"column_names", "has_header", "label_column", "label_type", "text_field",
              "num_classes"}
_TFDS_KEYS = {"name", "data_dir", "tfds_splits", "text_feature", "label_feature", "label_type",
              "num_classes"}


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
    train_examples: Optional[int] = None
    seed: int = 0

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
    config = (_tfds_config(raw, options) if file_format == formats.TFDS_FORMAT
              else _file_config(raw, options))
    return dataclasses.replace(config, **_label_budget(raw))


def _label_budget(raw: Mapping[str, Any]) -> Dict[str, Any]:
    """``train_examples`` (a positive int: that many train examples are kept, sampling.py;
    the ingestion checks there is a train split) and the ``seed`` of the draw."""
    budget, seed = raw.get("train_examples"), raw.get("seed", 0)
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"input_config train_examples must be a positive int, got "
                             f"{budget!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"input_config seed must be an int, got {seed!r}")
    return {"train_examples": budget, "seed": seed}


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
        max_record_chars=raw.get("max_record_chars", formats.DEFAULT_MAX_RECORD_CHARS),
        num_classes=raw.get("num_classes"))
    _check_format_options(options)
    return options


def _check_format_options(options: formats.FormatOptions) -> None:
    if options.label_type not in formats.LABEL_TYPES:
        raise ValueError(f"input_config label_type {options.label_type!r}: expected one of "
                         f"{formats.LABEL_TYPES}")
    if options.num_classes is not None and (
            isinstance(options.num_classes, bool) or not isinstance(options.num_classes, int)
            or options.num_classes < 1 or options.label_type != "int"):
        raise ValueError(f"input_config num_classes must be a positive int and needs "
                         f"label_type int, got {options.num_classes!r} "
                         f"({options.label_type} labels)")
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
