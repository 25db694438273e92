"""Hive-style partition directories of the decoded rows: which directory each row is published under.

Pure, no I/O. A row of topic ``T`` goes to ``T/<level>/<level>...`` (relative to the output root),
one level per term of the pipeline's :class:`~laminar_kafka.cluster.lake.partition_spec.PartitionSpec`
(``partition-by``)::

    T/dt=YYYY-MM-DD               day (of _timestamp, the default)
    T/dt=YYYY-MM-DD/hour=HH       hour (of _timestamp)
    T                             none
    T/region=eu/customer_id_bucket=3      region, bucket[16](customer_id)

The Kafka-time levels come from ``_timestamp`` in UTC; a row whose ``_timestamp`` is null goes to
``dt=__HIVE_DEFAULT_PARTITION__`` (and ``hour=__HIVE_DEFAULT_PARTITION__``), the value Hive, Spark,
pyarrow and DuckDB read back as null. Field levels use Iceberg's transforms (bucket and truncate are
pyiceberg-core's, the very functions Iceberg partitions with); their fields are never null here (the
source refuses such records: ``required-fields``), and a null that reaches a field level is a
:class:`SinkError`, never a wrong directory. The topic comes from ``_topic``
(``dictionary<int32, string>`` or a plain string column); a batch without it takes a default topic
when one is configured.

:func:`split_by_partition` cuts a batch into one sub-batch per directory. The normal case (one
topic, every level one value) costs a vectorised min/max scan per level (numpy: a node that imports
no ``pyarrow.compute`` starts 50-60 ms of CPU sooner) and returns the batch itself, uncopied;
otherwise the rows are grouped by a stable sort over every level's key and one ``take``, so every
sub-batch keeps the order its rows had in the batch. Nothing iterates over rows in Python: only
over the distinct values, to name their directories.
"""
from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import (
    MAX_NAME_BYTES,
    TIMESTAMP_FIELD,
    PartitionSpec,
    PartitionTerm,
    Transform,
)
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.decode.required_fields import kind_of

__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "TIMESTAMP_COLUMN",
    "TOPIC_COLUMN",
    "check_partition_columns",
    "check_topic",
    "encode_value",
    "split_by_partition",
]

TOPIC_COLUMN = "_topic"
TIMESTAMP_COLUMN = TIMESTAMP_FIELD
#: the partition value of a row without a timestamp (read back as null by Hive-aware readers)
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

#: Kafka's rule for topic names; "." and ".." are refused too (Kafka refuses them as well)
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]+")
_MISSING_TIMESTAMP = f"partition column {TIMESTAMP_COLUMN} is missing (set partition-by = none)"
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_SECONDS_PER = {Transform.DAY: 86_400, Transform.HOUR: 3_600}
#: key of a null Kafka timestamp (no real bucket is this small)
_NULL_KEY = np.iinfo(np.int64).min


def check_topic(topic: str) -> str:
    """Return ``topic`` when it is a safe directory name: Kafka's ``[A-Za-z0-9._-]+``, not ``.`` or
    ``..``, and not starting with ``_`` or ``.`` (lake readers skip such directories, so its rows
    would be invisible). Raises :class:`SinkError` otherwise."""
    if not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
        raise SinkError(f"topic {topic!r} cannot name an output directory: it must match {_TOPIC_RE.pattern}")
    if topic.startswith(("_", ".")):
        raise SinkError(f"topic {topic!r} starts with {topic[0]!r}: lake readers skip such directories")
    return topic


def check_partition_columns(schema_names: Iterable[str], spec: PartitionSpec) -> None:
    """Raise :class:`ConfigurationError` when records with these column names cannot be partitioned by
    ``spec``'s Kafka-time level (``_timestamp`` missing). Field levels are the source's to check
    (``required-fields``)."""
    if any(t.is_kafka_time for t in spec.terms) and TIMESTAMP_COLUMN not in set(schema_names):
        raise ConfigurationError(_MISSING_TIMESTAMP)


