"""The reference connector: in-memory partitioned logs, the whole protocol, vnode mode included.

It proves that :class:`~laminar_kafka.connector.protocol.SourceConnector` is enough for the node
runtime (its tests run the runtime over it in vnode mode) and is the example to start a connector
from: the protocol is :class:`~.log_source.PartitionedLogSource`'s (ownership, drains and
acquisition through the declared methods only); this module gives it a log of Python lists. It
passes the conformance kit (:mod:`laminar_kafka.connector.conformance`) over :class:`MemoryBackend`.

Offsets: a record's offset is its index in its partition's list; cursors are the next offset to
read. Rows carry ``_topic``, ``_partition``, ``_offset`` and ``value`` (int64). Advisory commits
(after ``notify_epoch_committed``) go to :attr:`MemoryLog.committed`, never backwards.

Test switches: ``unreconciled`` (``try_checkpoint`` returns None), ``hang_polls`` /
``hang_finishes`` (the next calls wait on an event that never fires unless the test sets it;
``hang_next_poll()`` / ``hang_next_finish()`` add one),
``tracked_thread`` (returned by ``terminal_task_tracker``) and the two policies.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from laminar_kafka.connector.checkpoint import CursorFormat, SourceCheckpoint
from laminar_kafka.connector.conformance.backend import LogBackend
from laminar_kafka.connector.log_source import PartitionedLogSource, PartitionRead, row_schema
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceDrainRequest,
    SourceDrainResolution,
)
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = ["SCHEMA", "MemoryBackend", "MemoryLog", "MemorySource"]

SCHEMA = row_schema(pa.int64())


@dataclass
class MemoryLog:
    """The input: per (topic, partition), the values of its records in offset order; and the
    advisory commits of the sources reading it (``committed``: next offset per partition)."""

    records: dict[TopicPartitionId, list[int]] = field(default_factory=dict)
    committed: dict[TopicPartitionId, int] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: str, partitions: int, records: int) -> MemoryLog:
        return cls({(topic, p): list(range(records)) for p in range(partitions)})

    def append(self, tp: TopicPartitionId, count: int) -> None:
        values = self.records[tp]
        values.extend(range(len(values), len(values) + count))

    def end(self, tp: TopicPartitionId) -> int:
        return len(self.records[tp])


class MemoryBackend(LogBackend):
    """The conformance kit's view of one topic of a :class:`MemoryLog`."""

    def __init__(self, log: MemoryLog, topic: str) -> None:
        self.log, self.topic = log, topic

    def partitions(self) -> int:
        return sum(1 for t, _p in self.log.records if t == self.topic)

    def append(self, partition: int, count: int) -> None:
        self.log.append((self.topic, partition), count)

    def end(self, partition: int) -> int:
        return self.log.end((self.topic, partition))

    def add_partition(self) -> int:
        partition = self.partitions()
        self.log.records[(self.topic, partition)] = []
        return partition

    def committed_offsets(self) -> dict[int, int] | None:
        return {p: o for (t, p), o in self.log.committed.items() if t == self.topic}


class MemorySource(PartitionedLogSource):
    """One generation reading a :class:`MemoryLog` (the protocol is :class:`PartitionedLogSource`'s),
    with the switches the runtime's tests use, and the calls it received in :attr:`calls`."""

    cursor_format = CursorFormat("memory")
    value_type = pa.int64()

    def __init__(
        self,
        log: MemoryLog,
        *,
        cancellation: ConnectorCancellationPolicy = ConnectorCancellationPolicy.RETIRE_CONNECTOR,
        unavailable: SourceCheckpointUnavailablePolicy = SourceCheckpointUnavailablePolicy.HOLD_INTAKE,
        tracked_thread: threading.Thread | None = None,
    ) -> None:
        super().__init__(cancellation=cancellation, unavailable=unavailable, tracked_thread=tracked_thread)
        self.log = log
        self.unreconciled = False
        self.hang_polls = 0
        self.hang_finishes = 0
        self.release_hang = asyncio.Event()
        #: every call the runtime made, in order (only the names)
        self.calls: list[str] = []

    # -- the log ----------------------------------------------------------------------------------

    def log_partitions(self) -> Iterable[TopicPartitionId]:
        return self.log.records.keys()

    async def read_records(self, starts: Mapping[TopicPartitionId, int], max_records: int) -> list[PartitionRead]:
        reads: list[PartitionRead] = []
        left = max_records
        for tp, start in starts.items():
            stop = min(self.log.end(tp), start + left)
            if stop > start:
                reads.append(PartitionRead(tp, range(start, stop), self.log.records[tp][start:stop], stop))
                left -= stop - start
        return reads

    async def commit_advisory(self, offsets: Mapping[TopicPartitionId, int]) -> None:
        for tp, offset in offsets.items():
            if offset > self.log.committed.get(tp, -1):
                self.log.committed[tp] = offset

    # -- the test switches ------------------------------------------------------------------------

    def hang_next_poll(self) -> None:
        """The next ``poll_batch`` waits for :attr:`release_hang` (or its cancellation) before it
        reads (the conformance kit's ``HangsPolls`` switch: it cancels such a poll at a deadline)."""
        self.hang_polls += 1

    def hang_next_finish(self) -> None:
        """The next ``finish_drain`` of the active round waits for :attr:`release_hang` (or its
        cancellation) before it resolves anything (the kit's ``HangsFinishes`` switch)."""
        self.hang_finishes += 1

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        self.calls.append("poll")
        if self.hang_polls and not self.closed:
            self.hang_polls -= 1
            await self.release_hang.wait()
        return await super().poll_batch(max_records)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        self.calls.append("try_checkpoint")
        return super().try_checkpoint()

    def checkpoint_ready(self) -> bool:
        self.calls.append("checkpoint_ready")
        return not self.unreconciled and super().checkpoint_ready()

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        self.calls.append("begin_drain")
        super().begin_drain(request, deadline)

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        self.calls.append(f"finish_drain:{resolution.outcome.value}")
        drain = self.own.drain if self.own is not None else None
        if self.hang_finishes and drain is not None and drain.round == resolution.round and drain.active:
            self.hang_finishes -= 1
            await self.release_hang.wait()
        await super().finish_drain(resolution, deadline, handoff_cursors)
