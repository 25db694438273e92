"""What the conformance scenarios share: starting generations, reading them to the log's ends while
checking every batch's cursor, and the exactness check of what was read."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.conformance.backend import ConformanceError, ConnectorKit
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    DeliveryGuarantee,
    InitialPosition,
    ResumePosition,
    SourceBatch,
    SourceConnector,
    SourcePosition,
    SourceStart,
)
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = [
    "POLL_RECORDS", "RECORDS", "Reading", "Scenario", "append_everywhere", "at_least", "close_generation",
    "expect_exact", "log_ends", "read_until", "resume_at", "start_generation", "take_batch", "until",
]

#: records a scenario appends to each partition it reads
RECORDS = 25
#: ``max_records`` of every poll: small, so a scenario sees many batches and cursors
POLL_RECORDS = 7


@dataclass(frozen=True)
class Scenario:
    """One rule: its sentence and the coroutine function that checks it."""

    rule: str
    check: Callable[[ConnectorKit], Awaitable[None]]


@dataclass
class Reading:
    """What one generation returned: each partition's offsets in the order read, and every batch's
    checkpoint in order."""

    offsets: dict[TopicPartitionId, list[int]] = field(default_factory=dict)
    checkpoints: list[SourceCheckpoint] = field(default_factory=list)


async def start_generation(kit: ConnectorKit, position: SourcePosition | None = None) -> SourceConnector:
    """A fresh generation of the connector, started at ``position`` (its initial position by default)."""
    connector = kit.make_connector()
    await connector.start(SourceStart(kit.config, position or InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE))
    return connector


def resume_at(cursors: Mapping[TopicPartitionId, int], epoch: int = 1) -> ResumePosition:
    """A resume position at exactly ``cursors`` (as the node builds one from a manifest)."""
    return ResumePosition(CheckpointAttempt(epoch, epoch), SourceCheckpoint.from_partitions(cursors))


async def read_until(
    kit: ConnectorKit, connector: SourceConnector, ends: Mapping[TopicPartitionId, int], rule: str,
    reading: Reading | None = None,
) -> Reading:
    """Poll ``connector`` until its checkpoint reaches ``ends`` for every partition there, checking
    on the way that each batch's checkpoint is bound to it (rule ``checkpoint-bound-to-batch``):
    every row's offset is below the batch's cursor of its partition, no cursor moves backwards, and
    no later row of a partition has an offset below a cursor returned before it."""
    reading = reading or Reading()
    deadline = time.monotonic() + kit.read_timeout_s
    ready = connector.data_ready_notify()
    while True:
        batch = await connector.poll_batch(POLL_RECORDS)
        if batch is not None:
            take_batch(kit, batch, reading)
        cursor = connector.checkpoint().partitions()
        if all(cursor.get(tp, -1) >= end for tp, end in ends.items()):
            return reading
        if time.monotonic() > deadline:
            behind = {f"{t}:{p}": (cursor.get((t, p)), end) for (t, p), end in ends.items() if cursor.get((t, p), -1) < end}
            raise ConformanceError(rule, f"the checkpoint did not reach the log's ends in {kit.read_timeout_s:.0f} s: "
                                         f"(cursor, end) {behind}")
        if batch is None:
            if ready is not None:
                try:
                    await asyncio.wait_for(ready.wait(), 0.1)
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0.02)


def take_batch(kit: ConnectorKit, batch: SourceBatch, reading: Reading, rule: str = "checkpoint-bound-to-batch") -> None:
    """Add ``batch``'s rows and checkpoint to ``reading``, checking that the checkpoint is bound to
    it (see :func:`read_until`); a breach is reported under ``rule``."""
    records = batch.records
    topics = records.column(kit.topic_column).to_pylist()
    partitions = records.column(kit.partition_column).to_pylist()
    offsets = records.column(kit.offset_column).to_pylist()
    cursor = batch.checkpoint.partitions()
    previous = reading.checkpoints[-1].partitions() if reading.checkpoints else {}
    for tp, offset in previous.items():
        if cursor.get(tp, offset) < offset:
            raise ConformanceError(rule, f"{tp[0]}:{tp[1]}'s cursor moved back from {offset} to {cursor[tp]}")
    for topic, partition, offset in zip(topics, partitions, offsets, strict=True):
        tp = (topic, partition)
        if tp not in cursor or offset >= cursor[tp]:
            raise ConformanceError(rule, f"a row of {topic}:{partition} at offset {offset} is not below its batch's "
                                         f"cursor {cursor.get(tp)}")
        if offset < previous.get(tp, 0):
            raise ConformanceError(rule, f"a row of {topic}:{partition} at offset {offset} came after a cursor of "
                                         f"{previous[tp]}: resuming there would skip it")
        reading.offsets.setdefault(tp, []).append(offset)
    reading.checkpoints.append(batch.checkpoint)


def log_ends(kit: ConnectorKit) -> dict[TopicPartitionId, int]:
    return {(kit.backend.topic, p): kit.backend.end(p) for p in range(kit.backend.partitions())}


def append_everywhere(kit: ConnectorKit, count: int = RECORDS) -> dict[TopicPartitionId, int]:
    for partition in range(kit.backend.partitions()):
        kit.backend.append(partition, count)
    return log_ends(kit)


def expect_exact(kit: ConnectorKit, rule: str, reading: Reading, starts: Mapping[TopicPartitionId, int],
                 ends: Mapping[TopicPartitionId, int]) -> None:
    """Each partition read from exactly its start to its end, once each, in offset order (the
    backend's offsets in that range: :meth:`LogBackend.offsets`)."""
    for tp, end in ends.items():
        got = reading.offsets.get(tp, [])
        want = kit.backend.offsets(tp[1], starts.get(tp, 0), end)
        if got != want:
            missing = sorted(set(want) - set(got))[:5]
            repeated = sorted({o for o in got if got.count(o) > 1})[:5]
            raise ConformanceError(rule, f"{tp[0]}:{tp[1]} read {len(got)} rows for {len(want)} records in "
                                         f"[{starts.get(tp, 0)}, {end}): missing {missing}, repeated {repeated}, "
                                         f"first {got[:3]}")


async def close_generation(connector: SourceConnector) -> None:
    await connector.close()
    tracker = connector.terminal_task_tracker()
    if tracker is not None and not await tracker.wait(30):
        raise ConformanceError("close-ends-the-generation", "its tracked tasks were still running 30 s after close()")



async def until(predicate: Callable[[], bool], timeout_s: float, rule: str, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise ConformanceError(rule, f"{what} did not come within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


def at_least(have: Mapping[int, int], want: Mapping[int, int]) -> bool:
    return all(have.get(p, -1) >= o for p, o in want.items())
