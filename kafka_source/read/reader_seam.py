"""What a :class:`~laminar_kafka.kafka_source.read.reader.Reader` is given at construction besides
its consumer and FIFO: its settings (:class:`ReaderSettings`, a value) and its owner
(:class:`ReaderCallbacks`, the one protocol through which the reader thread asks and reports).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Consumer

from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.decode.records import RecordFields, Records
from laminar_kafka.kafka_source.read.client_watch import STALL_S

__all__ = ["ReaderCallbacks", "ReaderSettings"]


@dataclass(frozen=True)
class ReaderSettings:
    """How a reader reads. Times are seconds."""

    #: the topics whose new partitions discovery assigns
    selector: TopicSelector
    #: the most records one chunk (one FIFO item) holds
    chunk_records: int
    #: how often to look for new partitions of the selected topics; 0: never (vnode mode, where
    #: they arrive through ``Reader.assign_new``)
    discovery_interval_s: float = 0.0
    #: the bound of each metadata or watermark request
    metadata_timeout_s: float = 5.0
    #: how long one ``consume`` call waits for a first record
    consume_timeout_s: float = 0.1
    #: the fields read of each message (:meth:`Records.of`); default: every one but headers
    fields: RecordFields = RecordFields(topic=None)
    #: how long nothing may move on a fetchable partition before the client is probed (and replaced
    #: when it cannot answer: :mod:`~laminar_kafka.kafka_source.read.client_watch`); None: never
    stall_s: float | None = STALL_S


class ReaderCallbacks(Protocol):
    """What the reader thread asks of its owner and reports to it.

    Every method is called on the reader thread, between two ``consume`` calls; none may block
    for long (each delays every record and command behind it).
    """

    def callbacks_pending(self) -> bool:
        """Whether a client callback (an advisory commit's result) is awaited. While true, a full
        FIFO still gets one-record ``consume`` calls, since the client delivers callbacks only
        inside ``consume``."""
        ...

    def prefetch(self, records: Records) -> None:
        """Called with each chunk's records before they enter the FIFO: blocking work that must not
        run on the event loop (e.g. fetching schemas from a registry). Must not raise."""
        ...

    def read_on_at(self, tp: TopicPartitionId, offset: int, low: int, high: int) -> int:
        """The broker answered a fetch of ``tp`` at ``offset`` with "out of range" while it retains
        ``[low, high]``: the offset to read on at. Raises
        :class:`~laminar_kafka.kafka_source.errors.OffsetOutOfRangeError` to fail the reader instead."""
        ...

    def offsets_lost(self, count: int) -> None:
        """Reading resumed ``count`` offsets past where it was (after :meth:`read_on_at`)."""
        ...

    def partitions_discovered(self, count: int) -> None:
        """``count`` new partitions were assigned at their first offset."""
        ...

    def new_consumer(self) -> Consumer:
        """A consumer configured like the first one, not assigned yet: it replaces one that reaches
        no broker any more. Raising fails the reader."""
        ...

    def consumer_replaced(self) -> None:
        """The consumer was replaced by one :meth:`new_consumer` made."""
        ...
