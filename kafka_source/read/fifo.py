"""The byte-bounded FIFO between the reader thread and the asyncio side, and its items.

Data and control travel in this one FIFO, so a control marker can never overtake a record fetched
before it. Items are :class:`RecordChunk` (the messages of one ``consume`` call plus the consumer
positions after it) or a :class:`ControlItem`. Only chunks count against the byte cap; control
items are never refused. One producer (the reader thread) and one consumer (the asyncio side).
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from laminar_kafka.connector.errors import ConnectorError, FatalError
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.decode.records import Records

__all__ = [
    "AssignmentApplied",
    "ByteBoundedFifo",
    "ControlItem",
    "DrainBoundary",
    "FifoItem",
    "MESSAGE_OVERHEAD_BYTES",
    "PartitionsAssigned",
    "ReaderFailed",
    "RecordChunk",
]

#: Bytes charged per message on top of its value length (key, headers, object overhead).
MESSAGE_OVERHEAD_BYTES = 96


@dataclass(eq=False)
class RecordChunk:
    """The records of one ``consume`` call, in client order.

    ``positions`` holds, for every partition whose consumer position moved during that call, the
    position after it. It is the valid cursor for a partition only once every record of the
    chunk has been emitted (it may lie past transaction markers). ``taken`` counts the records
    already handed to the asyncio side.
    """

    records: Records
    positions: Mapping[TopicPartitionId, int]
    nbytes: int
    taken: int = 0

    @property
    def remaining(self) -> int:
        return len(self.records) - self.taken


class ControlItem:
    """Base of the non-data FIFO items. Subclasses are frozen dataclasses."""


@dataclass(frozen=True)
class PartitionsAssigned(ControlItem):
    """Partitions added to the consumer at these next-offsets; later chunks may carry them."""

    offsets: Mapping[TopicPartitionId, int]


@dataclass(frozen=True)
class ReaderFailed(ControlItem):
    """The reader hit an error the source must surface; everything before it is intact."""

    error: ConnectorError


@dataclass(frozen=True)
class DrainBoundary(ControlItem):
    """Every record fetched before the pause of ``round``'s revoked partitions precedes this item.

    ``positions`` is the reader's position of each revoked partition at the pause: the cursor the
    source holds for it once every earlier item was emitted (the cut).
    """

    round: AssignmentDrainId
    positions: Mapping[TopicPartitionId, int]


@dataclass(frozen=True)
class AssignmentApplied(ControlItem):
    """The consumer released ``released``, rewound ``resumed`` to these offsets and resumed them,
    and acquired ``acquired`` at these offsets; every later chunk reflects it. ``op_id`` names the
    source operation that asked for it."""

    op_id: int
    released: frozenset[TopicPartitionId]
    acquired: Mapping[TopicPartitionId, int]
    resumed: Mapping[TopicPartitionId, int]


FifoItem = RecordChunk | ControlItem


class ByteBoundedFifo:
    """A FIFO of :data:`FifoItem` bounded by the payload bytes of its chunks.

    ``put_chunk`` blocks while the queued bytes are at or over ``max_bytes`` (but always admits a
    chunk into an empty FIFO, so one oversized chunk cannot deadlock; ``over_cap`` admits it at
    once, for the reader's bounded one-record takes). ``put_control`` never blocks.
    The consumer side (:meth:`head`, :meth:`release_head`) never blocks. ``on_ready`` is called
    (outside the lock) after every put, to wake the asyncio side.
    """

    def __init__(self, max_bytes: int, on_ready: Callable[[], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self._items: collections.deque[FifoItem] = collections.deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._on_ready = on_ready

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def put_chunk(
        self, chunk: RecordChunk, stop: threading.Event, timeout: float = 0.1, *, over_cap: bool = False
    ) -> bool:
        """Append ``chunk`` once the byte cap allows (at once with ``over_cap``); False if ``stop``
        was set meanwhile."""
        with self._cond:
            while not over_cap and self._items and self._bytes >= self.max_bytes:
                if stop.is_set():
                    return False
                self._cond.wait(timeout)
            self._items.append(chunk)
            self._bytes += chunk.nbytes
        self._notify()
        return True

    def wait_for_space(self, stop: threading.Event, timeout: float) -> bool:
        """Block up to ``timeout`` until the FIFO is under its cap; True if it is."""
        with self._cond:
            if self._bytes >= self.max_bytes and self._items and not stop.is_set():
                self._cond.wait(timeout)
            return self._bytes < self.max_bytes or not self._items

    def put_control(self, item: ControlItem) -> None:
        with self._cond:
            self._items.append(item)
        self._notify()

    def head(self) -> FifoItem | None:
        """The oldest item, left in place; ``None`` when empty."""
        with self._cond:
            return self._items[0] if self._items else None

    def peek(self, max_records: int) -> list[FifoItem]:
        """The items from the head whose remaining records reach ``max_records`` (left in place).

        Control items are included in order; the walk stops after the chunk that reaches
        ``max_records``.
        """
        items: list[FifoItem] = []
        count = 0
        with self._cond:
            for item in self._items:
                items.append(item)
                if isinstance(item, RecordChunk):
                    count += item.remaining
                    if count >= max_records:
                        break
        return items

    def release_head(self, item: FifoItem) -> None:
        """Remove ``item`` (which must be the head) and return its bytes to the cap."""
        with self._cond:
            if not self._items or self._items[0] is not item:
                raise FatalError("FIFO head changed underneath its only consumer")
            self._items.popleft()
            if isinstance(item, RecordChunk):
                self._bytes -= item.nbytes
            self._cond.notify_all()

    def release_heads(self, items: list[FifoItem]) -> None:
        """:meth:`release_head` of each of ``items`` in order (the FIFO's first ``len(items)``)."""
        for item in items:
            self.release_head(item)

    def clear_event_if_empty(self, event: asyncio.Event) -> bool:
        """Clear ``event`` iff the FIFO is empty, atomically with the check; True if cleared.

        A put that follows schedules ``on_ready`` after the clear, so no wake-up is lost.
        """
        with self._cond:
            if self._items:
                return False
            event.clear()
            return True

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def notify_ready(self) -> None:
        """Call ``on_ready`` without a put: work the asyncio side polls for has finished."""
        self._notify()

    def _notify(self) -> None:
        if self._on_ready is not None:
            self._on_ready()
