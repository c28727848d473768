"""Serialized ``tf.train.Example`` records of a whole batch at once, built with numpy.

Building a ``tf.train.Example`` message in Python costs about 100 µs per pretraining record
(one ``Feature`` object per feature, a Python list per value list, then
``SerializeToString``); this is where most of PretrainingExampleGen's time went. Written here
because neither TensorFlow nor tf-text has an op that turns dense tensors into serialized
``tf.train.Example`` records (``tf.io.encode_proto`` cannot write the ``map<string, Feature>``
of ``tf.train.Features``). The records are fixed-width: every feature has the same number of
values in every record of the batch (the padded layouts of CONTRACTS §3).

The bytes are those of ``example.SerializeToString(deterministic=True)`` (the protobuf wire
format, https://protobuf.dev/programming-guides/encoding/), which the tests check::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }    entries sorted by key (deterministic)
    map entry { string key = 1; Feature value = 2; }
    Feature   { FloatList float_list = 2; Int64List int64_list = 3; }
    Int64List { repeated int64 value = 1 [packed]; }    base-128 varints, little end first
    FloatList { repeated float value = 1 [packed]; }    4-byte little-endian IEEE floats

Each record is a fixed sequence of byte slots: constant bytes (field tags, keys), varints of
per-record lengths, and the values. Every slot is encoded for all records with vectorised
numpy into a ``[records, slots * bytes-per-varint]`` array with a mask of the bytes in use,
and one boolean selection packs the records end to end.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

_WIRE_LENGTH_DELIMITED = 2
_CHUNK_ROWS = 2048  # records encoded per numpy pass (bounds the temporary arrays)


def _tag(field: int) -> int:
    return (field << 3) | _WIRE_LENGTH_DELIMITED


_EXAMPLE_FEATURES = _tag(1)   # Example.features, Features.feature, entry.key, *List.value
_ENTRY_VALUE = _tag(2)        # map entry value (the Feature)
_FEATURE_TAGS = {"float": _tag(2), "int64": _tag(3)}


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of the base-128 varint of each value (a negative int64 takes 10)."""
    values = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    largest = int(values.max()) if values.size else 0
    if largest < 1 << 32:  # the usual case: cheaper 32-bit comparisons
        values = values.astype(np.uint32)
    lengths = np.ones(values.shape, np.int32)
    for k in range(1, (max(largest.bit_length(), 1) + 6) // 7):
        lengths += values >= (1 << (7 * k))
    return lengths


def _varint_slots(values: np.ndarray):
    """``values [B, W]`` -> ``(bytes [B, W * n], used [B, W * n] or None, bytes per row)``,
    ``n`` the longest varint in the batch; ``used`` is None when every varint is one byte."""
    values = np.asarray(values).astype(np.int64, copy=False).view(np.uint64)
    rows, width = values.shape
    largest = int(values.max()) if values.size else 0
    longest = (max(largest.bit_length(), 1) + 6) // 7
    if longest == 1:
        return values.astype(np.uint8), None, np.full(rows, width, np.int64)
    if largest < 1 << 32:
        values = values.astype(np.uint32)
    lengths = varint_lengths(values)
    encoded = np.empty((rows, width, longest), np.uint8)
    for k in range(longest):
        group = ((values >> (7 * k)) & 0x7F).astype(np.uint8)
        encoded[:, :, k] = group | ((lengths > k + 1).view(np.uint8) << 7)
    used = np.arange(longest, dtype=np.int32) < lengths[:, :, None]
    return (encoded.reshape(rows, width * longest), used.reshape(rows, width * longest),
            lengths.sum(axis=1, dtype=np.int64))


class _Record:
    """The slots of one batch of records, in order; :meth:`pack` joins them."""

    def __init__(self, rows: int):
        self.rows = rows
        self.blocks, self.used = [], []
        self.any_varint = False

    def constant(self, data: bytes) -> None:
        block = np.frombuffer(data, np.uint8)[None, :]
        self.blocks.append(np.broadcast_to(block, (self.rows, len(data))))
        self.used.append(None)

    def varints(self, values: np.ndarray) -> None:
        data, used, _ = _varint_slots(values)
        self.blocks.append(data)
        self.used.append(used)
        self.any_varint |= used is not None

    def pack(self, lengths: np.ndarray) -> list:
        data = np.concatenate(self.blocks, axis=1)
        if self.any_varint:
            used = np.concatenate(
                [np.ones(block.shape, bool) if mask is None else mask
                 for block, mask in zip(self.blocks, self.used)], axis=1)
            flat = data[used].tobytes()
        else:
            flat = data.tobytes()
        ends = np.cumsum(lengths).tolist()
        return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def serialize_examples(int64_features: Mapping[str, np.ndarray],
                       float_features: Mapping[str, np.ndarray] | None = None) -> list:
    """``len(batch)`` serialized ``tf.train.Example`` records, record ``i`` holding row ``i``
    of every feature matrix (``[records, values]``, at least one value per record).

    Equal to ``tf.train.Example(...).SerializeToString(deterministic=True)`` of the same
    features. Int64 values may be negative; float values are stored as float32.
    """
    features = {name: ("int64", np.asarray(values)) for name, values in int64_features.items()}
    for name, values in (float_features or {}).items():
        if name in features:
            raise ValueError(f"Feature {name!r} given as both int64 and float")
        features[name] = ("float", np.asarray(values))
    if not features:
        raise ValueError("serialize_examples needs at least one feature")
    rows = {values.shape[0] for _, values in features.values()}
    if len(rows) != 1 or any(values.ndim != 2 or values.shape[1] < 1
                             for _, values in features.values()):
        raise ValueError("serialize_examples needs [records, values] matrices with the same "
                         f"number of records and at least one value each, got "
                         f"{ {name: values.shape for name, (_, values) in features.items()} }")
    count = rows.pop()
    records = []
    for start in range(0, count, _CHUNK_ROWS):
        chunk = {name: (kind, values[start:start + _CHUNK_ROWS])
                 for name, (kind, values) in features.items()}
        records.extend(_serialize_chunk(chunk, min(_CHUNK_ROWS, count - start)))
    return records


def _serialize_chunk(features: dict, rows: int) -> list:
    entries = []  # per feature, sorted by key: (key bytes, kind, payload slots, payload size)
    for name in sorted(features, key=lambda n: n.encode("utf-8")):
        kind, values = features[name]
        if kind == "float":
            payload = np.ascontiguousarray(values, dtype="<f4").view(np.uint8)
            entries.append((name.encode("utf-8"), kind, (payload, None),
                            np.full(rows, payload.shape[1], np.int64)))
        else:
            data, used, size = _varint_slots(values)
            entries.append((name.encode("utf-8"), kind, (data, used), size))
    sizes = []  # (list, feature, entry) sizes per row of each feature
    for key, _, _, payload_size in entries:
        list_size = 1 + varint_lengths(payload_size) + payload_size
        feature_size = 1 + varint_lengths(list_size) + list_size
        entry_size = (1 + len(_varint(len(key))) + len(key) + 1 + varint_lengths(feature_size)
                      + feature_size)
        sizes.append((list_size, feature_size, entry_size))
    features_size = sum(1 + varint_lengths(entry) + entry for _, _, entry in sizes)
    record = _Record(rows)
    record.constant(bytes([_EXAMPLE_FEATURES]))
    record.varints(features_size[:, None])
    for (key, kind, (data, used), payload_size), (list_size, feature_size, entry_size) \
            in zip(entries, sizes):
        record.constant(bytes([_EXAMPLE_FEATURES]))
        record.varints(entry_size[:, None])
        record.constant(bytes([_EXAMPLE_FEATURES]) + _varint(len(key)) + key
                        + bytes([_ENTRY_VALUE]))
        record.varints(feature_size[:, None])
        record.constant(bytes([_FEATURE_TAGS[kind]]))
        record.varints(list_size[:, None])
        record.constant(bytes([_EXAMPLE_FEATURES]))
        record.varints(payload_size[:, None])
        record.blocks.append(data)
        record.used.append(used)
        record.any_varint |= used is not None
    return record.pack(1 + varint_lengths(features_size) + features_size)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)
