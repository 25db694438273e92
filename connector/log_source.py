"""The reference connector's protocol logic over any partitioned log with integer positions.

:class:`PartitionedLogSource` implements the whole source protocol, vnode mode included (ownership,
reconciliation, acquisition at offered cursors, drains and their handoff, advisory commits), over
three things a log gives it: which partitions exist (:meth:`~PartitionedLogSource.log_partitions`),
records from given positions (:meth:`~PartitionedLogSource.read_records`) and where to store
advisory offsets (:meth:`~PartitionedLogSource.commit_advisory`). Two logs use it: in-memory lists
(:mod:`.memory`, the example to start from) and Redis Streams
(:mod:`laminar_kafka.redis_source`, over a real server).

Ownership is the one vnode state machine (:class:`~laminar_kafka.connector.ownership.Ownership`,
Kafka's too): this class executes its plans at once, on the event loop. It is deliberately simple:
no threads of its own and no read-ahead, so nothing is ever in flight between polls and a drain's
cut is the cursor at ``begin_drain`` (a drain is ready as soon as it begins). A cursor is the
position of the next record to read; a position between two records is valid (reading resumes at
the first record at or above it), so cursors need not be dense.

Rows carry ``_topic``, ``_partition``, ``_offset`` and ``value`` (its type is the subclass's
:attr:`~PartitionedLogSource.value_type`).
"""
from __future__ import annotations

