"""Executing ownership plans on the reader thread, and the FIFO markers that report them back.

:class:`AssignmentExecutor` holds one vnode-mode generation's :class:`~laminar_kafka.connector.ownership.Ownership`
and everything in flight between it and the reader thread: the assignment change submitted and not
yet applied, the pause of a drain, and the partitions whose queued records must be dropped. Plans
are executed by the reader between two ``consume`` calls; their markers come back through the data
FIFO, so each applies to the cursor exactly after the records fetched before it. Never blocks.
:class:`~laminar_kafka.kafka_source.vnode.driver.VnodeDriver` decides what to execute.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.drain import DrainPhase, FinishPlan
from laminar_kafka.connector.errors import FatalError
from laminar_kafka.connector.ownership import Ownership, Reconcile
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.checkpoint import KAFKA_CURSORS
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.fifo import AssignmentApplied, ControlItem, DrainBoundary
from laminar_kafka.kafka_source.read.reader import Reader

logger = logging.getLogger(__name__)

__all__ = ["AssignmentExecutor", "VnodeBinding", "cursor_offsets"]


@dataclass(frozen=True)
class VnodeBinding:
    """The arguments of ``set_vnode_assignment``: whose vnodes, in which registry, for which source."""

    source_identity: str
    registry: VnodeRegistry
    self_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.source_identity, str) or not self.source_identity:
            raise ConfigurationError("source_identity must be a non-empty string")
        if not isinstance(self.registry, VnodeRegistry):
            raise ConfigurationError(
                f"registry must be a coordinator VnodeRegistry, got {type(self.registry).__name__}"
            )
        if not isinstance(self.self_id, int) or isinstance(self.self_id, bool) or self.self_id < 1:
            raise ConfigurationError(f"self_id {self.self_id!r} must be a node id >= 1")

    def same_as(self, other: VnodeBinding) -> bool:
        """Same identity, the very same registry object, and the same node."""
        return (
            self.source_identity == other.source_identity
            and self.registry is other.registry
            and self.self_id == other.self_id
        )


@dataclass
class _AssignmentChange:
    """One ownership change submitted to the reader thread and not yet applied here."""

    change_id: int
    plan: Reconcile | FinishPlan
    future: concurrent.futures.Future[AssignmentApplied]
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class _DrainPause:
    """The pause of a round's revoked partitions, submitted to the reader thread."""

    round: AssignmentDrainId
    future: concurrent.futures.Future[DrainBoundary]


def cursor_offsets(cursors: Mapping[str, int] | SourceCheckpoint) -> dict[TopicPartitionId, int]:
    """``"topic:partition" -> offset`` cursors (or a checkpoint: Kafka's own or unnamed, else
    :class:`~laminar_kafka.connector.errors.CheckpointError`) as ``{(topic, partition): offset}``.
    Both go through :meth:`KAFKA_CURSORS.accept <laminar_kafka.connector.checkpoint.CursorFormat.accept>`
    (a mapping as the unnamed checkpoint of its cursors), so its cursor check runs for either."""
    checkpoint = cursors if isinstance(cursors, SourceCheckpoint) else SourceCheckpoint(dict(cursors))
    return KAFKA_CURSORS.accept(checkpoint).partitions()


