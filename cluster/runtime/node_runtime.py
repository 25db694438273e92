"""The node runtime: drives source generations by the protocol, under a coordinator, into the sink.

One asyncio loop per node. Coordinator calls (they may block on ZooKeeper) run in a small control
executor; sink work runs in a single-thread executor (so writes, seals and publishes keep their
order); the Kafka client's blocking work is the source's business (it never blocks the loop).
Coordinator events arrive on a coordinator thread and are handed to the loop in order; the loop
handles them *between two* ``poll_batch`` calls, which is what aligns epoch barriers with the data.

Its parts, one concern each, in sibling modules (this one wires them and owns the node's phase and
membership): ``state`` (options, phase, round progress; pure), ``generation`` (build, call under a
deadline, retire a source generation), ``epochs`` (barriers, acks, publishing into the lake output),
``drain`` (rounds), ``acquisition`` (the assignment, the owned set, cursor offers), ``reassignment``
(a new assignment version), ``topology_follower`` (growth, pinned start), ``measures`` (handoff
pauses, lag). The sink, the lake output and the topology reader are collaborators it is given.

Guarantees:

- ``drive_control_plane()`` runs every turn, even while fenced. While ``checkpoint_ready()`` is
  False (``try_checkpoint()`` is ``None``): ``HOLD_INTAKE`` polls nothing; ``POLL_TO_REPLAY_BOUNDARY``
  polls at most one batch per turn, after retrying the retained barrier.
- ``poll_batch`` is cancelled after ``poll_timeout_s``, ``finish_drain`` shortly after its
  deadline: that retires a ``RETIRE_CONNECTOR`` generation and keeps a ``CANCEL_SAFE`` one.
- A :class:`FatalError`, or partitions lost without a committed drain, retire the generation; the
  next starts at the last durable manifest once the retired one's detached tasks ended. Unsealed
  rows are dropped first, so the published output never holds a row twice.
- No generation starts while an acked epoch may still commit. SUSPENDED: no new epoch is
  admitted. LOST (or a fenced ack): retire, drop unsealed output, rejoin with a new boot id.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.deadline import LakeCalls
from laminar_kafka.cluster.lake.outputs import LakeFactory, StagingSink
from laminar_kafka.cluster.lake.startup import reconcile_before_join
from laminar_kafka.cluster.metrics import LakeCommitMetrics, NodeMetrics
from laminar_kafka.cluster.runtime.acquisition import AssignmentFollower
from laminar_kafka.cluster.runtime.context import RuntimeContext, RuntimeExecutors
from laminar_kafka.cluster.runtime.drain import DrainRounds
from laminar_kafka.cluster.runtime.epochs import AckOutcome, EpochBarriers, EpochRecords
from laminar_kafka.cluster.runtime.generation import CallCancelled, Generations, SourceGeneration, bounded
from laminar_kafka.cluster.runtime.inbox import Inbox
from laminar_kafka.cluster.runtime.measures import HandoffClock, LagExporter, Watermarks
from laminar_kafka.cluster.runtime.reassignment import Reassignment
from laminar_kafka.cluster.runtime.state import (
    HandoffRecord,
    LeaveRequest,
    RuntimeOptions,
    RuntimePhase,
    ack_cursors,
    pinned_start_config,
)
from laminar_kafka.cluster.runtime.topology import Topology
from laminar_kafka.cluster.runtime.topology_follower import TopologyFollower
from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, FatalError, TransientError
from laminar_kafka.connector.protocol import SourceConnector
from laminar_kafka.coordinator.base import (
    AckRejected,
    AssignmentChanged,
    Coordinator,
    EpochCommitted,
    EpochOpened,
    Manifest,
    RoundDecided,
    RoundStarted,
    SessionState,
    SessionStateChanged,
)
from laminar_kafka.coordinator.errors import ControlStateLost, CoordinatorError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

#: the longest wait between two turns while anything runs on a timer (a round, an epoch, a retry)
TURN_WAIT_S = 0.05
#: the longest wait between two turns when settled (:meth:`NodeRuntime._settled`): every wake-up
#: that matters is an event then; this only bounds what a missed one could cost
SETTLED_WAIT_S = 0.5

__all__ = ["HandoffRecord", "NodeRuntime", "RuntimeOptions", "ack_cursors", "pinned_start_config"]


class NodeRuntime:
    """Coordinator + source generations + the sink, on one event loop. Use :meth:`run` once."""

    def __init__(
        self,
        coordinator: Coordinator,
        sink: StagingSink,
        lake: LakeFactory,
        source_factory: Callable[[], SourceConnector],
        topology: Callable[[], Topology],
        options: RuntimeOptions,
        *,
        metrics: NodeMetrics | None = None,
        watermarks: Watermarks | None = None,
        resolve_start: Callable[[], dict[str, int]] | None = None,
        pin_settings: Callable[[Coordinator], None] | None = None,
        check_settings: Callable[[Coordinator], None] | None = None,
    ) -> None:
        """``sink``: where this node stages the epoch in progress; ``lake`` builds the lake output
        committed epochs are published into, given the records epochs leave and the metrics'
        commit listener; ``topology`` reads the selected topics now (blocking; it may raise,
        transient failures are retried at the next interval); ``resolve_start`` resolves the
        configured start position to ``"topic:partition" -> offset`` once, for the initial manifest
        (None: the source's own initial position, for tests without a broker); ``pin_settings``
        (blocking) pins pipeline-wide settings once the coordinator started
        (TopologyFollower.pin_start); ``check_settings`` (blocking) compares this node's settings
        with the pinned ones before it reconciles with the lake."""
        self.coordinator = coordinator
        self._check_settings = check_settings
        self.sink = sink
        self.options = options
        self.metrics = metrics or NodeMetrics(options.node_id)
        self.metrics.watch_coordinator(lambda: coordinator.metrics)  # its counts, read at each scrape
        self._executors = RuntimeExecutors()
        context = RuntimeContext(coordinator, sink, options, self.metrics, self._executors)
        self._context = context
        self.assignment = AssignmentFollower(context)
        self.handoff_clock = HandoffClock(context)
        self.lag = LagExporter(context, watermarks) if watermarks is not None else None
        self.phase = RuntimePhase.JOINING
        self._session = SessionState.CONNECTED
        self._leave: LeaveRequest | None = None
        self.generations = Generations(context, source_factory, self._generation_retired)
        self.rounds = DrainRounds(context, self.assignment, self.generations)
        self.topology = TopologyFollower(context, topology, resolve_start, self.assignment, self.generations,
                                         pin_settings)
        self.lake = lake(EpochRecords(coordinator, options.pipeline, self.topology.topic_ids),
                         LakeCommitMetrics(self.metrics))
        self.epochs = EpochBarriers(context, self.lake)
        self.reassignment = Reassignment(context, self.assignment, self.generations, self.rounds, self.epochs,
                                         self.topology, self.handoff_clock)
        self._tasks: list[asyncio.Task[None]] = []
        self._inbox: Inbox | None = None
        self.rows_written = 0

    @property
    def lake_calls(self) -> LakeCalls:
        """The node's lake calls in progress (for the lake I/O deadline, :mod:`laminar_kafka.cluster.lake.deadline`)."""
        return self._executors.lake_calls

    @property
    def epochs_acked(self) -> int:
        return self.epochs.acked_count

    @property
    def epochs_committed(self) -> int:
        return self.epochs.committed_count

    @property
    def leave_requested_at(self) -> float | None:
        """When a planned leave was requested (:func:`time.monotonic`); None without one."""
        return self._leave.requested_at if self._leave is not None else None

    @property
    def handoffs(self) -> list[HandoffRecord]:
        return self.handoff_clock.handoffs

    def request_stop(self, planned_leave: bool = True) -> None:
        """Ask the node to stop (from the loop thread, e.g. a signal handler). With ``planned_leave``
        in vnode mode it first has the leader drain its vnodes away; otherwise it stops next turn."""
        if planned_leave and self.options.vnode_mode:
            if self._leave is None:
                self._leave = LeaveRequest(time.monotonic())
                logger.info("planned leave requested")
        else:
            self.phase = RuntimePhase.STOPPING
        if self._inbox is not None:
            self._inbox.wake.set()

    # -- main loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Join, serve until stopped (or the planned leave completes), then leave. Raises
        :class:`RuntimeFailure` on a condition the node cannot continue from."""
        self._inbox = Inbox()
        try:  # a failed start also stops the coordinator and the executors
            await self._join()
            if self.phase is RuntimePhase.JOINING:
                self.phase = RuntimePhase.RUNNING
            while not self.phase.is_final:
                await self._handle_events()
                observed = self.topology.take_observed()
                if observed is not None:
                    await self.topology.adopt(observed)
                if self.phase.is_final or not await self._follow_leave():
                    break
                if not await self._step():
                    await self._wait_for_work()
        finally:
            await self._shutdown()

    async def _join(self) -> None:
        topology = await self.topology.first()
        assert self._inbox is not None
        self.coordinator.subscribe(self._inbox.deliver)
        try:
            await self._executors.in_control(self.coordinator.connect, self.options.start_timeout_s)
            await reconcile_before_join(self._context, self.lake, topology, self.epochs.publish_now, self._check_settings)
            await self._executors.in_control(self.coordinator.start, self.options.start_timeout_s)
            await self.topology.adopt(topology, first=True)
            await self.topology.pin_start()
        except CoordinatorError as exc:  # e.g. unreachable, or the node id held by a live session
            raise RuntimeFailure(f"cannot join the pipeline: {exc}", cause=exc) from exc
        await self._executors.in_sink(self.sink.new_boot, self.coordinator.boot_id)  # after any write behind
        self.metrics.set_session_state(SessionState.CONNECTED.value)
        if self.options.vnode_mode:
            await self.topology.publish_vnode_load()
        await self.epochs.recover_sink()
        if self.lag is not None:
            self._tasks.append(asyncio.create_task(self.lag.run(
                lambda: self.generations.current.connector if self.generations.current is not None else None,
                self._lag_partitions, lambda: self.epochs.durable_cursors,
            )))
        if self.options.topology_interval_s > 0:
            self._tasks.append(asyncio.create_task(self.topology.watch(self.options.topology_interval_s, self._inbox.wake)))

    async def _follow_leave(self) -> bool:
        """Advance a planned leave; False when the node can stop now (it owns nothing)."""
        leave = self._leave
        if leave is None:
            return True
        if not leave.sent:
            self._leave = replace(leave, sent=True)
            if not self.assignment.owns_any_vnode():
                self.phase = RuntimePhase.LEFT
                return False
            await self._executors.in_control(self.coordinator.request_leave)
        if time.monotonic() - leave.requested_at > self.options.leave_timeout_s:
            raise RuntimeFailure(f"planned leave did not finish in {self.options.leave_timeout_s:.0f}s")
        return True

    async def _wait_for_work(self) -> None:
        """Wait for the next turn: :data:`TURN_WAIT_S` while anything runs on a timer, up to
        :data:`SETTLED_WAIT_S` when settled and the source has a ready event (see
        :meth:`_settled`); an event, a stop, new topology or the source's event end either."""
        assert self._inbox is not None
        generation = self.generations.current
        data = generation.connector.data_ready_notify() if generation is not None else None
        busy = self.rounds.active is not None or self.epochs.pending is not None
        # intake held (not reconciled, and no poll until it is): nothing clears the ready event, so
        # waiting on it would spin the loop for the whole hold (measured: 28,000 turns a second)
        held = generation is not None and self.generations.held_since is not None \
            and not generation.polls_while_unreconciled
        settled = data is not None and self._settled()
        wait, ask = SETTLED_WAIT_S if settled else TURN_WAIT_S, self.epochs.ask_due_in()  # a freshness ask's time
        await self._inbox.wait_for_work(None if busy or held else data, wait if ask is None else min(wait, ask))

    def _settled(self) -> bool:
        """Whether nothing waits on a timer: running with a current, reconciled generation, no
        round, epoch, unsent or uncommitted ack, start retry or planned leave. Then only a
        delivered event, a stop request, the topology watch or the source's ready event (data,
        or its control plane's progress) can give the loop work."""
        epochs = self.epochs
        return (
            self.phase is RuntimePhase.RUNNING
            and self._leave is None
            and self.generations.current is not None
            and self.generations.held_since is None
            and self.rounds.active is None
            and self.rounds.unresolved is None
            and epochs.pending is None
            and epochs.unsent is None
            and epochs.last_acked_epoch <= epochs.latest_committed_epoch
        )

    async def _step(self) -> bool:
        """One turn of the data plane; True if rows moved."""
        if await self.epochs.resend_if_due() is AckOutcome.FENCED:
            await self._lose_membership("a resent epoch ack was fenced")
            return False
        await self.epochs.ask_if_quiet()
        generation = self.generations.current
        if generation is None:
            if self.epochs.pending is not None and self.assignment.owns_vnodes_without_partitions():
                await self._ack_barrier(None)  # owns vnodes but no partition yet: an empty ack
            elif self.phase is RuntimePhase.RUNNING and self.reassignment.needs_generation():
                await self.reassignment.restart_from_manifest()
            return False
        connector = generation.connector
        try:
            connector.drive_control_plane()
            await self.assignment.offer_cursors(generation, self.generations.is_current)
            if self.rounds.unresolved is not None:
                await self.rounds.apply_unresolved(generation)
            if self.rounds.active is not None and self.generations.is_current(generation):
                await self.rounds.check(generation)
            if self.epochs.pending is not None and self.generations.is_current(generation):
                await self._ack_barrier(generation)
            if not self.generations.is_current(generation):
                return False  # retired above (a fatal drain refusal, a fenced ack): never touch it again
            if not connector.checkpoint_ready():  # not try_checkpoint(): no cursor built per turn
                self.generations.note_held(generation, self.assignment.snapshot, self.rounds.active)
                if not generation.polls_while_unreconciled:
                    return False  # HOLD_INTAKE: not reconciled with the published assignment
            else:
                self.generations.held_since = None
            batch = await bounded(connector.poll_batch(self.options.max_batch_records), self.options.poll_timeout_s,
                                  "poll_batch")
        except CallCancelled as exc:
            await self.generations.failed(exc, retire=generation.retired_by_cancellation)
            return False
        except (FatalError, TransientError) as exc:  # e.g. the schema registry unreachable: retried later
            await self.generations.failed(exc)
            return False
        except (ConnectorError, ConfigurationError) as exc:
            raise RuntimeFailure(f"source failed: {exc}", cause=exc) from exc
        if batch is None:
            return False
        records = batch.records
        # both, or neither, in the epoch; encoded while the next batch is polled (write_behind)
        await self._executors.write_behind(self.sink.write, records, batch.rejected)
        self.rows_written += records.num_rows
        rejected = batch.rejected.num_rows if batch.rejected else 0
        self.epochs.note_rows(records, rejected)  # dead letters land with the epoch too
        self.metrics.observe_batch(records.num_rows, records.nbytes, rejected)
        self.handoff_clock.note_rows(records)
        return True

    def _lag_partitions(self) -> list[TopicPartitionId]:
        owned = self.assignment.owned
        return sorted(owned) if owned is not None else sorted(self.topology.partitions)

    # -- source generations -----------------------------------------------------------------------

    def _generation_retired(self, generation: SourceGeneration | None) -> None:
        if generation is not None:
            self.handoff_clock.reset()  # rows of the next generation start the clock again
        self.assignment.forget_offers()
        self.rounds.generation_retired()

    # -- events -----------------------------------------------------------------------------------

    async def _handle_events(self) -> None:
        assert self._inbox is not None
        while self.phase is not RuntimePhase.STOPPING:
            event = self._inbox.next_event()
            if event is None:
                return
            if isinstance(event, SessionStateChanged):
                await self._on_session(event)
            elif self.phase is RuntimePhase.REJOINING:
                continue  # everything before the rejoin belongs to the dead membership
            elif isinstance(event, AssignmentChanged):
                await self._on_assignment(event)
            elif isinstance(event, EpochOpened):
                self.epochs.admit(event, self.assignment.snapshot, self._session is SessionState.SUSPENDED)
            elif isinstance(event, EpochCommitted):
                await self._on_epoch_committed(event.manifest)
            elif isinstance(event, RoundStarted):
                await self.rounds.started(event)
            elif isinstance(event, RoundDecided):
                await self.rounds.decided(event)
            elif isinstance(event, AckRejected):
                await self._on_ack_rejected(event)

    async def _on_session(self, event: SessionStateChanged) -> None:
        self.metrics.set_session_state(event.state.value)
        self._session = event.state
        if event.state is SessionState.SUSPENDED:
            logger.warning("coordinator session suspended: no new epochs")
        elif event.state is SessionState.LOST:
            await self._lose_membership("coordinator session lost")

    async def _lose_membership(self, reason: str) -> None:
        logger.warning("%s: retiring the source generation and rejoining", reason)
        self.phase = RuntimePhase.REJOINING
        self.epochs.forget_membership()  # the old boot's acks are dropped unless already committed
        self.metrics.epochs_aborted.labels(self.metrics.node).inc()
        await self.generations.retire()
        self.rounds.forget_membership()
        while True:
            if self.phase is RuntimePhase.STOPPING:
                return  # run() stops at its next check; the membership stays lost
            try:
                await self._executors.in_control(self.coordinator.rejoin)
                break
            except ControlStateLost as exc:
                raise RuntimeFailure(f"{exc}: start the node again: it reconciles with the lake", cause=exc) from exc
            except CoordinatorError as exc:
                logger.warning("rejoin failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
        self.phase = RuntimePhase.RUNNING
        self._session = SessionState.CONNECTED
        await self._executors.in_sink(self.sink.new_boot, self.coordinator.boot_id)  # after any write behind
        snapshot = await self._executors.in_control(self.coordinator.assignment)
        await self._on_assignment(AssignmentChanged(snapshot, 0), force_restart=True)

    async def _on_assignment(self, event: AssignmentChanged, *, force_restart: bool = False) -> None:
        if await self.reassignment.adopt(event, force_restart=force_restart, leaving=self._leave is not None):
            self.phase = RuntimePhase.LEFT

    async def _ack_barrier(self, generation: SourceGeneration | None) -> None:
        """Ack the pending barrier with the generation's cursor (``None``: no source, no partition
        owned: an ack with no cursor and no output, so the epoch is not held up)."""
        if generation is None:
            checkpoint: SourceCheckpoint | None = SourceCheckpoint({})
        else:
            checkpoint = generation.connector.try_checkpoint()
        if checkpoint is None:
            return  # not reconciled yet; the barrier is retained and retried next turn
        epoch = self.epochs.pending.epoch if self.epochs.pending is not None else 0
        if await self.epochs.ack(checkpoint, self.assignment.routing_snapshot()) is AckOutcome.FENCED:
            await self._lose_membership(f"epoch {epoch} ack fenced")

    async def _on_epoch_committed(self, manifest: Manifest) -> None:
        connector = self.generations.current.connector if self.generations.current is not None else None
        await self.epochs.committed(manifest, connector, self.assignment.routing_snapshot())
        self.generations.failures = 0
        await self.epochs.recover_periodically(manifest.epoch)

    async def _on_ack_rejected(self, event: AckRejected) -> None:
        """The leader rejected our ack of the open epoch: retire the generation (its cursor cannot
        be trusted), start a new one from the latest manifest, and ack the same epoch again. The
        rejected ack's staged files are never listed by a manifest; sink recovery deletes them."""
        snapshot = self.assignment.snapshot
        if snapshot is None or not self.epochs.rejected(event):
            return
        await self.generations.retire()
        self.epochs.pending = EpochOpened(event.epoch, snapshot.version)

    # -- recovery and shutdown --------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop the background tasks, the source, the coordinator and the executors; each step
        runs even when an earlier one raised."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            try:
                if self.lag is not None:
                    await self.lag.close()
            finally:
                await self.generations.retire(final=True)
        finally:
            try:
                await self._executors.in_control(self.coordinator.stop)
            finally:
                await self._executors.shutdown()
