"""Rejected records as Arrow: the raw message and why it did not decode (the dead-letter rows).

Pure: built from messages the source already holds; no client calls, no clock.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from kafka_source.arrow_batch import BadRecord

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


def rejected_batch(messages: Sequence[Message], bad: Sequence[BadRecord]) -> pa.RecordBatch:
    """The rows of ``bad`` (indexes into ``messages``), in their order. Pre: ``bad`` is not empty."""
    rejected = [messages[b.index] for b in bad]
    stamps = [None if kind == TIMESTAMP_NOT_AVAILABLE else ts for kind, ts in map(Message.timestamp, rejected)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(map(Message.topic, rejected)), pa.string()),
            pa.array(list(map(Message.partition, rejected)), pa.int32()),
            pa.array(list(map(Message.offset, rejected)), pa.int64()),
            pa.array(stamps, pa.timestamp("ms")),
            pa.array(list(map(Message.key, rejected)), pa.binary()),
            pa.array(list(map(Message.value, rejected)), pa.binary()),
            pa.array([b.reason for b in bad], pa.string()),
        ],
        schema=REJECTED_SCHEMA,
    )
