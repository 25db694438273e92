"""Rejected records as Arrow: the raw message and why it did not decode (the dead-letter rows).

Pure: built from records the source already holds; no client calls, no clock.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from laminar_kafka.kafka_source.decode.arrow_batch import BadRecord, int32_array, int64_array
from laminar_kafka.kafka_source.decode.records import Records

__all__ = ["REJECTED_SCHEMA", "rejected_batch"]

#: One row per rejected record: where it was, its raw key and value bytes, and the decode error.
REJECTED_SCHEMA = pa.schema([
    pa.field("_topic", pa.string(), nullable=False),
    pa.field("_partition", pa.int32(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=False),
    pa.field("_timestamp", pa.timestamp("ms"), nullable=True),
    pa.field("_key", pa.binary(), nullable=True),
    pa.field("value", pa.binary(), nullable=True),
    pa.field("error", pa.string(), nullable=False),
])


def rejected_batch(records: Records, bad: Sequence[BadRecord]) -> pa.RecordBatch:
    """The rows of ``bad`` (indexes into ``records``), in their order. Pre: ``bad`` is not empty.
    ``_timestamp`` and ``_key`` are null when ``records`` were read without them (a source keeping
    rejected records always reads them: :meth:`~laminar_kafka.kafka_source.decode.records.RecordFields.of`)."""
    rows = records.take([b.index for b in bad])
    count = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(rows.topic_list(), pa.string()),
            int32_array(rows.partitions),
            int64_array(rows.offsets),
            pa.array(rows.timestamps if rows.timestamps is not None else [None] * count, pa.timestamp("ms")),
            pa.array(rows.keys if rows.keys is not None else [None] * count, pa.binary()),
            rows.values if isinstance(rows.values, pa.Array) else pa.array(rows.values, pa.binary()),
            pa.array([b.reason for b in bad], pa.string()),
        ],
        schema=REJECTED_SCHEMA,
    )