def encode_value(value: object) -> str:
    """A partition value as it appears in a directory name: integers in decimal, booleans as
    ``true``/``false``, text and bytes percent-encoded outside ``[A-Za-z0-9._~-]``, and the first
    letter of a ``null`` in any case too (DuckDB reads a directory ``f=null`` or ``f=NULL`` as null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (str, bytes)):
        encoded = urllib.parse.quote(value, safe="")
        if encoded.lower() == "null":
            return f"%{ord(encoded[0]):02X}{encoded[1:]}"
        return encoded
    raise SinkError(f"partition value {value!r} ({type(value).__name__}) cannot name a directory")


def split_by_partition(
    batch: pa.RecordBatch, spec: PartitionSpec, default_topic: str | None = None, *, table: str | None = None,
) -> list[tuple[str, pa.RecordBatch]]:
    """Cut ``batch`` into ``(directory, rows)`` pairs, one per partition directory present, each
    keeping its rows' order; an empty batch gives ``[]``. With ``table`` (rows routed by the
    ``table-template``, :mod:`laminar_kafka.cluster.lake.routing`) every directory starts with
    ``table`` instead of the rows' topic.

    Raises :class:`SinkError` when ``_topic`` is missing and there is no ``default_topic``, when
    ``_topic`` has nulls or names an unsafe directory, when ``_timestamp`` is missing under a
    Kafka-time level, or when a field level's column is missing, of a type its transform does not
    take, or null.
    """
    if batch.num_rows == 0:
        return []
    topics, codes = ([table], None) if table is not None else _topic_codes(batch, default_topic)
    levels = [_level(batch, term) for term in spec.terms]
    if len(topics) == 1 and all(level.keys is None for level in levels):
        return [(_directory(topics[0], levels, [level.constant for level in levels]), batch)]
    return _split(batch, topics, codes, levels)


@dataclass(frozen=True)
class _Level:
    """One directory level of a batch: each row's int64 key (``None``: every row has ``constant``)
    and the directory segment of a key."""

    keys: np.ndarray | None
    constant: int
    segment: Callable[[int], str]


def _directory(topic: str, levels: list[_Level], keys: list[int]) -> str:
    check_topic(topic)
    segments = [level.segment(key) for level, key in zip(levels, keys, strict=True)]
    for segment in segments:
        if len(segment.encode()) > MAX_NAME_BYTES:  # identity values are bounded by the source; a wide truncate is not
            raise SinkError(f"partition directory {segment[:60]}... is {len(segment.encode())} bytes, more than the "
                            f"{MAX_NAME_BYTES} a file name may have: partition by a narrower truncate[W] or a bucket[N]")
    return "/".join([topic, *segments])


def _level(batch: pa.RecordBatch, term: PartitionTerm) -> _Level:
    if term.is_kafka_time:
        return _kafka_time_level(batch, term.transform)
    index = batch.schema.get_field_index(term.source)
    if index < 0:
        raise SinkError(f"partition-by {term.text}: the rows have no column {term.source}")
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = kind_of(column.type)
    if kind is None or kind.value not in term.transform.kinds:  # e.g. truncate of a boolean, identity of a uint64
        raise SinkError(f"partition-by {term.text}: {term.source} is {column.type}, which "
                        f"{term.transform.value} does not take (the source should have refused it: required-fields)")
    if column.null_count:
        raise SinkError(f"partition-by {term.text}: {column.null_count} row(s) have a null {term.source} "
                        "(the source should have refused them: required-fields)")
    try:
        return _field_level(column, term)
    except (pa.ArrowException, ValueError) as exc:
        raise SinkError(f"partition-by {term.text}: cannot transform {term.source} ({column.type}): {exc}") from None


def _kafka_time_level(batch: pa.RecordBatch, transform: Transform) -> _Level:
    """``dt=`` (and ``hour=``) of ``_timestamp``: keys are days or hours since the epoch, a null
    timestamp :data:`_NULL_KEY`."""
    index = batch.schema.get_field_index(TIMESTAMP_COLUMN)
    if index < 0:
        raise SinkError(_MISSING_TIMESTAMP)
    column = batch.column(index)
    if not pa.types.is_timestamp(column.type):
        raise SinkError(f"{TIMESTAMP_COLUMN} is {column.type}, not a timestamp")
    per_key = _SECONDS_PER[transform] * _UNITS_PER_SECOND[column.type.unit]
    segment = functools.partial(_kafka_time_segment, transform)
    values = column.view(pa.int64())
    nulls = values.null_count
    if nulls == len(values):
        return _Level(None, _NULL_KEY, segment)
    ints = values.fill_null(0).to_numpy(zero_copy_only=False) if nulls else values.to_numpy(zero_copy_only=False)
    if not nulls:
        low, high = int(ints.min()) // per_key, int(ints.max()) // per_key
        if low == high:
            return _Level(None, low, segment)
    keys = np.floor_divide(ints, per_key)
    if nulls:
        keys[values.is_null().to_numpy(zero_copy_only=False)] = _NULL_KEY
    return _Level(keys, 0, segment)


@functools.lru_cache(maxsize=4096)
def _kafka_time_segment(transform: Transform, key: int) -> str:
    if key == _NULL_KEY:
        if transform is Transform.HOUR:
            return f"dt={HIVE_DEFAULT_PARTITION}/hour={HIVE_DEFAULT_PARTITION}"
        return f"dt={HIVE_DEFAULT_PARTITION}"
    if transform is Transform.DAY:
        return f"dt={np.datetime_as_string(np.datetime64(key, 'D'))}"
    day, hour = np.datetime_as_string(np.datetime64(key, "h")).split("T")
    return f"dt={day}/hour={hour}"


def _field_level(column: pa.Array, term: PartitionTerm) -> _Level:
    """A field level: integer-valued transforms (day, hour, bucket, integer identity and truncate)
    key rows by their value; the others (text, bytes) by their index among the distinct values."""
    transform, prefix = term.transform, f"{term.directory_key}="
    kind = column.type
    if transform in (Transform.DAY, Transform.HOUR):
        keys = _time_keys(column, transform)
        form: Literal["D", "h"] = "D" if transform is Transform.DAY else "h"
        return _int_level(keys, lambda key: prefix + np.datetime_as_string(np.datetime64(key, form)).replace("T", "-"))
    if transform is Transform.BUCKET:
        keys = _bucket(column, term.parameter or 1).to_numpy(zero_copy_only=False).astype(np.int64)
        return _int_level(keys, lambda key: f"{prefix}{key}")
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_date(kind):
        keys = _integer_keys(column)
        if transform is Transform.TRUNCATE:
            width = term.parameter or 1
            keys = keys - np.mod(keys, width)
        if pa.types.is_boolean(kind):
            return _int_level(keys, lambda key: prefix + ("true" if key else "false"))
        if pa.types.is_date(kind):
            return _int_level(keys, lambda key: prefix + np.datetime_as_string(np.datetime64(key, "D")))
        return _int_level(keys, lambda key: f"{prefix}{key}")
    if transform is Transform.TRUNCATE:
        column = _truncate(column, term.parameter or 1)
    encoded = column.dictionary_encode()
    values = encoded.dictionary.to_pylist()
    if len(values) == 1:
        return _Level(None, 0, lambda key: prefix + encode_value(values[key]))
    keys = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return _Level(keys, 0, lambda key: prefix + encode_value(values[key]))


def _int_level(keys: np.ndarray, segment: Callable[[int], str]) -> _Level:
    low, high = int(keys.min()), int(keys.max())
    return _Level(None, low, segment) if low == high else _Level(keys, 0, segment)


def _integer_keys(column: pa.Array) -> np.ndarray:
    """Integers, booleans (0/1) and dates (days since the epoch) as int64."""
    if pa.types.is_date64(column.type):
        return np.floor_divide(column.view(pa.int64()).to_numpy(zero_copy_only=False), 86_400_000)
    if pa.types.is_date32(column.type):
        return column.view(pa.int32()).to_numpy(zero_copy_only=False).astype(np.int64)
    return column.to_numpy(zero_copy_only=False).astype(np.int64)


def _time_keys(column: pa.Array, transform: Transform) -> np.ndarray:
    """Days (or hours) since the epoch of a timestamp (any unit, UTC) or date column."""
    if pa.types.is_date(column.type):
        if transform is not Transform.DAY:
            raise ValueError("hour takes a timestamp, not a date")
        return _integer_keys(column)
    if not pa.types.is_timestamp(column.type):
        raise ValueError("day and hour take a timestamp or a date")
    per_key = _SECONDS_PER[transform] * _UNITS_PER_SECOND[column.type.unit]
    return np.floor_divide(column.view(pa.int64()).to_numpy(zero_copy_only=False), per_key)


def _iceberg_input(column: pa.Array) -> pa.Array:
    """``column`` in the type Iceberg stores it as (what its bucket hashes): integers as int64,
    timestamps in microseconds without a zone (nanoseconds floored, Iceberg's ``nanos_to_micros``), large or
    fixed strings and bytes as plain ones."""
    kind = column.type
    if pa.types.is_integer(kind):
        return column.cast(pa.int64())
    if pa.types.is_timestamp(kind) and kind.unit == "ns":  # floored, as Iceberg does (a cast truncates toward 0)
        micros = np.floor_divide(column.view(pa.int64()).to_numpy(zero_copy_only=False), 1_000)
        return pa.array(micros, pa.timestamp("us"))
    if pa.types.is_timestamp(kind):
        return column.cast(pa.timestamp("us"))
    if pa.types.is_large_string(kind):
        return column.cast(pa.string())
    if pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return column.cast(pa.binary())
    if pa.types.is_date64(kind):
        return column.cast(pa.date32())
    return column


def _bucket(column: pa.Array, count: int) -> pa.Array:
    from pyiceberg_core import transform

    return transform.bucket(_iceberg_input(column), count)


def _truncate(column: pa.Array, width: int) -> pa.Array:
    from pyiceberg_core import transform

    return transform.truncate(_iceberg_input(column), width)


def _topic_codes(batch: pa.RecordBatch, default_topic: str | None) -> tuple[list[str], pa.Array | None]:
    """The distinct topics of ``batch`` and, when there are several, each row's index into them."""
    index = batch.schema.get_field_index(TOPIC_COLUMN)
    if index < 0:
        if default_topic is None:
            raise SinkError(f"batch has no {TOPIC_COLUMN} column and no default topic is configured")
        return [default_topic], None
    column = batch.column(index)
    if column.null_count:
        raise SinkError(f"{TOPIC_COLUMN} has {column.null_count} null value(s)")
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    dictionary, indices = column.dictionary, column.indices
    if len(dictionary) == 1:
        return [str(dictionary[0].as_py())], None
    codes = indices.to_numpy(zero_copy_only=False)
    low, high = int(codes.min()), int(codes.max())
    if low == high:
        return [str(dictionary[low].as_py())], None
    return [str(t) for t in dictionary.to_pylist()], indices


def _split(
    batch: pa.RecordBatch, topics: list[str], codes: pa.Array | None, levels: list[_Level],
) -> list[tuple[str, pa.RecordBatch]]:
    """Group rows by (topic, level keys...) with one stable sort and one take; slice the groups."""
    rows = batch.num_rows
    topic_key = np.zeros(rows, np.int64) if codes is None else codes.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = [topic_key] + [np.full(rows, level.constant, np.int64) if level.keys is None else level.keys
                          for level in levels]
    order = np.lexsort(tuple(reversed(keys)))  # stable: rows keep their order inside a group
    keys = [key[order] for key in keys]
    change = np.zeros(rows - 1, bool)
    for key in keys:
        change |= np.diff(key) != 0
    starts = np.concatenate(([0], np.flatnonzero(change) + 1, [rows]))
    grouped = batch.take(pa.array(order))
    parts = []
    for start, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        topic = topics[int(keys[0][start])]
        directory = _directory(topic, levels, [int(key[start]) for key in keys[1:]])
        parts.append((directory, grouped.slice(start, end - start)))
    return parts
