"""Consumed records as plain columns: the fields of one ``consume`` call's messages, read once.

The reader thread turns each chunk of :class:`confluent_kafka.Message` objects into a
:class:`Records` value right after ``consume`` and lets the messages go. Messages are objects the
cyclic garbage collector tracks: with tens of thousands of them waiting in the FIFO, every full
collection walked them all (about a fifth of the source's CPU in ``bench/bench_landing.py``'s
profile). Lists of bytes and ints are not tracked, and each field is read with one C-level
``map`` per chunk.

Pure values: no client calls, no clock. :class:`RecordFields` says which optional fields are read
(a timestamp costs more than the other fields together), so a source reads only what its batches
and its rejected rows need.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar, cast

import pyarrow as pa
from confluent_kafka import Message

from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig

__all__ = ["Headers", "RecordFields", "Records"]

Headers = list[tuple[str, bytes | None]] | None

_T = TypeVar("_T")

_TIME = itemgetter(1)
#: the timestamp of a message that has none (Kafka's ``RecordBatch.NO_TIMESTAMP``)
NO_TIMESTAMP = -1


@dataclass(frozen=True)
class RecordFields:
    """Which fields :meth:`Records.of` reads besides partition, offset and value.

    ``topic``: the topic every message has (a source of one named topic), or ``None`` to read each
    message's topic. ``timestamps``, ``keys``, ``headers``: read these fields (otherwise they are
    ``None`` in :class:`Records`). ``value_column``: copy the values into an Arrow binary column at
    once (``format=raw``: the column is all the batch needs, and the copy is cheapest while the
    bytes the client just made are still in the CPU cache) instead of keeping the bytes objects.
    """

    topic: str | None
    timestamps: bool = True
    keys: bool = True
    headers: bool = False
    value_column: bool = False

    @classmethod
    def of(cls, config: KafkaSourceConfig, *, keeps_rejected: bool) -> RecordFields:
        """The fields a source of ``config`` needs: its metadata columns, the keys in upsert mode
        (a delete's key fields may come from its record key) and, when it keeps rejected records
        (``on-bad-record=skip``), the timestamp and key of every rejected row."""
        metadata = config.include_metadata
        return cls(
            topic=config.topics[0] if len(config.topics) == 1 and config.topic_pattern is None else None,
            timestamps="_timestamp" in metadata or keeps_rejected,
            keys="_key" in metadata or keeps_rejected or bool(config.upsert_keys),
            headers="_headers" in metadata,
            value_column=config.format is Format.RAW,
        )


@dataclass(frozen=True, eq=False)
class Records:
    """Records in client order, one list per field, all of one length.

    ``topics`` is a ``str`` when every record has that topic. ``timestamps`` holds milliseconds
    since the epoch, ``None`` for a record without one (-1 from the client). ``values`` is a list of
    bytes, or an Arrow binary array (:attr:`RecordFields.value_column`); ``timestamps``, ``keys`` and ``headers``
    are ``None`` when not read (:class:`RecordFields`). Lists are shared, never mutated.
    """

    partitions: list[int]
    offsets: list[int]
    values: list[bytes | None] | pa.BinaryArray
    topics: list[str] | str
    timestamps: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    headers: list[Headers] | None = None

    @classmethod
    def of(cls, messages: Sequence[Message], fields: RecordFields) -> Records:
        """The fields of ``messages`` (all without client error)."""
        timestamps: list[int | None] | None = None
        if fields.timestamps:
            # Each (kind, ms) tuple is freed at once (tuples are tracked by the garbage collector
            # too). librdkafka gives -1 ms for a message without a timestamp, and Kafka's "no
            # timestamp" is -1 whatever the kind says: both are None.
            timestamps = list(map(_TIME, map(Message.timestamp, messages)))
            if NO_TIMESTAMP in timestamps:
                timestamps = [None if ts == NO_TIMESTAMP else ts for ts in timestamps]
        # The stubs make topic, partition and offset Optional for the sake of error events, and
        # headers the producer's input type; a consumed message without error has all three, and
        # its headers are a list of (str, bytes | None) pairs or None.
        return cls(
            partitions=cast("list[int]", list(map(Message.partition, messages))),
            offsets=cast("list[int]", list(map(Message.offset, messages))),
            values=(pa.array(list(map(Message.value, messages)), type=pa.binary()) if fields.value_column
                    else list(map(Message.value, messages))),
            topics=(fields.topic if fields.topic is not None
                    else cast("list[str]", list(map(Message.topic, messages)))),
            timestamps=timestamps,
            keys=list(map(Message.key, messages)) if fields.keys else None,
            headers=cast("list[Headers]", list(map(Message.headers, messages))) if fields.headers else None,
        )

    def __len__(self) -> int:
        return len(self.offsets)

    def topic_at(self, index: int) -> str:
        return self.topics if isinstance(self.topics, str) else self.topics[index]

    def topic_list(self) -> list[str]:
        """One topic per record."""
        return [self.topics] * len(self) if isinstance(self.topics, str) else self.topics

    def slice(self, start: int, end: int) -> Records:
        """Records ``start`` to ``end`` (exclusive); ``self`` when that is all of them."""
        if start == 0 and end >= len(self):
            return self
        return Records(
            self.partitions[start:end], self.offsets[start:end], self.values[start:end],
            self.topics if isinstance(self.topics, str) else self.topics[start:end],
            None if self.timestamps is None else self.timestamps[start:end],
            None if self.keys is None else self.keys[start:end],
            None if self.headers is None else self.headers[start:end],
        )

    def take(self, indexes: Sequence[int]) -> Records:
        """The records at ``indexes``, in that order."""
        pick = itemgetter(*indexes) if indexes else None
        values = self.values
        picked_values = (values.take(pa.array(indexes, type=pa.int64())) if isinstance(values, pa.Array)
                         else [])

        def picked(values: list[_T]) -> list[_T]:
            if pick is None:
                return []
            return [values[indexes[0]]] if len(indexes) == 1 else list(pick(values))

        return Records(
            picked(self.partitions), picked(self.offsets),
            picked_values if isinstance(values, pa.Array) else picked(values),
            self.topics if isinstance(self.topics, str) else picked(self.topics),
            None if self.timestamps is None else picked(self.timestamps),
            None if self.keys is None else picked(self.keys),
            None if self.headers is None else picked(self.headers),
        )

    @staticmethod
    def concat(parts: Sequence[Records]) -> Records:
        """``parts`` one after the other. Pre: ``parts`` is not empty, all read with one
        :class:`RecordFields`."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        one_topic = None
        if isinstance(first.topics, str) and all(part.topics == first.topics for part in parts):
            one_topic = first.topics

        def joined(lists: Sequence[list[_T] | None]) -> list[_T] | None:
            """The parts' lists of one field end to end; ``None`` when the field was not read."""
            if lists[0] is None:
                return None
            result: list[_T] = []
            for part in lists:
                if part is None:
                    raise TypeError("Records.concat: parts read with different RecordFields")
                result.extend(part)
            return result

        topics: list[str] | str
        if one_topic is not None:
            topics = one_topic
        else:
            topics = []
            for part in parts:
                topics.extend(part.topic_list())
        values: list[bytes | None] | pa.BinaryArray
        if isinstance(first.values, pa.Array):
            values = pa.concat_arrays([part.values for part in parts])
        else:
            values = joined([part.values for part in parts]) or []
        return Records(
            joined([part.partitions for part in parts]) or [], joined([part.offsets for part in parts]) or [],
            values, topics,
            joined([part.timestamps for part in parts]), joined([part.keys for part in parts]),
            joined([part.headers for part in parts]),
        )