class AssignmentExecutor:
    """The ownership state of one vnode-mode generation and its reader-thread work in flight.

    ``cursor()`` returns the source's cursor; ``adopt(marker)`` applies an assignment change to it.
    :attr:`failure` is set once the generation is terminally failed (the source raises it).
    """

    def __init__(
        self,
        binding: VnodeBinding,
        metrics: SourceMetrics,
        cursor: Callable[[], Mapping[TopicPartitionId, int]],
        adopt: Callable[[AssignmentApplied], None],
    ) -> None:
        self.binding = binding
        self._metrics = metrics
        self._cursor = cursor
        self._adopt = adopt
        self.own: Ownership | None = None
        self.failure: FatalError | None = None
        self._reader: Reader | None = None
        self._change: _AssignmentChange | None = None
        self._change_ids = itertools.count(1)
        #: Explicit start cursors offered for one published version (acquire_partitions).
        self._offer: tuple[int, dict[TopicPartitionId, int]] | None = None
        #: Partitions announced by add_partitions that wait to join the routing table.
        self._unrouted: frozenset[TopicPartitionId] = frozenset()
        self._pause: _DrainPause | None = None
        #: Partitions whose records still in the FIFO must not be emitted (released, or acquired
        #: again at an explicit cursor); cleared when their AssignmentApplied marker is consumed.
        self.dropping: frozenset[TopicPartitionId] = frozenset()

    # -- state ----------------------------------------------------------------------------------

    @property
    def registry(self) -> VnodeRegistry:
        return self.binding.registry

    @property
    def version(self) -> int:
        """The pinned assignment version (0 before :meth:`pin`)."""
        return self.own.version if self.own is not None else 0

    def fail(self, reason: str) -> None:
        if self.own is not None:
            self.own = self.own.fail(reason)
        if self.failure is None:
            self.failure = FatalError(f"source generation failed: {reason}")

    def _set_own(self, own: Ownership) -> None:
        self.own = own
        if own.failure is not None and self.failure is None:
            self.failure = FatalError(f"source generation failed: {own.failure}")

    def _check_alive(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _require_own(self) -> Ownership:
        if self.own is None:
            raise FatalError("the vnode-assigned source is not started")
        return self.own

    # -- reader-thread work and FIFO markers ----------------------------------------------------

    def attach(self, reader: Reader) -> None:
        """The reader thread now holds the consumer; ownership changes go through it."""
        self._reader = reader

    def _running_reader(self, what: str) -> Reader:
        if self._reader is None:
            raise FatalError(f"{what} on a source that is not running")
        return self._reader

    def _submit(
        self,
        plan: Reconcile | FinishPlan,
        *,
        release: frozenset[TopicPartitionId],
        acquire: Mapping[TopicPartitionId, int | None],
        resume: Mapping[TopicPartitionId, int] | None = None,
    ) -> _AssignmentChange:
        reader = self._running_reader("an assignment change")
        assert self._change is None
        change_id = next(self._change_ids)
        cancelled = threading.Event()
        future = reader.change_assignment(
            change_id, release=release, acquire=acquire, resume=resume, cancelled=cancelled
        )
        change = _AssignmentChange(change_id, plan, future, cancelled)
        self._change = change
        return change

    def _apply(self, marker: AssignmentApplied) -> None:
        """Adopt what the reader thread did for the pending change (idempotent per change)."""
        change = self._change
        if change is None or change.change_id != marker.op_id:
            return
        self._change = None
        own = self._require_own()
        self._adopt(marker)
        self.dropping = self.dropping | marker.released | frozenset(marker.acquired)
        if isinstance(change.plan, Reconcile):
            self._set_own(own.reconciled(change.plan, marker.acquired))
            if marker.acquired and self._offer is not None and self._offer[0] == change.plan.version:
                self._offer = None
        else:
            self._set_own(own.finished(change.plan, marker.acquired))

    def _pause_for_drain(self, reader: Reader, round: AssignmentDrainId, revoked: frozenset[TopicPartitionId]) -> None:
        """Have the reader pause ``revoked`` and put ``round``'s boundary (nothing to pause: none)."""
        self._pause = _DrainPause(round, reader.pause_for_drain(round, revoked)) if revoked else None

    def _observe_pause(self) -> None:
        pause = self._pause
        if pause is None or not pause.future.done():
            return
        self._pause = None
        own = self._require_own()
        try:
            marker = pause.future.result()
        except Exception as exc:  # noqa: BLE001 - the pause failed on the reader thread
            self.fail(f"pausing for drain {pause.round} failed: {exc!r}")
            return
        drain = own.drain
        if drain is not None and drain.round == pause.round and drain.active:
            self._set_own(own.boundary_paused(pause.round, marker.positions))

    async def _await_pause(self, round: AssignmentDrainId, deadline: float) -> None:
        pause = self._pause
        if pause is not None and pause.round == round and not pause.future.done():
            try:
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(pause.future)), max(0.0, deadline - time.monotonic())
                )
            except asyncio.TimeoutError:
                pass  # plan_finish reports the missing pause position
            except Exception:  # noqa: BLE001 - observed (and failed) below
                pass
        self._observe_pause()
        self._check_alive()

    def consume_head_controls(self) -> None:
        """Consume ownership markers at the FIFO head (nothing is pending before them)."""
        if self._reader is None:
            return
        fifo = self._reader.fifo
        while True:
            head = fifo.head()
            if not isinstance(head, (DrainBoundary, AssignmentApplied)):
                return
            self.consume_control(head)
            fifo.release_head(head)
            if self.failure is not None:
                return

    def consume_control(self, item: ControlItem) -> None:
        """Apply a marker whose predecessors in the FIFO have all been emitted."""
        own = self._require_own()
        if isinstance(item, DrainBoundary):
            drain = own.drain
            if drain is not None and drain.round == item.round and drain.active:
                own = own.boundary_paused(item.round, item.positions)
                self._set_own(own.boundary_consumed(item.round, self._cursor(), time.monotonic()))
                drain = self._require_own().drain
                if drain is not None and drain.phase is DrainPhase.READY:
                    logger.info("drain %s ready: cut %s", item.round, dict(drain.cut))
        elif isinstance(item, AssignmentApplied):
            self._apply(item)
            self.dropping = self.dropping - item.released - frozenset(item.acquired)

    def check_cursor(
        self,
        before: Mapping[TopicPartitionId, int],
        after: Mapping[TopicPartitionId, int],
        assigned: Mapping[TopicPartitionId, int],
    ) -> None:
        """A poll is about to move the cursor from ``before`` to ``after``: fail the generation if
        it gained partitions this source does not read, or moved a revoked partition past its cut."""
        own = self._require_own()
        extra = set(after) - set(before) - set(assigned) if len(after) > len(before) else ()
        if extra:
            self.fail(f"records of partitions this source does not read were fetched: {sorted(extra)}")
        elif own.drain is not None and own.drain.phase is DrainPhase.READY:
            self._set_own(own.check_cut(after))
