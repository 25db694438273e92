"""The reference connector's protocol logic over any partitioned log with integer positions.

:class:`PartitionedLogSource` implements the whole source protocol, vnode mode included (ownership,
reconciliation, acquisition at offered cursors, drains and their handoff, advisory commits), over
three things a log gives it: which partitions exist (:meth:`~PartitionedLogSource.log_partitions`),
records from given positions (:meth:`~PartitionedLogSource.read_records`) and where to store
advisory offsets (:meth:`~PartitionedLogSource.commit_advisory`). Two logs use it: in-memory lists
(:mod:`.memory`, the example to start from) and Redis Streams
(:mod:`laminar_kafka.redis_source`, over a real server).

It is deliberately simple: no threads of its own and no read-ahead, so nothing is ever in flight
between polls and a drain's cut is the cursor at ``begin_drain`` (a drain is ready as soon as it
begins). A cursor is the position of the next record to read; a position between two records is
valid (reading resumes at the first record at or above it), so cursors need not be dense.

Rows carry ``_topic``, ``_partition``, ``_offset`` and ``value`` (its type is the subclass's
:attr:`~PartitionedLogSource.value_type`).
"""
from __future__ import annotations

import abc
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from laminar_kafka.kafka_source.errors import ConfigurationError, DrainError, FatalError

__all__ = ["PartitionRead", "PartitionedLogSource", "row_schema"]


def row_schema(value_type: pa.DataType) -> pa.Schema:
    """The rows of a :class:`PartitionedLogSource`: the record's place and its value."""
    return pa.schema([("_topic", pa.string()), ("_partition", pa.int32()), ("_offset", pa.int64()),
                      ("value", value_type)])


@dataclass(frozen=True)
class PartitionRead:
    """Records of one partition read from a start position: their offsets (increasing, each at or
    above the start), their values (same length), and ``next``, the position after the last one
    (the partition's cursor once these are returned; above every offset here)."""

    partition: TopicPartitionId
    offsets: Sequence[int]
    values: Sequence[Any]
    next: int


@dataclass(frozen=True)
class _Drain:
    round: AssignmentDrainId
    #: partitions lost under the target: paused at their cut
    revoked: frozenset[TopicPartitionId]
    #: partitions owned under the target
    target_owned: frozenset[TopicPartitionId]
    resolved: SourceDrainOutcome | None = None