import abc
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from laminar_kafka.connector.checkpoint import CursorFormat, SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, DrainError, FatalError
from laminar_kafka.connector.ownership import Ownership, route_partitions
from laminar_kafka.connector.protocol import (
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
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError

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


class PartitionedLogSource(SourceConnector):
    """One generation reading a partitioned log; vnode-scoped once ``set_vnode_assignment`` is called.

    A subclass gives :attr:`cursor_format` (its name; required: without it the constructor raises
    :class:`ConfigurationError`), :attr:`value_type`, :meth:`log_partitions`, :meth:`read_records`
    and :meth:`commit_advisory`. Everything else is the protocol, implemented once here.
    """

    #: the connector's name and cursor rules: its checkpoints carry the name, and a checkpoint
    #: it starts or acquires from must be its own (:meth:`CursorFormat.accept`)
    cursor_format: CursorFormat
    #: the Arrow type of the ``value`` column
    value_type: pa.DataType = pa.binary()

    def __init__(
        self,
        *,
        cancellation: ConnectorCancellationPolicy = ConnectorCancellationPolicy.RETIRE_CONNECTOR,
        unavailable: SourceCheckpointUnavailablePolicy = SourceCheckpointUnavailablePolicy.HOLD_INTAKE,
        tracked_thread: threading.Thread | None = None,
    ) -> None:
        """Raises :class:`ConfigurationError` if the subclass does not set :attr:`cursor_format`."""
        if not isinstance(getattr(type(self), "cursor_format", None), CursorFormat):
            raise ConfigurationError(
                f"{type(self).__name__} must set the class attribute cursor_format to a CursorFormat naming "
                f"the connector, e.g. cursor_format = CursorFormat(\"my-log\") (its checkpoints carry the name)"
            )
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
        # vnode ownership: ``own`` is None until both set_vnode_assignment and start were called
        self._identity = ""
        self._registry: VnodeRegistry | None = None
        self._self_id = 0
        self.own: Ownership | None = None
        self._offer: tuple[int, dict[TopicPartitionId, int]] | None = None

    @property
    def version(self) -> int:
        """The assignment version the cursors are pinned to (0 without vnode mode)."""
        return self.own.version if self.own is not None else 0

    # -- what a log gives ---------------------------------------------------------------------------

    @abc.abstractmethod
    def log_partitions(self) -> Iterable[TopicPartitionId]:
        """Every partition of the log now. Called at :meth:`start`, by :meth:`add_partitions` and, in
        vnode mode, on every :meth:`drive_control_plane` (once per runtime turn), so it must be cheap
        and must not block: a log whose listing needs I/O lists it in :meth:`start` (or in a task of
        its own) and returns the last listing. In vnode mode a partition that appears here later
        joins the routing table (see :meth:`drive_control_plane`); partitions never disappear."""

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
        resumed: dict[TopicPartitionId, int] = {}
        if isinstance(position, ResumePosition):
            resumed = self.cursor_format.accept(position.checkpoint).partitions()
        start = {tp: resumed.get(tp, 0) for tp in self.log_partitions()}
        self.cursor = start
        if self._registry is not None:
            self._pin()

    async def close(self) -> None:
        self.closed = True

    def schema(self) -> pa.Schema:
        return self._schema

    def contract(self, config: ConnectorConfig) -> SourceContract:
        return SourceContract(True, SourceTopology.SPLITTABLE, True, SourceOrdering.PER_SPLIT)

    # -- data -------------------------------------------------------------------------------------

    def _paused(self) -> frozenset[TopicPartitionId]:
        drain = self.own.drain if self.own is not None else None
        return drain.revoked if drain is not None and drain.active else frozenset()

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        """At most ``max_records`` rows from the partitions read (those paused by a drain left out),
        with the checkpoint just after them. A read that a control call overtook (its partition
        released or its cursor moved while the read was awaited) is dropped: it is read again from
        the cursor, so the batch stays bound to its checkpoint."""
        if self.closed:
            raise FatalError("poll_batch on a closed generation")
        if self.own is not None:
            self.own.require_alive()
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
        return self.cursor_format.stamp(self.cursor, self.version)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        return self.checkpoint() if self.checkpoint_ready() else None

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """Stores the committed cursors as advisory offsets (never backwards: :meth:`commit_advisory`)."""
        self.committed.append((epoch, checkpoint))
        await self.commit_advisory(checkpoint.partitions())

    # -- vnode ownership --------------------------------------------------------------------------

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        """Vnode mode: before :meth:`start`, the start reads only the partitions owned in the
        published snapshot; after it, the partitions not owned stop being read at once."""
        if self._registry is not None:
            raise ConfigurationError("set_vnode_assignment was already called")
        self._identity, self._registry, self._self_id = source_identity, registry, self_id
        if self.started_with is not None and not self.closed:
            self._pin()

    def _pin(self) -> None:
        """Pin to the published snapshot with the owned part of the cursor live (the rest dropped).
        Raises :class:`~laminar_kafka.connector.errors.UnassignedVnodeError` for an invalid owner map."""
        assert self._registry is not None
        routes = route_partitions(self._identity, list(self.log_partitions()), self._registry.vnode_count)
        own = Ownership.at(self._self_id, routes, self._registry.snapshot())
        self.cursor = {tp: o for tp, o in self.cursor.items() if tp in own.owned}
        self.own = own.started(frozenset(self.cursor))

    def _fail(self, reason: str) -> FatalError:
        """Fail the generation (every later call raises) and the error to raise now."""
        assert self.own is not None
        self.own = self.own.fail(reason)
        return FatalError(f"source generation failed: {reason}")

    def _take(self, acquire: Mapping[TopicPartitionId, int | None]) -> dict[TopicPartitionId, int]:
        """Read the partitions of ``acquire`` from their cursors (a partition without one: 0)."""
        taken = {tp: 0 if position is None else position for tp, position in acquire.items()}
        self.cursor.update(taken)
        return taken

    def checkpoint_ready(self) -> bool:
        """Without vnode mode: True until closed. In vnode mode: pinned to the published version
        with every owned partition read. Raises :class:`FatalError` once the generation failed."""
        if self.closed:
            return False
        if self.own is None or self._registry is None:
            return self._registry is None
        try:
            return self.own.is_ready(self._registry.snapshot())
        except FatalError as exc:
            raise self._fail(str(exc)) from exc

    def drive_control_plane(self) -> None:
        """One reconciliation step toward the published assignment (:meth:`Ownership.plan_reconcile`):
        partitions not owned any more are dropped, gained ones read from the cursors offered for
        exactly that version. Never raises: a failure surfaces from the next call.

        Partitions that appeared in :meth:`log_partitions` since the start join the routing table
        first (:meth:`Ownership.with_partitions`, as Kafka's source routes topic growth), while no
        round is active and the source is pinned to the published version (else on a later call).
        The ones this node owns are pending: :meth:`acquisition_needed` names them and they are read
        from the cursors :meth:`acquire_partitions` then offers (position 0 for one it lacks)."""
        own = self.own
        if own is None or self._registry is None or self.closed or own.failure is not None:
            return
        try:
            own = self._route_new_partitions(own)
            plan = own.plan_reconcile(self._registry.snapshot(), self._offer)
        except ConnectorError as exc:
            self._fail(f"reconciliation failed: {exc}")
            return
        if plan is None:
            return
        for tp in plan.release:
            del self.cursor[tp]
        self.own = own.reconciled(plan, self._take(plan.acquire))

    def _route_new_partitions(self, own: Ownership) -> Ownership:
        """``own`` with the partitions of the log it does not route yet added, when it may take them
        now (:meth:`Ownership.can_route_more`); stored in :attr:`own` when it changed."""
        assert self._registry is not None
        new = [tp for tp in self.log_partitions() if tp not in own.routes]
        if not new:
            return own
        snapshot = self._registry.snapshot()
        if not own.can_route_more(snapshot):
            return own
        grown = own.with_partitions(route_partitions(self._identity, new, snapshot.vnode_count), snapshot)
        if grown.owned != own.owned:
            self._offer = None  # offered before the growth: the runtime offers the latest cursors again
        self.own = grown
        return grown

    def acquisition_needed(self) -> tuple[int, frozenset[TopicPartitionId]] | None:
        """``(published version, partitions)`` while reconciling waits for explicit cursors
        (:meth:`acquire_partitions`), else ``None`` (:meth:`Ownership.acquisition_needed`)."""
        own = self.own
        if own is None or self._registry is None or self.closed:
            return None
        return own.acquisition_needed(self._registry.snapshot())

    def _cursors_of(self, cursors: Mapping[str, int] | SourceCheckpoint) -> dict[TopicPartitionId, int]:
        """``cursors`` as ``{tp: position}``, checked by :meth:`CursorFormat.accept` (a mapping as the
        unnamed checkpoint of its cursors): :class:`CheckpointError` for a checkpoint of another
        connector, an invalid key or position, or a cursor :meth:`CursorFormat.check_cursor` rejects."""
        checkpoint = cursors if isinstance(cursors, SourceCheckpoint) else SourceCheckpoint(dict(cursors))
        return self.cursor_format.accept(checkpoint).partitions()

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        if self._registry is None or self.own is None:
            raise ConfigurationError("no vnode assignment")
        if version < self.own.version:
            raise DrainError(f"cursors for version {version} are stale (pinned to {self.own.version})")
        offsets = self._cursors_of(cursors)
        self._offer = (version, offsets)
        self.acquired.append((version, {f"{t}:{p}": o for (t, p), o in offsets.items()}))

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Without vnode mode, partitions of the log not read yet are read from position 0 (unknown
        ones are ignored). In vnode mode it raises ConfigurationError: there new partitions join
        from :meth:`log_partitions` on :meth:`drive_control_plane`."""
        if self._registry is not None:
            raise ConfigurationError(
                f"{type(self).__name__} takes new partitions from log_partitions() in vnode mode, not add_partitions"
            )
        if self.closed or self.started_with is None:
            return
        known = frozenset(self.log_partitions())
        for tp in partitions:
            if tp in known and tp not in self.cursor:
                self.cursor[tp] = 0

    # -- drains -----------------------------------------------------------------------------------

    def _vnode_state(self) -> Ownership:
        if self._registry is None or self.own is None:
            raise ConfigurationError("no vnode assignment")
        return self.own

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        """:meth:`Ownership.begin_drain`; nothing is in flight, so the revoked partitions pause at
        their cursors and the cut is fixed at once (the round is ready)."""
        own = self._vnode_state()
        assert self._registry is not None
        snapshot, pending = self._registry.state()
        own, started = own.begin_drain(request.round, deadline, time.monotonic(), snapshot, pending)
        if not started:
            return
        drain = own.drain
        assert drain is not None
        if drain.revoked:
            own = own.boundary_paused(request.round, {tp: self.cursor[tp] for tp in drain.revoked})
            own = own.boundary_consumed(request.round, self.cursor, time.monotonic())
        self.own = own
        own.require_alive()

    def poll_drain_ready(self, round: AssignmentDrainId) -> bool:
        return self._vnode_state().ready(round)

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        """:meth:`Ownership.plan_finish`, executed at once: Commit drops the revoked partitions and
        reads the gained ones from ``handoff_cursors`` (without them they wait for an offer);
        Abort resumes the paused partitions at their cut, where their cursors still are."""
        own = self._vnode_state()
        handoff = self._cursors_of(handoff_cursors) if handoff_cursors is not None else None
        try:
            plan = own.plan_finish(resolution, time.monotonic(), deadline, handoff)
        except FatalError as exc:
            raise self._fail(str(exc)) from exc
        if plan is None:
            return
        if plan.outcome is SourceDrainOutcome.ABORT:
            if any(self.cursor.get(tp) != position for tp, position in plan.resume.items()):
                raise self._fail(f"abort of drain {resolution.round}: a paused cursor moved")
            self.own = own.finished(plan, {})
            return
        for tp in plan.release:
            del self.cursor[tp]
        self.own = own.finished(plan, self._take(plan.acquire))
