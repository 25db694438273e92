"""The node runtime: drives a source connector by the protocol, under a coordinator, into the sink.

One asyncio loop per node. Coordinator calls (they may block on ZooKeeper) run in a small control
executor; sink work runs in a single-thread executor (so writes, seals and publishes keep their
order); the Kafka client's blocking work is the source's business (it never blocks the loop).
Coordinator events arrive on a coordinator thread and are handed to the loop in order; the loop
handles them *between two* ``poll_batch`` calls, which is what aligns epoch barriers with the data.

What the runtime guarantees (DESIGN sections 4 to 6):

- Intake is held while ``try_checkpoint()`` is ``None``; ``drive_control_plane()`` is called every
  turn, even while fenced.
- Epoch barrier E at version V: the source's cursor is captured between two polls, the open staged
  files are sealed as epoch E, and the ack carries exactly the partitions this node owns at V and the
  staged paths. Nothing written after the barrier belongs to E.
- ``EpochCommitted``: every output the manifest lists is published (idempotent, any node's), then
  ``notify_epoch_committed`` advances the advisory group offsets to the manifest's cursors.
- Rounds: ``begin_drain`` with the round's deadline (a refusal, :class:`DrainError`, is retried
  every turn until the deadline), ``poll_drain_ready`` each turn, then ``report_drain_ready``; the
  decision is applied with ``finish_drain`` and, on a commit, the handoff cursors of the manifest
  that holds the cut, so the gaining node takes its partitions without restarting its source.
- Partitions gained without a drain (a dead node's, a first assignment, a self -> other -> self move)
  are acquired in place with ``acquire_partitions`` at the cursors of the durable manifest, offered
  for the exact published version the source waits for (``acquisition_needed``).
- Cancellation policy: a :class:`FatalError` from the source (a drain deadline passed, a resolution
  that did not complete, a failed reconciliation) retires that source generation; a new one starts
  at the last durable manifest's cursors. Rows not yet sealed are dropped first (they will be read
  again), so the published output never holds a row twice. Partitions lost without a committed
  drain also restart the generation, for the same reason.
- An ack that fails without being fenced is sent again, unchanged (the leader waits for every live
  owner's ack); no source generation starts while an acked epoch may still commit.
- SUSPENDED: no new epoch is admitted. LOST (or a fenced ack): the source generation is retired,
  unsealed output dropped, and the node rejoins with a new boot id.
- Topology (DESIGN section 10): the selected topics are read every ``topology_interval_s``. New
  partitions (of a known topic, or of a new topic a pattern matches) are handed to the running
  source (``add_partitions``): their vnode's owner reads them from their first offset, or from the
  manifest's cursor when an earlier owner already did. The owned set, the acks and the advisory
  commits all route every partition by the current assignment, never by a list fixed at start. A
  topic re-created under its name (a new topic id), or gone for three observations in a row, stops
  the node with a :class:`RuntimeFailure`.
- Pinned start: before any node reads, the start position is resolved once and written as the
  pipeline's initial manifest (create-once); every generation and every acquisition starts from a
  manifest, never from a position resolved again.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from cluster.errors import RuntimeFailure
from cluster.metrics import NodeMetrics
from cluster.sink import ParquetSink, publish, recover
from coordinator.base import (
    AckRejected,
    AssignmentChanged,
    Coordinator,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
    SessionState,
    SessionStateChanged,
)
from coordinator.errors import CoordinatorError, FencedError, RoundError
from coordinator.registry import AssignmentSnapshot, VnodeRegistry
from coordinator.rounds import AssignmentDrainId
from coordinator.routing import owned_partitions, partition_vnode
from cluster.topology import MISSING_OBSERVATIONS, Topology, TopologyChange, TopologyError, TopologyView
from kafka_source.checkpoint import SourceCheckpoint, format_key, parse_key
from kafka_source.connector import (
    CheckpointAttempt,
    ConnectorConfig,
    DeliveryGuarantee,
    SourceConnector,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourcePosition,
    SourceStart,
)
from kafka_source.errors import ConnectorError, DrainError, ErrorRateExceededError, FatalError, TransientError

logger = logging.getLogger(__name__)

__all__ = ["HandoffRecord", "NodeRuntime", "RuntimeOptions", "ack_cursors"]

T = TypeVar("T")
#: seconds between two attempts to send an ack that failed transiently
_ACK_RETRY_S = 0.5
#: seconds before a source start that failed transiently is tried again
_START_RETRY_S = 1.0
TP = tuple[str, int]


@dataclass(frozen=True)
class RuntimeOptions:
    node_id: int
    source_identity: str
    connector: ConnectorConfig
    max_batch_records: int = 10000
    vnode_mode: bool = True
    start_timeout_s: float = 30.0
    leave_timeout_s: float = 120.0
    #: consecutive source generations that may fail before the node gives up (reset by a commit)
    max_generation_failures: int = 5
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    #: how often the topics' metadata is read (new partitions, new matching topics); 0 = never
    topology_interval_s: float = 10.0


@dataclass(frozen=True)
class _Drain:
    """The round this node takes part in: ``begun`` once ``begin_drain`` accepted it."""

    drain_id: AssignmentDrainId
    deadline: float
    started: float
    begun: bool = False


@dataclass(frozen=True)
class HandoffRecord:
    """One partition this node acquired: how long it was paused (round start to first row here)."""

    partition: str
    pause_s: float


def ack_cursors(
    checkpoint: SourceCheckpoint, source_identity: str, snapshot: AssignmentSnapshot | None, node_id: int
) -> dict[str, int]:
    """The ``"topic:partition" -> next offset`` map of an ack: the checkpoint's offsets of the
    partitions whose vnode ``node_id`` owns in ``snapshot`` (routed one by one, so a partition that
    appeared after start counts like any other); all of them when ``snapshot`` is None (the node
    reads everything). Pure."""
    if snapshot is None:
        return dict(checkpoint.offsets)
    owners, count = snapshot.owners, snapshot.vnode_count
    mine: dict[str, int] = {}
    for key, offset in checkpoint.offsets.items():
        topic, partition = parse_key(key)
        if owners[partition_vnode(source_identity, topic, partition, count)] == node_id:
            mine[key] = offset
    return mine


def pinned_start_config(connector: ConnectorConfig, cursors: dict[str, int]) -> ConnectorConfig:
    """``connector`` starting exactly at the pinned initial manifest's ``cursors``: startup mode
    ``specific-offsets`` with them (partitions they lack start at their first offset), or
    ``earliest`` when there are none (a pattern that matched no topic at start). Pure."""
    properties = {k: v for k, v in connector.properties.items() if not k.startswith("startup.")}
    if cursors:
        properties["startup.mode"] = "specific-offsets"
        properties["startup.specific-offsets"] = ",".join(f"{key}:{offset}" for key, offset in sorted(cursors.items()))
    else:
        properties["startup.mode"] = "earliest"
    return ConnectorConfig(connector.connector_type, properties)


class NodeRuntime:
    """Coordinator + one source + the sink, on one event loop. Use :meth:`run` once."""

    def __init__(
        self,
        coordinator: Coordinator,
        sink: ParquetSink,
        source_factory: Callable[[], SourceConnector],
        topology: Callable[[], Topology],
        options: RuntimeOptions,
        metrics: NodeMetrics | None = None,
        watermarks: Callable[[list[TP]], dict[TP, int]] | None = None,
        resolve_start: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """``topology`` reads the selected topics now (blocking; it may raise, transient failures
        are retried at the next interval); ``resolve_start`` resolves the configured start position
        to ``"topic:partition" -> offset`` once, for the initial manifest (None: the source's own
        Initial position, for tests without a broker)."""
        self.coordinator = coordinator
        self.sink = sink
        self.options = options
        self.metrics = metrics or NodeMetrics(options.node_id)
        self._source_factory = source_factory
        self._watermarks = watermarks
        self._durable: dict[str, int] = {}
        self._lag_task: asyncio.Task[None] | None = None
        self._read_topology = topology
        self._resolve_start = resolve_start
        self._view = TopologyView()
        self._observed: Topology | None = None
        self._topology_task: asyncio.Task[None] | None = None
        self._pinned_start: Manifest | None = None
        self._control = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="laminar-control")
        #: Kafka metadata reads (topology, watermarks for the lag metrics): slow while Kafka is
        #: unreachable, so they never hold a thread the coordinator calls need
        self._metadata_exec = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="laminar-metadata")
        self._sink_exec = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="laminar-sink")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[CoordinatorEvent] | None = None
        self._wake: asyncio.Event | None = None
        self._registry = VnodeRegistry(1)
        self._registry_ready = False
        self._partitions: list[TP] = []
        self._owned: frozenset[TP] | None = None
        self._source: SourceConnector | None = None
        self._snapshot: AssignmentSnapshot | None = None
        self._pending_barrier: EpochOpened | None = None
        #: an ack whose send failed transiently: (ack, barrier time, next attempt), see _send_ack
        self._unsent_ack: tuple[EpochAck, float, float] | None = None
        self._drain: _Drain | None = None
        #: the last cursors offer: (version, partitions it was for)
        self._offered: tuple[int, frozenset[TP]] | None = None
        self._manifest_epoch_at_version = 0
        self._generation_failures = 0
        self._start_retry_at = 0.0
        self._drain_reported: AssignmentDrainId | None = None
        self._drained_commit = False
        self._suspended = False
        self._lost = False
        self._leaving = False
        self._leave_requested_at = 0.0
        self._stop_requested = False
        self._finished = False
        self._latest_epoch = 0
        self._last_acked_epoch = 0
        self._held_since: float | None = None
        self._intake_held_since: float | None = None
        self._round_started_at: float | None = None
        self._awaiting_first_row: dict[str, float] = {}
        self.handoffs: list[HandoffRecord] = []
        self.rows_written = 0
        self.epochs_acked = 0
        self.epochs_committed = 0

    # -- plumbing ---------------------------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._control, functools.partial(fn, *args))

    async def _in_metadata(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._metadata_exec, functools.partial(fn, *args))

    async def _in_sink(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._sink_exec, functools.partial(fn, *args))

    def _on_event(self, event: CoordinatorEvent) -> None:
        """Coordinator thread -> loop (never blocks)."""
        loop, queue = self._loop, self._events
        if loop is None or queue is None:
            return
        try:
            loop.call_soon_threadsafe(self._enqueue, event)
        except RuntimeError:  # the loop is closed: the node is shutting down
            pass

    def _enqueue(self, event: CoordinatorEvent) -> None:
        assert self._events is not None and self._wake is not None
        self._events.put_nowait(event)
        self._wake.set()

    def request_stop(self, planned_leave: bool = True) -> None:
        """Ask the node to stop (from the loop thread, e.g. a signal handler).

        With ``planned_leave`` in vnode mode the node first asks the leader to drain its vnodes
        away and stops once it owns none; otherwise it stops at the next turn.
        """
        if planned_leave and self.options.vnode_mode:
            if not self._leaving:
                self._leaving = True
                self._leave_requested_at = time.monotonic()
                logger.info("planned leave requested")
        else:
            self._stop_requested = True
        if self._wake is not None:
            self._wake.set()

    # -- main loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Join, serve until stopped (or the planned leave completes), then leave. Raises
        :class:`RuntimeFailure` on a condition the node cannot continue from."""
        self._loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self._wake = asyncio.Event()
        leave_sent = False
        try:  # a failed start also stops the coordinator and the executors
            topology = await self._first_topology()
            self.coordinator.subscribe(self._on_event)
            try:
                await self._blocking(self.coordinator.start, self.options.start_timeout_s)
                await self._adopt_topology(topology, first=True)
                await self._pin_start()
            except CoordinatorError as exc:  # e.g. unreachable, or the node id held by a live session
                raise RuntimeFailure(f"cannot join the pipeline: {exc}", cause=exc) from exc
            self.sink.new_boot(self.coordinator.boot_id)
            self.metrics.set_session_state(SessionState.CONNECTED.value)
            if self.options.vnode_mode:
                await self._publish_vnode_load()
            await self._recover_sink()
            if self._watermarks is not None:
                self._lag_task = asyncio.create_task(self._export_lag())
            if self.options.topology_interval_s > 0:
                self._topology_task = asyncio.create_task(self._watch_topology(self.options.topology_interval_s))
            while not self._finished:
                await self._handle_events()
                await self._apply_observed_topology()
                if self._stop_requested:
                    break
                if self._leaving and not leave_sent:
                    leave_sent = True
                    if not self._owns_anything():
                        break
                    await self._blocking(self.coordinator.request_leave)
                if self._leaving and time.monotonic() - self._leave_requested_at > self.options.leave_timeout_s:
                    raise RuntimeFailure(f"planned leave did not finish in {self.options.leave_timeout_s:.0f}s")
                progressed = await self._step()
                if not progressed:
                    await self._wait_for_work()
        finally:
            await self._shutdown()

    async def _wait_for_work(self, timeout: float = 0.05) -> None:
        assert self._wake is not None
        if self._wake.is_set():
            self._wake.clear()
            return
        waits = [asyncio.ensure_future(self._wake.wait())]
        data = self._source.data_ready_notify() if self._source is not None else None
        if data is not None and self._drain is None and self._pending_barrier is None:
            waits.append(asyncio.ensure_future(data.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self._wake.clear()

    async def _step(self) -> bool:
        """One turn of the data plane; True if rows moved."""
        unsent = self._unsent_ack
        if unsent is not None and time.monotonic() >= unsent[2]:
            await self._send_ack(unsent[0], unsent[1])
        source = self._source
        if source is None:
            if self._pending_barrier is not None and self._owns_no_partition():
                await self._try_barrier(None)  # owns vnodes but no partition yet: an empty ack
            elif self._needs_generation():
                await self._restart_from_manifest()
            return False
        try:
            source.drive_control_plane()
            await self._offer_cursors(source)
            if self._drain is not None:
                await self._check_drain(source)
            if self._pending_barrier is not None and self._source is source:
                await self._try_barrier(source)
            if self._source is not source:
                return False  # retired above (a fatal drain refusal, a fenced ack): never touch it again
            if source.try_checkpoint() is None:
                self._note_held(source)
                return False  # HoldIntake: not reconciled with the published assignment
            self._intake_held_since = None
            batch = await source.poll_batch(self.options.max_batch_records)
        except ErrorRateExceededError as exc:
            raise RuntimeFailure(f"source failed: {exc}", cause=exc) from exc
        except FatalError as exc:
            await self._generation_failed(exc)
            return False
        except ConnectorError as exc:
            raise RuntimeFailure(f"source failed: {exc}", cause=exc) from exc
        if batch is None:
            return False
        records = batch.records
        await self._in_sink(self.sink.write, records)
        self.rows_written += records.num_rows
        self.metrics.observe_batch(records.num_rows, records.nbytes)
        if self._awaiting_first_row:
            self._note_first_rows(records)
        return True

    def _note_held(self, source: SourceConnector) -> None:
        """Warn (every 10 s) while intake stays held: reconciliation is stuck somewhere."""
        now = time.monotonic()
        if self._intake_held_since is None:
            self._intake_held_since = now
        elif now - self._intake_held_since > 10.0:
            self._intake_held_since = now
            waiting = source.acquisition_needed() if self.options.vnode_mode else None  # type: ignore[attr-defined]
            logger.warning(
                "intake held for 10 s: version %s, drain %s, waiting for cursors %s",
                self._snapshot.version if self._snapshot else None, self._drain, waiting,
            )

    def _needs_generation(self) -> bool:
        """Whether a source generation should start now: this node owns partitions but runs no
        source, and every epoch it acked is committed (a generation started from an older
        manifest would read the acked rows again while the epoch can still commit them)."""
        if self._lost or self._stop_requested or self._snapshot is None:
            return False
        if time.monotonic() < self._start_retry_at:
            return False
        if not (self._owned is None or bool(self._owned)):
            return False
        if self._last_acked_epoch > self._latest_epoch:
            now = time.monotonic()
            if self._held_since is None:
                self._held_since = now
            elif now - self._held_since > 10.0:
                logger.warning(
                    "waiting for acked epoch %d to commit before starting a source generation",
                    self._last_acked_epoch,
                )
                self._held_since = now
            return False
        self._held_since = None
        return True

    async def _generation_failed(self, exc: ConnectorError) -> None:
        """Retire a failed source generation; the next turn starts one from the manifest."""
        self._generation_failures += 1
        if self._generation_failures > self.options.max_generation_failures:
            raise RuntimeFailure(
                f"source failed {self._generation_failures} times in a row: {exc}", cause=exc
            ) from exc
        logger.warning("source generation failed (%s); restarting from the last manifest", exc)
        self.metrics.generations_retired.labels(self.metrics.node).inc()
        await self._retire_source()

    async def _offer_cursors(self, source: SourceConnector) -> None:
        """Offer the durable manifest's cursors for partitions the source waits for (acquired
        without a drain) at the version it waits at; once per version."""
        if not self.options.vnode_mode:
            return
        needed = source.acquisition_needed()  # type: ignore[attr-defined]
        if needed is None:
            return
        version, partitions = needed
        if self._offered == (version, partitions):
            return
        snapshot = self._snapshot
        manifest_epoch = 0
        if snapshot is not None and snapshot.version == version and self._manifest_epoch_at_version:
            manifest_epoch = self._manifest_epoch_at_version
        manifest = await self._manifest_or_latest(manifest_epoch)
        if self._source is not source:
            return
        cursors = dict(manifest.cursors.get(self.options.source_identity, {})) if manifest is not None else {}
        source.acquire_partitions(cursors, version)  # type: ignore[attr-defined]
        self._offered = (version, partitions)
        logger.info(
            "version %d: acquiring %d partition(s) at the cursors of %s",
            version, len(partitions), f"manifest {manifest.epoch}" if manifest is not None else "no manifest",
        )

    async def _manifest_or_latest(self, epoch: int) -> Manifest | None:
        """Manifest ``epoch`` (``0``: the latest), or the latest when it was garbage-collected."""
        if epoch > 0:
            try:
                return await self._blocking(self.coordinator.manifest, epoch)
            except CoordinatorError as exc:
                logger.info("manifest %d unavailable (%s); using the latest", epoch, exc)
        return await self._blocking(self.coordinator.latest_manifest)

    def _note_first_rows(self, records: Any) -> None:
        """Close the handoff clock of every (topic, partition) with a row in `records`."""
        now = time.monotonic()
        pairs = pa.table({
            "topic": pc.cast(records["_topic"], pa.string()), "partition": records["_partition"],
        }).group_by(["topic", "partition"]).aggregate([])
        for topic, partition in zip(pairs["topic"].to_pylist(), pairs["partition"].to_pylist()):
            key = f"{topic}:{partition}"
            started = self._awaiting_first_row.pop(key, None)
            if started is not None:
                record = HandoffRecord(key, now - started)
                self.handoffs.append(record)
                self.metrics.handoff_pause.labels(self.metrics.node, key).set(record.pause_s)
                logger.info("handoff partition=%s pause_ms=%.1f", key, record.pause_s * 1000)

    # -- events -----------------------------------------------------------------------------------

    async def _handle_events(self) -> None:
        assert self._events is not None
        while not self._events.empty():
            event = self._events.get_nowait()
            if isinstance(event, SessionStateChanged):
                await self._on_session(event)
            elif self._lost:
                continue  # everything before the rejoin belongs to the dead membership
            elif isinstance(event, AssignmentChanged):
                await self._on_assignment(event)
            elif isinstance(event, EpochOpened):
                self._on_epoch_opened(event)
            elif isinstance(event, EpochCommitted):
                await self._on_epoch_committed(event.manifest)
            elif isinstance(event, RoundStarted):
                await self._on_round_started(event)
            elif isinstance(event, RoundDecided):
                await self._on_round_decided(event)
            elif isinstance(event, AckRejected):
                await self._on_ack_rejected(event)

    async def _on_session(self, event: SessionStateChanged) -> None:
        self.metrics.set_session_state(event.state.value)
        if event.state is SessionState.SUSPENDED:
            logger.warning("coordinator session suspended: no new epochs")
            self._suspended = True
        elif event.state is SessionState.CONNECTED:
            self._suspended = False
        elif event.state is SessionState.LOST:
            await self._lose_membership("coordinator session lost")

    async def _lose_membership(self, reason: str) -> None:
        logger.warning("%s: retiring the source generation and rejoining", reason)
        self._lost = True
        self._last_acked_epoch = 0  # the old boot's acks are dropped unless already committed
        self.metrics.epochs_aborted.labels(self.metrics.node).inc()
        await self._retire_source()
        self._pending_barrier = None
        self._unsent_ack = None
        self._drain = None
        while True:
            if self._stop_requested:
                return  # run() stops at its next check; the membership stays lost
            try:
                await self._blocking(self.coordinator.rejoin)
                break
            except CoordinatorError as exc:
                logger.warning("rejoin failed (%s); retrying", exc)
                await asyncio.sleep(1.0)
        self._lost = False
        self._suspended = False
        self.sink.new_boot(self.coordinator.boot_id)
        snapshot = await self._blocking(self.coordinator.assignment)
        await self._on_assignment(AssignmentChanged(snapshot, 0), force_restart=True)

    async def _retire_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            self._awaiting_first_row.clear()  # rows of the next generation start the clock again
        self._offered = None
        drain = self._drain
        if drain is not None and drain.begun and self._drain_reported != drain.drain_id:
            self._drain = _Drain(drain.drain_id, drain.deadline, drain.started)  # the next generation begins it
        if source is not None:
            try:
                await source.close()
            except ConnectorError as exc:
                logger.warning("closing a retired source failed: %s", exc)
        await self._in_sink(self.sink.discard_unsealed)

    def _owned_at(self, snapshot: AssignmentSnapshot) -> frozenset[TP] | None:
        if not self.options.vnode_mode:
            return None if snapshot.vnodes_of(self.options.node_id) else frozenset()
        return owned_partitions(self.options.source_identity, self._partitions, snapshot, self.options.node_id)

    def _owns_no_partition(self) -> bool:
        """Vnode mode: this node owns vnodes at the current version but none carries a partition."""
        return self._owned is not None and not self._owned and self._owns_anything()

    def _owns_anything(self) -> bool:
        snapshot = self._snapshot
        return snapshot is not None and bool(snapshot.vnodes_of(self.options.node_id))

    def _mirror(self, snapshot: AssignmentSnapshot) -> None:
        """Publish ``snapshot`` into the registry the sources read, with the coordinator's own
        ``changed_at`` (this node may not see every version)."""
        if not self._registry_ready or self._registry.vnode_count != snapshot.vnode_count:
            self._registry = VnodeRegistry(snapshot.vnode_count)
            self._registry_ready = True
        if snapshot.version > self._registry.snapshot().version:
            self._registry.publish_snapshot(snapshot)

    async def _on_assignment(self, event: AssignmentChanged, *, force_restart: bool = False) -> None:
        snapshot = event.snapshot
        if self._snapshot is not None and snapshot.version <= self._snapshot.version and not force_restart:
            return
        previous = self._owned if self._source is not None else frozenset()
        self._snapshot = snapshot
        self._manifest_epoch_at_version = event.manifest_epoch
        barrier = self._pending_barrier
        if barrier is not None and barrier.assignment_version != snapshot.version:
            self._pending_barrier = None  # epochs never straddle versions: that epoch is closed
        self.metrics.assignment_version.labels(self.metrics.node).set(snapshot.version)
        if self.options.vnode_mode:
            self._mirror(snapshot)
        owned = self._owned_at(snapshot)
        self._owned = owned
        drained_commit, self._drained_commit = self._drained_commit, False
        round_started, self._round_started_at = self._round_started_at, None
        if owned is not None and not owned:
            if self._source is not None:
                logger.info("version %d: this node owns no partition; closing its source", snapshot.version)
                await self._retire_source()
            self.metrics.owned_partitions.labels(self.metrics.node).set(0)
            if self._leaving and not snapshot.vnodes_of(self.options.node_id):
                logger.info("planned leave complete at version %d", snapshot.version)
                self._finished = True
            return
        count = len(owned) if owned is not None else len(self._partitions)
        self.metrics.owned_partitions.labels(self.metrics.node).set(count)
        if owned is None:  # embedded: one node reads everything
            if self._source is None or force_restart:
                await self._retire_source()  # _step starts the next generation
            return
        gained = owned - (previous or frozenset())
        lost = (previous or frozenset()) - owned
        if self._source is None or force_restart or (lost and not drained_commit):
            logger.info(
                "version %d: %d partition(s) owned, %d acquired, %d released; starting a source generation",
                snapshot.version, len(owned), len(gained), len(lost),
            )
            await self._retire_source()  # _step starts the next generation from the latest manifest
        elif gained:
            # acquired in place: at the handoff cursors of a committed drain, or offered from the
            # manifest by _offer_cursors when the source waits for explicit cursors
            logger.info(
                "version %d: %d partition(s) owned, %d acquired in place, %d released",
                snapshot.version, len(owned), len(gained), len(lost),
            )
            await self._offer_cursors(self._source)
        if round_started is not None:  # a live handoff: the pause lasts until the first row here
            for tp in gained:
                self._awaiting_first_row.setdefault(format_key(*tp), round_started)

    async def _restart_from_manifest(self) -> None:
        """Retire the current generation and start a new one at the latest durable manifest's
        cursors (the truth for recovery: a later manifest carries every partition's cursor)."""
        await self._retire_source()
        manifest = await self._blocking(self.coordinator.latest_manifest)
        if manifest is not None and manifest.epoch > self._latest_epoch:
            await self._publish_manifest(manifest)
        source = self._source_factory()
        connector = self.options.connector
        cursors = dict(manifest.cursors.get(self.options.source_identity, {})) if manifest is not None else {}
        if manifest is None:
            position: SourcePosition = SourcePosition.Initial()
        elif manifest.epoch == 0:  # the pinned start: exactly its offsets, nothing resolved again
            position, connector = SourcePosition.Initial(), pinned_start_config(connector, cursors)
        else:
            position = SourcePosition.Resume(
                CheckpointAttempt(manifest.epoch, manifest.epoch),
                SourceCheckpoint(cursors, manifest.assignment_version if self.options.vnode_mode else 0),
            )
        try:
            if self.options.vnode_mode:
                source.set_vnode_assignment(self.options.source_identity, self._registry, self.options.node_id)
            await source.start(SourceStart(connector, position, self.options.delivery))
        except TransientError as exc:  # e.g. a partition without a leader yet, a broker restarting
            self._start_retry_at = time.monotonic() + _START_RETRY_S
            logger.warning("source start failed transiently (%s); retrying in %.0fs", exc, _START_RETRY_S)
            return
        except ConnectorError as exc:
            raise RuntimeFailure(f"source start failed: {exc}", cause=exc) from exc
        self._source = source
        self._offered = None
        logger.info(
            "source generation started from %s",
            f"manifest {manifest.epoch}" if manifest is not None else "the initial position",
        )

    def _on_epoch_opened(self, event: EpochOpened) -> None:
        if self._suspended:
            logger.info("epoch %d not admitted: session suspended", event.epoch)
            return
        if self._snapshot is not None and event.assignment_version != self._snapshot.version:
            logger.warning(
                "epoch %d is at version %d but this node has seen version %d; skipping",
                event.epoch, event.assignment_version, self._snapshot.version,
            )
            return
        if self._snapshot is not None and not self._owns_anything():
            return  # not an owner at the epoch's version: the leader does not wait for this node
        self._pending_barrier = event

    async def _try_barrier(self, source: SourceConnector | None) -> None:
        """Ack the pending barrier with the source's cursor (``None``: no source, no partition
        owned: an ack with no cursor and no output, so the epoch is not held up)."""
        event = self._pending_barrier
        assert event is not None
        checkpoint = SourceCheckpoint({}) if source is None else source.try_checkpoint()
        if checkpoint is None:
            return  # not reconciled yet; the barrier waits
        self._pending_barrier = None
        started = time.monotonic()
        cursors = ack_cursors(
            checkpoint, self.options.source_identity,
            self._snapshot if self.options.vnode_mode else None, self.options.node_id,
        )
        staged = await self._in_sink(self.sink.seal, event.epoch)
        ack = EpochAck(
            node_id=self.options.node_id,
            boot_id=self.coordinator.boot_id,
            epoch=event.epoch,
            assignment_version=event.assignment_version,
            cursors={self.options.source_identity: cursors},
            outputs=staged,
        )
        # from here the ack may be recorded: no generation starts before epoch E commits
        self._last_acked_epoch = max(self._last_acked_epoch, event.epoch)
        await self._send_ack(ack, started)

    async def _send_ack(self, ack: EpochAck, started: float) -> None:
        """Send ``ack``. The leader waits for every live owner's ack, so a transient failure keeps
        this very ack (its cursors and the files sealed for it) and :meth:`_step` sends it again;
        a fenced one ends this membership."""
        self._unsent_ack = None
        try:
            await self._blocking(self.coordinator.ack_epoch, ack)
        except FencedError as exc:
            await self._lose_membership(f"epoch {ack.epoch} ack fenced ({exc})")
            return
        except CoordinatorError as exc:
            logger.warning("epoch %d ack failed: %s; retrying", ack.epoch, exc)
            self._unsent_ack = (ack, started, time.monotonic() + _ACK_RETRY_S)
            return
        self.epochs_acked += 1
        self.metrics.checkpoint_seconds.labels(self.metrics.node).observe(time.monotonic() - started)

    async def _publish_manifest(self, manifest: Manifest) -> None:
        await self._in_sink(publish, self.sink.fs, self.sink.root, manifest.outputs)
        self._latest_epoch = max(self._latest_epoch, manifest.epoch)

    async def _on_epoch_committed(self, manifest: Manifest) -> None:
        if self._unsent_ack is not None and self._unsent_ack[0].epoch <= manifest.epoch:
            self._unsent_ack = None  # recorded after all (only its answer was lost)
        await self._publish_manifest(manifest)
        self._durable = dict(manifest.cursors.get(self.options.source_identity, {}))
        self.epochs_committed += 1
        self._generation_failures = 0
        self.metrics.epochs_committed.labels(self.metrics.node).inc()
        self._export_coordinator_metrics()
        source = self._source
        if source is not None:
            cursors = manifest.cursors.get(self.options.source_identity, {})
            mine = ack_cursors(
                SourceCheckpoint(dict(cursors)), self.options.source_identity,
                self._snapshot if self.options.vnode_mode else None, self.options.node_id,
            )
            if mine:
                await source.notify_epoch_committed(
                    manifest.epoch, SourceCheckpoint(mine, manifest.assignment_version if self.options.vnode_mode else 0)
                )
        if manifest.epoch % 10 == 0:
            await self._recover_sink()

    async def _on_ack_rejected(self, event: AckRejected) -> None:
        """The leader rejected our ack of the open epoch (e.g. a cursor below the manifest, or a
        partition this node does not own): the epoch waits for a replacement. Retire the generation
        (its cursor cannot be trusted), start a new one from the latest manifest, and ack the same
        epoch again from it. The rejected ack's staged files are never listed by a manifest, so
        sink recovery deletes them once the epoch commits."""
        if event.epoch <= self._latest_epoch or self._snapshot is None:
            return  # committed meanwhile (with a replacement), or not ours to answer
        logger.warning("epoch %d ack rejected by the leader (%s); restarting the source generation from "
                       "the latest manifest and acking again", event.epoch, event.reason)
        self.metrics.acks_rejected.labels(self.metrics.node).inc()
        if self._unsent_ack is not None and self._unsent_ack[0].epoch == event.epoch:
            self._unsent_ack = None
        self._last_acked_epoch = self._latest_epoch  # the rejected ack will never commit
        await self._retire_source()
        self._pending_barrier = EpochOpened(event.epoch, self._snapshot.version)

    def _export_coordinator_metrics(self) -> None:
        m = self.coordinator.metrics
        self.metrics.fenced_writes_rejected.labels(self.metrics.node).set(m.fenced_writes_rejected)
        self.metrics.stale_acks_rejected.labels(self.metrics.node).set(m.stale_acks_rejected)

    async def _on_round_started(self, event: RoundStarted) -> None:
        self._round_started_at = time.monotonic()
        if self.options.vnode_mode and self._registry_ready:
            try:
                self._registry.begin_round(event.drain_id, event.target_owners)
            except CoordinatorError as exc:
                logger.warning("round %s not mirrored: %s", event.drain_id, exc)
        if self._source is None:
            await self._report_ready(event.drain_id)  # nothing to drain here
            return
        deadline = time.monotonic() + max(0.0, event.deadline_unix_ms / 1000.0 - time.time())
        self._drain = _Drain(event.drain_id, deadline, time.monotonic())
        await self._begin_drain(self._source)

    async def _begin_drain(self, source: SourceConnector) -> bool:
        """``begin_drain`` for the current round; False while the source refuses it (retried next
        turn). A fatal refusal retires the generation (its successor drains from the manifest)."""
        drain = self._drain
        assert drain is not None
        if drain.begun:
            return True
        try:
            source.begin_drain(SourceDrainRequest(drain.drain_id), drain.deadline)
        except DrainError as exc:
            logger.info("drain %s refused for now: %s", drain.drain_id, exc)
            return False
        except FatalError as exc:
            await self._generation_failed(exc)
            return False
        self._drain = _Drain(drain.drain_id, drain.deadline, drain.started, begun=True)
        return True

    async def _check_drain(self, source: SourceConnector) -> None:
        drain = self._drain
        assert drain is not None
        if self._drain_reported == drain.drain_id:
            return
        if not drain.begun:
            if time.monotonic() > drain.deadline:
                logger.warning("drain %s could not begin before its deadline", drain.drain_id)
                self._drain = None
                return
            if not await self._begin_drain(source):
                return
        # FatalError (the deadline passed first) propagates: the generation is retired by _step
        try:
            ready = source.poll_drain_ready(drain.drain_id)
        except DrainError as exc:
            logger.warning("drain %s is not this source's round any more: %s", drain.drain_id, exc)
            self._drain = None
            return
        if ready:
            self.metrics.drain_seconds.labels(self.metrics.node).observe(time.monotonic() - drain.started)
            await self._report_ready(drain.drain_id)

    async def _report_ready(self, drain_id: AssignmentDrainId) -> None:
        try:
            await self._blocking(self.coordinator.report_drain_ready, drain_id)
            self._drain_reported = drain_id
        except RoundError as exc:
            logger.info("drain %s no longer running: %s", drain_id, exc)
        except CoordinatorError as exc:  # transient: _check_drain reports again next turn
            logger.warning("drain %s ready report failed: %s", drain_id, exc)

    async def _on_round_decided(self, event: RoundDecided) -> None:
        self.metrics.rounds.labels(self.metrics.node, event.outcome.value).inc()
        drain = self._drain
        self._drain = None
        if self.options.vnode_mode and self._registry_ready:
            self._registry.clear_round(event.drain_id)
        if event.outcome is RoundOutcome.ABORT:
            self._round_started_at = None
        source = self._source
        if drain is None or drain.drain_id != event.drain_id or not drain.begun or source is None:
            return
        outcome = SourceDrainOutcome.COMMIT if event.outcome is RoundOutcome.COMMIT else SourceDrainOutcome.ABORT
        resolution = SourceDrainResolution(event.drain_id, outcome)
        handoff: dict[str, int] | None = None
        if outcome is SourceDrainOutcome.COMMIT:
            manifest = await self._manifest_or_latest(event.manifest_epoch)
            if manifest is not None:
                handoff = dict(manifest.cursors.get(self.options.source_identity, {}))
        deadline = time.monotonic() + 30.0
        try:
            try:
                await source.finish_drain(resolution, deadline, handoff)  # type: ignore[call-arg]
            except DrainError as exc:
                if handoff is None:
                    raise
                # the manifest lacks a gained partition: commit without handoff cursors; the
                # source then waits for them and _offer_cursors supplies the latest manifest's
                logger.warning("handoff cursors refused (%s); committing without them", exc)
                await source.finish_drain(resolution, deadline)
        except FatalError as exc:
            await self._generation_failed(exc)
            return
        except ConnectorError as exc:
            logger.warning("finish_drain(%s) failed: %s; restarting from the manifest", outcome.value, exc)
            await self._generation_failed(exc)
            return
        self._drained_commit = outcome is SourceDrainOutcome.COMMIT

    # -- topology ---------------------------------------------------------------------------------

    async def _watch_topology(self, period_s: float) -> None:
        """Every ``period_s``: read the topics' metadata (off the loop) for the main loop to apply
        between two turns. A failed read is retried at the next period."""
        while True:
            await asyncio.sleep(period_s)
            try:
                observed = await self._in_metadata(self._read_topology)
            except Exception as exc:  # noqa: BLE001 - transient: Kafka may be restarting
                logger.warning("reading topic metadata failed (%s); retrying in %.0fs", exc, period_s)
                continue
            self._observed = observed
            if self._wake is not None:
                self._wake.set()

    async def _first_topology(self) -> Topology:
        """The topology at start; a transient failure (a controller failover, a broker restarting)
        is retried for up to ``start_timeout_s``."""
        deadline = time.monotonic() + self.options.start_timeout_s
        while True:
            try:
                return await self._in_metadata(self._read_topology)
            except Exception as exc:  # noqa: BLE001 - any failure to read metadata is retried, bounded
                if time.monotonic() >= deadline:
                    raise RuntimeFailure(f"cannot read the topics' metadata: {exc}", cause=exc) from exc
                logger.warning("reading topic metadata failed (%s); retrying", exc)
                await asyncio.sleep(1.0)

    async def _apply_observed_topology(self) -> None:
        observed, self._observed = self._observed, None
        if observed is not None:
            await self._adopt_topology(observed)

    async def _adopt_topology(self, observed: Topology, *, first: bool = False) -> None:
        """Take a topology observation: pin new topics' ids durably, hand new partitions to the
        source. Raises :class:`RuntimeFailure` for a re-created topic (new topic id), fewer
        partitions, or a topic absent from several observations in a row (deleted)."""
        try:
            view, change = self._view.observe(observed)
            for topic in sorted(change.missing):
                logger.warning("topic %r is absent from the topic metadata (%d of %d reads)", topic,
                               view.missing_streak[topic], MISSING_OBSERVATIONS)
            if change.new_topics:
                durable = await self._blocking(self.coordinator.pin_topic_ids, dict(change.new_topics))
                view = view.with_pinned(change.new_topics, durable)
        except TopologyError as exc:
            raise RuntimeFailure(str(exc), cause=exc) from exc
        self._view = view
        if change.grew or first:
            self._partitions = sorted(view.topology.partitions())
        if change.grew and not first:
            await self._on_topology_grew(change)

    async def _on_topology_grew(self, change: TopologyChange) -> None:
        new = sorted(change.new_partitions)
        self.metrics.partitions_discovered.labels(self.metrics.node).inc(len(new))
        if self.options.vnode_mode:
            await self._publish_vnode_load()
        snapshot = self._snapshot
        mine: list[TP] = new
        if snapshot is not None:
            self._owned = self._owned_at(snapshot)
            if self._owned is not None:
                mine = [tp for tp in new if tp in self._owned]
                self.metrics.owned_partitions.labels(self.metrics.node).set(len(self._owned))
        logger.info(
            "topology grew: %d new partition(s) (%d here): %s%s", len(new), len(mine),
            ", ".join(format_key(*tp) for tp in new[:20]), " ..." if len(new) > 20 else "",
        )
        source = self._source
        if source is not None:
            try:
                source.add_partitions(change.new_partitions)
            except ConnectorError as exc:
                raise RuntimeFailure(f"the source cannot follow new partitions: {exc}", cause=exc) from exc

    async def _pin_start(self) -> None:
        """Make sure the pipeline has its initial manifest: the start position resolved once, before
        any node reads, and written create-once (another node may win the race: its pin is used)."""
        if await self._blocking(self.coordinator.latest_manifest) is not None or self._resolve_start is None:
            return
        cursors = await self._blocking(self._resolve_start)
        proposed = Manifest(epoch=0, assignment_version=0, cursors={self.options.source_identity: cursors})
        pinned = await self._blocking(self.coordinator.pin_start, proposed)
        logger.info(
            "start position pinned for %d partition(s)%s", len(pinned.cursors.get(self.options.source_identity, {})),
            "" if pinned == proposed else " (by another node)",
        )

    # -- recovery and shutdown --------------------------------------------------------------------

    async def _publish_vnode_load(self) -> None:
        from coordinator.routing import vnode_loads

        snapshot = await self._blocking(self.coordinator.assignment)
        load = vnode_loads(self.options.source_identity, self._partitions, snapshot.vnode_count)
        await self._blocking(self.coordinator.set_vnode_load, load)

    async def _recover_sink(self) -> None:
        latest = await self._blocking(self.coordinator.latest_manifest)
        members = await self._blocking(self.coordinator.members)
        live = {m.boot_id for m in members} | {self.coordinator.boot_id}

        def outputs(epoch: int) -> tuple[str, ...] | None:
            try:
                return self.coordinator.manifest(epoch).outputs
            except CoordinatorError:
                return None

        await self._in_sink(
            functools.partial(
                recover, self.sink.fs, self.sink.root,
                latest_epoch=latest.epoch if latest else 0, manifest_outputs=outputs, live_boots=live,
            )
        )

    async def _export_lag(self, period_s: float = 5.0) -> None:
        """Every ``period_s``: lag (high watermark - read cursor) and durable lag (- manifest cursor)."""
        assert self._watermarks is not None
        while True:
            await asyncio.sleep(period_s)
            source = self._source
            if source is None:
                continue
            owned = sorted(self._owned) if self._owned is not None else sorted(self._partitions)
            try:
                highs = await self._in_metadata(self._watermarks, owned)
            except Exception as exc:  # noqa: BLE001 - metrics must never stop the node
                logger.debug("watermark lookup failed: %s", exc)
                continue
            cursor = source.checkpoint().offsets
            lag, durable = {}, {}
            for tp, high in highs.items():
                key = format_key(*tp)
                lag[key] = max(0, high - cursor.get(key, 0))
                durable[key] = max(0, high - self._durable.get(key, 0))
            self.metrics.set_partition_gauge(self.metrics.lag, lag)
            self.metrics.set_partition_gauge(self.metrics.durable_lag, durable)

    async def _shutdown(self) -> None:
        """Stop the lag task, the source, the coordinator and the executors; each step runs even
        when an earlier one raised."""
        tasks = [t for t in (self._lag_task, self._topology_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            try:
                close_watermarks = getattr(self._watermarks, "close", None)
                if close_watermarks is not None:
                    await self._in_metadata(close_watermarks)
            finally:
                await self._retire_source()
        finally:
            try:
                await self._blocking(self.coordinator.stop)
            finally:
                self._control.shutdown(wait=False)
                self._metadata_exec.shutdown(wait=False)
                # wait for the last sink write off the loop (the sink executor runs one at a time)
                await asyncio.get_running_loop().run_in_executor(None, self._sink_exec.shutdown, True)