class PartitionedLogSource(SourceConnector):
    """One generation reading a partitioned log; vnode-scoped once ``set_vnode_assignment`` is called.

    A subclass gives :attr:`value_type`, :meth:`log_partitions`, :meth:`read_records` and
    :meth:`commit_advisory`. Everything else is the protocol, implemented once here.
    """

    #: the Arrow type of the ``value`` column
    value_type: pa.DataType = pa.binary()

    def __init__(
        self,
        *,
        cancellation: ConnectorCancellationPolicy = ConnectorCancellationPolicy.RETIRE_CONNECTOR,
        unavailable: SourceCheckpointUnavailablePolicy = SourceCheckpointUnavailablePolicy.HOLD_INTAKE,
        tracked_thread: threading.Thread | None = None,
    ) -> None:
        self._cancellation = cancellation
        self._unavailable = unavailable
        self._tracker = ConnectorTaskTracker([tracked_thread]) if tracked_thread is not None else None
        self._schema = row_schema(self.value_type)
        #: the next position to read, per partition this generation reads
        self.cursor: dict[TopicPartitionId, int] = {}
        self.started_with: SourceStart | None = None
        self.closed = False
        #: every ``notify_epoch_committed`` in order
        self.committed: list[tuple[int, SourceCheckpoint]] = []
        #: every acquisition offered: (version, "topic:partition" -> cursor)
        self.acquired: list[tuple[int, dict[str, int]]] = []
        # vnode ownership
        self._identity = ""
        self._registry: VnodeRegistry | None = None
        self._self_id = 0
        #: the assignment version the cursors are pinned to
        self.version = 0
        self._offer: tuple[int, dict[TopicPartitionId, int]] | None = None
        self.drain: _Drain | None = None

    # -- what a log gives ---------------------------------------------------------------------------

    @abc.abstractmethod
    def log_partitions(self) -> Iterable[TopicPartitionId]:
        """Every partition of the log now (cheap: called on every reconciliation check; a log whose
        listing needs I/O lists it in :meth:`start` and returns that)."""

    @abc.abstractmethod
    async def read_records(self, starts: Mapping[TopicPartitionId, int], max_records: int) -> list[PartitionRead]:
        """Records from ``starts`` (position per partition), at most ``max_records`` in all; partitions
        with nothing new may be left out. Must not block the event loop."""

    @abc.abstractmethod
    async def commit_advisory(self, offsets: Mapping[TopicPartitionId, int]) -> None:
        """Store ``offsets`` (next position per partition) as the log's advisory consumer offsets,
        never moving one backwards (another generation may have stored a later one)."""

    # -- lifecycle --------------------------------------------------------------------------------

    def cancellation_policy(self) -> ConnectorCancellationPolicy:
        return self._cancellation

    def checkpoint_unavailable_policy(self) -> SourceCheckpointUnavailablePolicy:
        return self._unavailable

    def terminal_task_tracker(self) -> ConnectorTaskTracker | None:
        return self._tracker

    async def start(self, request: SourceStart) -> None:
        """Reads every partition of the log from its resume cursor (0 when the position has none);
        in vnode mode, only those the registry's published assignment gives this node."""
        self.started_with = request
        position = request.position
        resumed = position.checkpoint.partitions() if isinstance(position, ResumePosition) else {}
        start = {tp: resumed.get(tp, 0) for tp in self.log_partitions()}
        if self._registry is not None:
            snapshot = self._registry.snapshot()
            self.version = snapshot.version
            start = {tp: o for tp, o in start.items() if tp in self._owned_at(snapshot.owners)}
        self.cursor = start

    async def close(self) -> None:
        self.closed = True

    def schema(self) -> pa.Schema:
        return self._schema

    def contract(self, config: ConnectorConfig) -> SourceContract:
        return SourceContract(True, SourceTopology.SPLITTABLE, True, SourceOrdering.PER_SPLIT)

    # -- data -------------------------------------------------------------------------------------

    def _paused(self) -> frozenset[TopicPartitionId]:
        return self.drain.revoked if self.drain is not None and self.drain.resolved is None else frozenset()

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        """At most ``max_records`` rows from the partitions read (those paused by a drain left out),
        with the checkpoint just after them. A read that a control call overtook (its partition
        released or its cursor moved while the read was awaited) is dropped: it is read again from
        the cursor, so the batch stays bound to its checkpoint."""
        if self.closed:
            raise FatalError("poll_batch on a closed generation")
        paused = self._paused()
        starts = {tp: cursor for tp, cursor in sorted(self.cursor.items()) if tp not in paused}
        if not starts:
            return None
        reads = await self.read_records(starts, max_records)
        if self.closed:
            raise FatalError("the generation was closed while poll_batch read")
        paused = self._paused()
        topics: list[str] = []
        parts: list[int] = []
        offsets: list[int] = []
        values: list[Any] = []
        for read in reads:
            tp = read.partition
            if not read.offsets or tp in paused or self.cursor.get(tp) != starts.get(tp):
                continue
            topics += [tp[0]] * len(read.offsets)
            parts += [tp[1]] * len(read.offsets)
            offsets += read.offsets
            values += read.values
            self.cursor[tp] = read.next
        if not offsets:
            return None
        batch = pa.record_batch([pa.array(topics, pa.string()), pa.array(parts, pa.int32()),
                                 pa.array(offsets, pa.int64()), pa.array(values, self.value_type)], schema=self._schema)
        return SourceBatch(batch, self.checkpoint())

    def checkpoint(self) -> SourceCheckpoint:
        return SourceCheckpoint.from_partitions(self.cursor, self.version)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        return self.checkpoint() if self.checkpoint_ready() else None

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """Stores the committed cursors as advisory offsets (never backwards: :meth:`commit_advisory`)."""
        self.committed.append((epoch, checkpoint))
        await self.commit_advisory(checkpoint.partitions())

    # -- vnode ownership --------------------------------------------------------------------------

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        if self._registry is not None:
            raise ConfigurationError("set_vnode_assignment was already called")
        self._identity, self._registry, self._self_id = source_identity, registry, self_id

    def _owned_at(self, owners: tuple[int, ...]) -> frozenset[TopicPartitionId]:
        return frozenset(
            tp for tp in self.log_partitions()
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
        if self.closed:
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
        """Without vnode mode, partitions of the log not read yet are read from position 0 (unknown
        ones are ignored). In vnode mode the set of partitions is fixed (ConfigurationError)."""
        if self._registry is not None:
            raise ConfigurationError(f"{type(self).__name__} reads a fixed set of partitions in vnode mode")
        if self.closed or self.started_with is None:
            return
        known = frozenset(self.log_partitions())
        for tp in partitions:
            if tp in known and tp not in self.cursor:
                self.cursor[tp] = 0

    # -- drains -----------------------------------------------------------------------------------

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
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
        drain = self.drain
        if drain is None or drain.round != resolution.round:
            raise DrainError(f"round {resolution.round} is not the active drain")
        if drain.resolved is not None:
            if drain.resolved is resolution.outcome:
                return
            raise DrainError(f"round {resolution.round} was already resolved as {drain.resolved.value}")
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
