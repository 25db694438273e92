"""Which record timestamps a batch can carry: years 0001 to 9999 UTC.

Kafka stores a record's timestamp as any 64-bit count of milliseconds, so a producer with a broken
clock, or one that sends microseconds where Kafka expects milliseconds (2024 becomes the year
56 000), writes timestamps no Python ``datetime`` can hold. Such a ``_timestamp`` fails whatever
reads the batch in Python (``as_py``, ``to_pylist``), cannot name a Hive partition directory, and
stops an Iceberg commit (pyiceberg reads column statistics as ``datetime``). The source therefore
treats a record whose ``_timestamp`` lies outside :data:`MIN_TIMESTAMP_MS` ..
:data:`MAX_TIMESTAMP_MS` as a bad record (``on-bad-record``: stop with the record named, or skip
it into the rejected output), like a value that does not decode.

Pure: numpy over the column's buffers, no per-record Python unless a timestamp is out of range.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["MAX_TIMESTAMP_MS", "MIN_TIMESTAMP_MS", "out_of_range_timestamps"]

#: 0001-01-01T00:00:00.000Z in milliseconds since the epoch (Python's ``datetime.min``)
MIN_TIMESTAMP_MS = -62_135_596_800_000
#: 9999-12-31T23:59:59.999Z in milliseconds since the epoch (Python's ``datetime.max``)
MAX_TIMESTAMP_MS = 253_402_300_799_999


def out_of_range_timestamps(column: pa.Array) -> dict[int, str]:
    """The rows of ``column`` (``timestamp[ms]``) whose value lies outside years 0001-9999, by
    index, with the reason; ``{}`` for the normal batch (two vectorised scans). Nulls are fine."""
    if len(column) == 0:
        return {}
    values = np.frombuffer(column.buffers()[1], dtype=np.int64, count=column.offset + len(column))[column.offset:]
    outside = (values < MIN_TIMESTAMP_MS) | (values > MAX_TIMESTAMP_MS)
    if column.null_count:
        outside &= _validity(column)
    if not outside.any():
        return {}
    return {index: _reason(int(values[index])) for index in np.flatnonzero(outside).tolist()}


def _validity(column: pa.Array) -> np.ndarray:
    bitmap = np.frombuffer(column.buffers()[0], dtype=np.uint8)
    bits = np.unpackbits(bitmap, bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)


def _reason(milliseconds: int) -> str:
    side = "after 9999-12-31" if milliseconds > MAX_TIMESTAMP_MS else "before 0001-01-01"
    hint = " (microseconds sent as milliseconds?)" if milliseconds > MAX_TIMESTAMP_MS else ""
    return f"timestamp {milliseconds} ms is {side}, beyond what a datetime, a lake partition or Iceberg holds{hint}"
