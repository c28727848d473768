"""TextExampleGen's input files, TFDS datasets and their fingerprint (all checked before any
Beam work)."""

import hashlib
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
import tensorflow as tf

from lmfactory.components.example_gen import formats
from lmfactory.components.example_gen.ingest_config import IngestConfig, parse_input_config


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
        rows = table_rows(handle, options)
        header = next(rows, None) if options.has_header else None
    return formats.table_columns(header, options, path)


def table_rows(handle, options: formats.FormatOptions) -> Iterator[Optional[bytes]]:
    lines = formats.iter_file_lines(handle.read, options.max_line_bytes)
    return formats.split_table_rows(lines, options.format, options.max_line_bytes)


def check_tfds_inputs(builder, config: IngestConfig) -> None:
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
