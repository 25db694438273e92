"""The reference connector: in-memory partitioned logs, the whole protocol, vnode mode included.

It proves that :class:`~laminar_kafka.kafka_source.connector.SourceConnector` is enough for the node
runtime (its tests run the runtime over it in vnode mode) and is the example to start a connector
from: it implements ownership, drains and acquisition through the declared methods only, and is
deliberately simple (no threads of its own, no FIFO): a drain's cut is the cursor at
``begin_drain`` (nothing is in flight), so a drain is ready as soon as it begins. It passes the
conformance kit (:mod:`laminar_kafka.kafka_source.conformance`) over :class:`MemoryBackend`.

Offsets: a record's offset is its index in its partition's list; cursors are the next offset to
read. Rows carry ``_topic``, ``_partition``, ``_offset`` and ``value``. Advisory commits (after
``notify_epoch_committed``) go to :attr:`MemoryLog.committed`, never backwards.

Test switches: ``unreconciled`` (``try_checkpoint`` returns None), ``hang_polls`` /
``hang_finishes`` (the next calls wait on an event that never fires unless the test sets it),
``tracked_thread`` (returned by ``terminal_task_tracker``) and the two policies.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode
from laminar_kafka.kafka_source.checkpoint import SourceCheckpoint, parse_key
from laminar_kafka.kafka_source.connector import (
    ConnectorCancellationPolicy,
    ConnectorConfig,
    ConnectorTaskTracker,
    ResumePosition,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourceContract,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceOrdering,
    SourceStart,
    SourceTopology,
)
from laminar_kafka.kafka_source.conformance.backend import LogBackend
from laminar_kafka.kafka_source.errors import ConfigurationError, DrainError, FatalError

__all__ = ["SCHEMA", "MemoryBackend", "MemoryLog", "MemorySource"]

SCHEMA = pa.schema([("_topic", pa.string()), ("_partition", pa.int32()), ("_offset", pa.int64()), ("value", pa.int64())])


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


@dataclass(frozen=True)
class _Drain:
    round: AssignmentDrainId
    #: partitions lost under the target: paused at their cut
    revoked: frozenset[TopicPartitionId]
    #: partitions owned under the target
    target_owned: frozenset[TopicPartitionId]
    resolved: SourceDrainOutcome | None = None


class MemorySource(SourceConnector):
    """One generation reading a :class:`MemoryLog`; vnode-scoped once ``set_vnode_assignment`` is called."""

    def __init__(
        self,
        log: MemoryLog,
        *,
        cancellation: ConnectorCancellationPolicy = ConnectorCancellationPolicy.RETIRE_CONNECTOR,
        unavailable: SourceCheckpointUnavailablePolicy = SourceCheckpointUnavailablePolicy.HOLD_INTAKE,
        tracked_thread: threading.Thread | None = None,
    ) -> None:
        self.log = log
        self._cancellation = cancellation
        self._unavailable = unavailable
        self._tracker = ConnectorTaskTracker([tracked_thread]) if tracked_thread is not None else None
        self.cursor: dict[TopicPartitionId, int] = {}
        self.started_with: SourceStart | None = None
        self.closed = False
        self.committed: list[tuple[int, SourceCheckpoint]] = []
        self.unreconciled = False
        self.hang_polls = 0
        self.hang_finishes = 0
        self.release_hang = asyncio.Event()
        #: every call the runtime made, in order (only the names)
        self.calls: list[str] = []
        self.acquired: list[tuple[int, dict[str, int]]] = []
        # vnode ownership
        self._identity = ""
        self._registry: VnodeRegistry | None = None
        self._self_id = 0
        self.version = 0
        self._offer: tuple[int, dict[TopicPartitionId, int]] | None = None
        self.drain: _Drain | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def cancellation_policy(self) -> ConnectorCancellationPolicy:
        return self._cancellation

    def checkpoint_unavailable_policy(self) -> SourceCheckpointUnavailablePolicy:
        return self._unavailable

    def terminal_task_tracker(self) -> ConnectorTaskTracker | None:
        return self._tracker

    async def start(self, request: SourceStart) -> None:
        self.started_with = request
        position = request.position
        resumed = position.checkpoint.partitions() if isinstance(position, ResumePosition) else {}
        start = {tp: resumed.get(tp, 0) for tp in self.log.records}
        if self._registry is not None:
            snapshot = self._registry.snapshot()
            self.version = snapshot.version
            start = {tp: o for tp, o in start.items() if tp in self._owned_at(snapshot.owners)}
        self.cursor = start

    async def close(self) -> None:
        self.closed = True

    def schema(self) -> pa.Schema:
        return SCHEMA

    def contract(self, config: ConnectorConfig) -> SourceContract:
        return SourceContract(True, SourceTopology.SPLITTABLE, True, SourceOrdering.PER_SPLIT)

    # -- data -------------------------------------------------------------------------------------

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        self.calls.append("poll")
        if self.closed:
            raise FatalError("poll_batch on a closed generation")
        if self.hang_polls:
            self.hang_polls -= 1
            await self.release_hang.wait()
        paused = self.drain.revoked if self.drain is not None and self.drain.resolved is None else frozenset()
        topics: list[str] = []
        parts: list[int] = []
        offsets: list[int] = []
        values: list[int] = []
        for tp in sorted(self.cursor):
            if tp in paused:
                continue
            start = self.cursor[tp]
            stop = min(self.log.end(tp), start + max_records - len(offsets))
            records = self.log.records[tp]
            topics += [tp[0]] * (stop - start)
            parts += [tp[1]] * (stop - start)
            offsets += range(start, stop)
            values += records[start:stop]
            self.cursor[tp] = stop
        if not offsets:
            return None
        batch = pa.record_batch([pa.array(topics), pa.array(parts, pa.int32()), pa.array(offsets, pa.int64()),
                                 pa.array(values, pa.int64())], schema=SCHEMA)
        return SourceBatch(batch, self.checkpoint())

    def checkpoint(self) -> SourceCheckpoint:
        return SourceCheckpoint.from_partitions(self.cursor, self.version)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        self.calls.append("try_checkpoint")
        return self.checkpoint() if self.checkpoint_ready() else None

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        self.committed.append((epoch, checkpoint))
        for tp, offset in checkpoint.partitions().items():
            if offset > self.log.committed.get(tp, -1):
                self.log.committed[tp] = offset

    # -- vnode ownership --------------------------------------------------------------------------

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        if self._registry is not None:
            raise ConfigurationError("set_vnode_assignment was already called")
        self._identity, self._registry, self._self_id = source_identity, registry, self_id

    def _owned_at(self, owners: tuple[int, ...]) -> frozenset[TopicPartitionId]:
        return frozenset(
            tp for tp in self.log.records
            if owners[partition_vnode(self._identity, tp[0], tp[1], len(owners))] == self._self_id
        )

    def _reconcile_plan(self) -> tuple[int, frozenset[TopicPartitionId], frozenset[TopicPartitionId]] | None:
        """``(published version, released, gained)`` when the pin is behind the published version."""
        if self._registry is None or self.closed or (self.drain is not None and self.drain.resolved is None):
            return None
        snapshot = self._registry.snapshot()
        if snapshot.version <= self.version:
            return None
        owned = self._owned_at(snapshot.owners)
        held = frozenset(self.cursor)
        # a partition that left and came back (self -> other -> self) is acquired again
        moved = frozenset(
            tp for tp in held & owned
            if snapshot.changed_at[partition_vnode(self._identity, tp[0], tp[1], snapshot.vnode_count)] > self.version
        )
        return snapshot.version, (held - owned) | moved, (owned - held) | moved

    def checkpoint_ready(self) -> bool:
        self.calls.append("checkpoint_ready")
        if self.unreconciled or self.closed:
            return False
        if self._registry is None:
            return True
        return self.version == self._registry.snapshot().version

    def drive_control_plane(self) -> None:
        plan = self._reconcile_plan()
        if plan is None:
            return
        version, released, gained = plan
        if gained and (self._offer is None or self._offer[0] != version):
            return  # waits for acquire_partitions at exactly this version
        offer = self._offer[1] if self._offer is not None else {}
        for tp in released:
            del self.cursor[tp]
        for tp in gained:
            self.cursor[tp] = offer.get(tp, 0)
        self.version = version

    def acquisition_needed(self) -> tuple[int, frozenset[TopicPartitionId]] | None:
        plan = self._reconcile_plan()
        if plan is None or not plan[2]:
            return None
        return plan[0], plan[2]

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        if self._registry is None:
            raise ConfigurationError("no vnode assignment")
        if version < self.version:
            raise DrainError(f"cursors for version {version} are stale (pinned to {self.version})")
        offsets = cursors.partitions() if isinstance(cursors, SourceCheckpoint) else {
            parse_key(k): o for k, o in cursors.items()
        }
        self._offer = (version, offsets)
        self.acquired.append((version, {f"{t}:{p}": o for (t, p), o in offsets.items()}))

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Without vnode mode, partitions of the log not read yet are read from offset 0 (unknown
        ones are ignored). In vnode mode the set of partitions is fixed (ConfigurationError)."""
        if self._registry is not None:
            raise ConfigurationError("the memory source reads a fixed set of partitions in vnode mode")
        if self.closed or self.started_with is None:
            return
        for tp in partitions:
            if tp in self.log.records and tp not in self.cursor:
                self.cursor[tp] = 0

    # -- drains -----------------------------------------------------------------------------------

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        self.calls.append("begin_drain")
        if self._registry is None:
            raise ConfigurationError("no vnode assignment")
        if self.drain is not None and self.drain.round == request.round and self.drain.resolved is None:
            return
        snapshot, pending = self._registry.state()
        if pending is None or pending.drain_id != request.round:
            raise DrainError(f"round {request.round} is not the registry's pending round")
        if request.round.predecessor_version != self.version or snapshot.version != self.version:
            raise DrainError(f"round {request.round} does not start at the pinned version {self.version}")
        target = self._owned_at(pending.owners)
        self.drain = _Drain(request.round, frozenset(self.cursor) - target, target)

    def poll_drain_ready(self, round: AssignmentDrainId) -> bool:
        if self.drain is None or self.drain.round != round or self.drain.resolved is not None:
            raise DrainError(f"round {round} is not the active drain")
        return True  # the cut is the cursor at begin_drain: nothing was in flight

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        self.calls.append(f"finish_drain:{resolution.outcome.value}")
        drain = self.drain
        if drain is None or drain.round != resolution.round:
            raise DrainError(f"round {resolution.round} is not the active drain")
        if drain.resolved is not None:
            if drain.resolved is resolution.outcome:
                return
            raise DrainError(f"round {resolution.round} was already resolved as {drain.resolved.value}")
        if self.hang_finishes:
            self.hang_finishes -= 1
            await self.release_hang.wait()
        if resolution.outcome is SourceDrainOutcome.ABORT:
            self.drain = _Drain(drain.round, drain.revoked, drain.target_owned, SourceDrainOutcome.ABORT)
            return  # the paused partitions resume at their cut: their cursor never moved
        gained = drain.target_owned - frozenset(self.cursor)
        handoff: dict[TopicPartitionId, int] | None = None
        if handoff_cursors is not None:
            handoff = handoff_cursors.partitions() if isinstance(handoff_cursors, SourceCheckpoint) else {
                parse_key(k): o for k, o in handoff_cursors.items()
            }
            if not gained <= handoff.keys():
                raise DrainError(f"handoff cursors lack {sorted(gained - handoff.keys())}")
        for tp in drain.revoked:
            del self.cursor[tp]
        self.version = drain.round.target_version
        if handoff is not None:
            for tp in gained:
                self.cursor[tp] = handoff[tp]
        else:
            self.version = drain.round.predecessor_version  # the gained partitions wait for an offer
        self.drain = _Drain(drain.round, drain.revoked, drain.target_owned, SourceDrainOutcome.COMMIT)
