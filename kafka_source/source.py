"""`KafkaSource`: the Kafka implementation of the source-connector protocol (the facade).

This module holds the lifecycle (start, close) and the data path (poll, checkpoint); the other
concerns live beside it: ``read.opening`` (the consumer, its start offsets and the reader thread),
``read.batches`` (from FIFO items to a batch), ``vnode.driver`` (vnode ownership and drains),
``commits`` (advisory group-offset commits), ``decode.schema`` (schema and JSON inference).

Threads: one reader thread owns ``Consumer.consume`` (``read.reader``); the asyncio side only
touches the byte-bounded FIFO (``read.fifo``). Other blocking client calls (startup lookups, schema
sampling) run on threads of :meth:`KafkaSource.terminal_task_tracker`, which covers every thread
the source starts. The cursor (``next offset`` per partition) lives on the asyncio side and moves
only when rows are emitted by :meth:`KafkaSource.poll_batch`.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import pyarrow as pa

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, FatalError
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy,
    ConnectorConfig,
    ConnectorTaskTracker,
    DeliveryGuarantee,
    ResumePosition,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourceContract,
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
from laminar_kafka.kafka_source.checkpoint import KAFKA_CURSORS, CursorCheckpoints
from laminar_kafka.kafka_source.commits import AdvisoryCommits
from laminar_kafka.kafka_source.config.source_config import BadRecordPolicy, KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.records import RecordFields
from laminar_kafka.kafka_source.decode.schema import configured_schema, discover_json_schema
from laminar_kafka.kafka_source.errors import ErrorRateExceededError
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.parsed import ParsedConfigs
from laminar_kafka.kafka_source.read.batches import ERROR_RATE_MIN_RECORDS, DecodeFailures, build_batch, take_items
from laminar_kafka.kafka_source.read.fifo import AssignmentApplied, ByteBoundedFifo, ControlItem
from laminar_kafka.kafka_source.read.opening import SourceCallbacks, build_reader, open_consumer
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.vnode.driver import VnodeBinding, VnodeDriver

logger = logging.getLogger(__name__)

__all__ = ["KafkaSource", "SourceMetrics", "ERROR_RATE_MIN_RECORDS"]

_T = TypeVar("_T")


class KafkaSource(SourceConnector):
    """A replayable, per-partition-ordered Kafka source with exact cursors.

    Construct it bare or with a config (needed only for :meth:`schema` before :meth:`start`);
    :meth:`start`'s request config is authoritative. One instance is one generation: after
    :meth:`close` or a fatal error it cannot be restarted.

    Kafka client configuration: a typed :class:`KafkaSourceConfig` given here (what a node does)
    brings its :attr:`~KafkaSourceConfig.kafka` as a value, and properties parsed later (the request
    of :meth:`start`, :meth:`discover_schema`, :meth:`contract`...) that set no ``bootstrap.servers``
    use it (they may not set ``kafka.*`` then). Properties that set ``bootstrap.servers`` carry their
    own (a library user's ``SourceStart(ConnectorConfig("kafka", {...}))``). Properties are parsed
    once: the ones parsed last (e.g. the constructor's, then :meth:`contract`'s and :meth:`start`'s)
    give the value parsed then.

    Policies: ``HOLD_INTAKE`` (no poll while :meth:`try_checkpoint` is ``None``) and
    ``RETIRE_CONNECTOR`` (a cancelled :meth:`finish_drain` may leave a consumer change running on
    the reader thread, so a cancelled generation is closed and replaced, never reused).
    """

    def __init__(
        self,
        config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str] | None = None,
        *,
        request_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
        metrics: SourceMetrics | None = None,
    ) -> None:
        """``metrics``: the counts this generation keeps (a node passes one with its export hooks)."""
        #: parses properties with the client configuration given here (see the class docstring)
        self._parsed = ParsedConfigs(config.kafka if isinstance(config, KafkaSourceConfig) else None)
        self._config: KafkaSourceConfig | None = None if config is None else self._typed(config)
        self._json_schema: pa.Schema | None = None
        self._builder: BatchBuilder | None = None
        self._delivery = DeliveryGuarantee.AT_LEAST_ONCE
        self._decode_failures: DecodeFailures | None = None
        self._request_timeout_s = request_timeout_s
        self._close_timeout_s = close_timeout_s
        self._cursor: dict[TopicPartitionId, int] = {}
        self._checkpoints = CursorCheckpoints()
        self._fifo: ByteBoundedFifo | None = None
        self._reader: Reader | None = None
        self._event = asyncio.Event()
        self._tracker = ConnectorTaskTracker()
        self._failure: ConnectorError | None = None
        self._started = False
        self._closed = False
        self.metrics = metrics if metrics is not None else SourceMetrics()
        self._commits = AdvisoryCommits(self.metrics, request_timeout_s)
        #: vnode ownership (None: embedded / single node, reads every partition)
        self._vnode: VnodeDriver | None = None

    # -- configuration, schema and policies -----------------------------------------------------

    def _typed(self, config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str]) -> KafkaSourceConfig:
        """``config`` as a typed configuration (:class:`ParsedConfigs`). Raises
        :class:`ConfigurationError` for an invalid one."""
        return self._parsed.typed(config)

    @property
    def config(self) -> KafkaSourceConfig:
        if self._config is None:
            raise ConfigurationError("the source has no configuration yet (call start())")
        return self._config

    def schema(self) -> pa.Schema:
        if self._builder is not None:
            return self._builder.schema
        return configured_schema(self.config, self._json_schema)

    async def discover_schema(self, properties: Mapping[str, str]) -> None:
        """Resolve the schema; ``format=json`` without ``json-schema``: inferred from records
        sampled from the topics' start (:func:`laminar_kafka.kafka_source.decode.schema.discover_json_schema`).
        Post: :meth:`schema` returns it. Raises :class:`ConfigurationError` without a sample."""
        config = self._typed(properties)
        self._config = config
        if config.format.reads_json and config.json_schema is None:
            discover = functools.partial(discover_json_schema, config, self._request_timeout_s)
            self._json_schema = await self._blocking("kafka-source-schema", discover)

    def contract(self, config: ConnectorConfig) -> SourceContract:
        typed = self._typed(config)
        return SourceContract(
            replayable=True,
            topology=SourceTopology.SPLITTABLE,
            append_only=not typed.upsert_keys,  # upsert mode: rows are changes of keys (their _op column)
            ordering=SourceOrdering.PER_SPLIT,
        )

    def recovery_identity_options(self, config: ConnectorConfig) -> dict[str, str] | None:
        """Topics, format, schema and startup options; no endpoints, group or credentials (the
        checkpoint binds every partition by topic name)."""
        return self._typed(config).identity_options()

    def cancellation_policy(self) -> ConnectorCancellationPolicy:
        """``RETIRE_CONNECTOR``: after a cancelled lifecycle coroutine this generation is closed."""
        return ConnectorCancellationPolicy.RETIRE_CONNECTOR

    def checkpoint_unavailable_policy(self) -> SourceCheckpointUnavailablePolicy:
        """``HOLD_INTAKE``: no :meth:`poll_batch` while :meth:`try_checkpoint` returns ``None``."""
        return SourceCheckpointUnavailablePolicy.HOLD_INTAKE

    def terminal_task_tracker(self) -> ConnectorTaskTracker:
        """Covers the reader thread and every thread running a blocking call of this source."""
        return self._tracker

    def data_ready_notify(self) -> asyncio.Event | None:
        return self._event

    async def _blocking(self, name: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` on a tracked thread, awaited (a cancelled wait leaves the thread tracked)."""
        return await asyncio.wrap_future(self._tracker.spawn(name, fn))

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, request: SourceStart) -> None:
        """Resolve the position to exact offsets, assign them, then start the reader thread.

        Post: :meth:`checkpoint` pins every partition's start offset. Raises
        :class:`ConfigurationError`, :class:`~laminar_kafka.connector.errors.CheckpointError` (e.g.
        :class:`~laminar_kafka.kafka_source.errors.OffsetOutOfRangeError` under guaranteed delivery) or
        :class:`TransientError`; on error no consumer is left open.
        """
        if self._started or self._closed:
            raise FatalError("a KafkaSource generation can be started only once")
        config_in, position, delivery = request.into_parts()
        if isinstance(position, ResumePosition):
            KAFKA_CURSORS.accept(position.checkpoint)  # another connector's checkpoint is never read
        config = self._typed(config_in)
        if config.format.reads_json and config.json_schema is None:
            if self._json_schema is None or self._config is None or self._config.topics != config.topics:
                raise ConfigurationError(f"format={config.format.value} needs json-schema or discover_schema() first")
        self._config = config
        self._delivery = delivery
        builder = self._builder = BatchBuilder(config, self._json_schema)
        decode_failures = self._decode_failures = DecodeFailures.of(config, delivery, self.metrics)
        self._started = True
        try:
            consumer, plan, offsets = await open_consumer(
                config, position, delivery, self._commits, self._request_timeout_s, blocking=self._blocking,
                pin=self._vnode.pin if self._vnode is not None else None,
            )
        except BaseException:  # any failure, cancellation included, retires the generation; re-raised
            self._closed = True
            raise
        self._cursor = offsets
        self.metrics.count_lost(plan.lost, resets=plan.resets)
        skips = decode_failures is not None and decode_failures.policy is BadRecordPolicy.SKIP
        reader = self._reader = build_reader(
            consumer, config, offsets, event=self._event, vnode_mode=self._vnode is not None,
            metadata_timeout_s=self._request_timeout_s, fields=RecordFields.of(config, keeps_rejected=skips),
            callbacks=SourceCallbacks(config, delivery, self.metrics, self._commits, builder),
        )
        self._fifo = reader.fifo
        if self._vnode is not None:
            self._vnode.attach(reader)
        self._tracker.track(reader.thread)
        reader.start()
        version = f", assignment version {self._vnode.version}" if self._vnode is not None else ""
        logger.info("kafka source started on %s at %d partition(s) (%s%s)", config.selector, len(offsets),
                    type(position).__name__, version)

    async def close(self) -> None:
        """Stop the reader (which closes the consumer) and wait for every thread of this source
        (:meth:`terminal_task_tracker`); returns within ``close_timeout_s`` plus any in-flight
        advisory commit's bound. Idempotent."""
        if self._closed:
            return
        self._closed = True
        reader = self._reader
        if reader is None:
            return
        await self._commits.quiesce(self._close_timeout_s)
        reader.stop()
        if not await self._tracker.wait(self._close_timeout_s):
            logger.warning("kafka source threads did not stop within %.1fs", self._close_timeout_s)

    def _failed_with(self) -> ConnectorError | None:
        """The error this generation failed with (its own or its vnode driver's), if any."""
        return self._failure if self._failure is not None or self._vnode is None else self._vnode.failure

    def _check_alive(self) -> None:
        if (failure := self._failed_with()) is not None:
            raise failure

    # -- data path ------------------------------------------------------------------------------

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        """Up to ``max_records`` rows bound to the cursor after the last of them, or ``None``.

        Never awaits, so it cannot be cancelled half way. A record that does not decode raises
        :class:`DecodeError` with ``on-bad-record=fail`` (nothing moves; the same records fail
        again); with ``skip`` it is consumed and returned in ``SourceBatch.rejected`` (the batch's
        ``records`` may then be empty), and :class:`ErrorRateExceededError` is raised once the
        skipped records exceed ``max-error-rate``. Raises the reader's error (e.g. an out-of-range
        position) once every record fetched before it was emitted.

        Vnode mode: only records of partitions owned under the pinned version are emitted (others
        are counted in ``metrics.records_not_owned``); ownership markers apply in FIFO order.
        """
        if max_records < 1:
            raise ConfigurationError(f"max_records must be >= 1, got {max_records}")
        self._check_alive()
        fifo, builder, decode_failures = self._fifo, self._builder, self._decode_failures
        if not self._started or self._closed or fifo is None or builder is None or decode_failures is None:
            raise FatalError("poll_batch on a source that is not running")
        take = take_items(fifo.peek(max_records), max_records, self._consume_control)
        if take.failure is not None:
            fifo.release_heads(take.done)
            self._failure = take.failure
            raise take.failure
        dropping = self._vnode.dropping if self._vnode is not None else frozenset()
        try:
            cursor, batch, rejected = build_batch(
                take, self._cursor, dropping, builder, decode_failures, self.metrics
            )
        except ErrorRateExceededError as exc:
            self._failure = exc
            raise
        if self._vnode is not None and self._vnode.own is not None and cursor is not self._cursor:
            self._vnode.check_cursor(self._cursor, cursor, take.assigned)
            self._check_alive()
        # Commit: nothing below raises.
        for chunk, end in take.spans:
            chunk.taken = end
        fifo.release_heads(take.done)
        self._cursor = cursor
        fifo.clear_event_if_empty(self._event)
        if batch is None or (batch.num_rows == 0 and rejected is None):
            return None
        self.metrics.records += batch.num_rows
        self.metrics.bytes += batch.nbytes
        self.metrics.batches += 1
        return SourceBatch(batch, self.checkpoint(), rejected)

    def _consume_control(self, item: ControlItem) -> None:
        """An ownership marker reached with nothing pending before it (vnode mode only)."""
        assert self._vnode is not None
        self._vnode.consume_control(item)
        self._check_alive()

    def _adopt_assignment(self, marker: AssignmentApplied) -> None:
        """Move the cursor by an assignment change the reader thread applied."""
        cursor = {tp: o for tp, o in self._cursor.items() if tp not in marker.released}
        cursor.update(marker.acquired)
        self._cursor = cursor
        if marker.acquired:  # another node may have committed past what we knew: read the group again
            self._commits.forget(marker.acquired)

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self) -> SourceCheckpoint:
        """Next offset per partition read after exactly the rows emitted so far.

        ``assignment_version`` is the pinned version in vnode mode (0 otherwise). During a drain
        the revoked partitions are included (at their cut once it is fixed): they are owned under
        the pinned predecessor version until the round commits.
        """
        version = self._vnode.version if self._vnode is not None else 0
        return self._checkpoints.of(self._cursor, version)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        """:meth:`checkpoint`, or ``None`` while not reconciled (:meth:`checkpoint_ready` is False).
        Raises :class:`FatalError` once the generation failed."""
        if not self.checkpoint_ready():
            return None
        return self.checkpoint()

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """Commit ``checkpoint``'s offsets to ``group.id`` (advisory, for lag dashboards): only
        partitions read here whose owner did not change since the checkpoint's version, never
        backwards (:mod:`laminar_kafka.kafka_source.commits`). Empty checkpoint: no-op. Idempotent. Failures
        are logged and counted in ``metrics.commit_failures``; they never raise.
        """
        if checkpoint.is_empty or self._reader is None or self._closed:
            return
        vnode = self._vnode
        await self._commits.commit(
            epoch, checkpoint, self._reader,
            readable=lambda: self._cursor,
            moved_since=vnode.moved_since if vnode is not None else lambda _version: frozenset(),
            closed=lambda: self._closed,
        )

    # -- vnode ownership and drains (laminar_kafka.kafka_source.vnode.driver) ------------------------------------------

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        """From now on read exactly the partitions whose vnode ``self_id`` owns in ``registry``
        (see :class:`laminar_kafka.kafka_source.vnode.driver.VnodeDriver`). Again with the same arguments: a no-op;
        with different ones: :class:`ConfigurationError`."""
        binding = VnodeBinding(source_identity, registry, self_id)  # validates (ConfigurationError)
        if self._vnode is not None:
            if self._vnode.binding.same_as(binding):
                return
            raise ConfigurationError("set_vnode_assignment was already called with other arguments")
        if self._closed or self._failed_with() is not None:
            raise FatalError("set_vnode_assignment on a retired source generation")
        vnode = VnodeDriver(binding, self.metrics, lambda: self._cursor, self._adopt_assignment)
        if self._started:
            self._cursor = vnode.adopt_running(self._cursor)
            if self._reader is not None:
                vnode.attach(self._reader)
        self._vnode = vnode

    def _require_vnode(self) -> VnodeDriver:
        if self._vnode is None:
            raise ConfigurationError("this source has no vnode assignment (set_vnode_assignment)")
        if self._vnode.own is None:
            raise FatalError("the vnode-assigned source is not started")
        return self._vnode

    def _running_vnode(self, what: str) -> VnodeDriver:
        vnode = self._require_vnode()
        self._check_alive()
        if not self._started or self._closed:
            raise FatalError(f"{what} on a source that is not running")
        return vnode

    def checkpoint_ready(self) -> bool:
        """True iff reconciled with the published assignment (always without vnode mode; see
        :meth:`VnodeDriver.is_ready`)."""
        self._check_alive()
        if self._vnode is None:
            return True
        if self._vnode.own is None or not self._started or self._closed:
            return False
        return self._vnode.is_ready()

    def drive_control_plane(self) -> None:
        """One non-blocking reconciliation step; never raises (see :meth:`VnodeDriver.drive`)."""
        if self._vnode is None or not self._started or self._closed or self._failure is not None:
            return
        self._vnode.drive()

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """The topology grew: ``partitions`` exist now (added to a topic, or of a new topic the
        pattern matches). Never blocks; idempotent; known partitions and unselected topics are
        ignored; a no-op before :meth:`start` (which lists the partitions) and after :meth:`close`.
        Without vnode mode they are assigned at their first offset by the reader thread and appear
        in :meth:`checkpoint` from then on; in vnode mode see
        :meth:`VnodeDriver.add_partitions`.
        """
        if not self._started or self._closed or self._failed_with() is not None:
            return
        selector = self.config.selector
        wanted = frozenset(tp for tp in partitions if selector.matches(tp[0]) and tp not in self._cursor)
        if not wanted:
            return
        if self._vnode is None:
            assert self._reader is not None
            self._reader.assign_new(wanted)  # its PartitionsAssigned marker extends the cursor
            return
        self._require_vnode().add_partitions(wanted)

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        """Offer explicit start cursors for ``version`` (see :meth:`VnodeDriver.acquire_partitions`)."""
        self._require_vnode().acquire_partitions(cursors, version)

    def acquisition_needed(self) -> tuple[int, frozenset[TopicPartitionId]] | None:
        """What reconciliation waits for (see :meth:`VnodeDriver.acquisition_needed`)."""
        if self._vnode is None or self._failure is not None:
            return None
        return self._vnode.acquisition_needed()

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        """Pause the partitions this node loses in ``request.round`` (see :meth:`VnodeDriver.begin_drain`)."""
        self._running_vnode("begin_drain").begin_drain(request, deadline)

    def poll_drain_ready(self, round: AssignmentDrainId) -> bool:
        """Whether ``round``'s cut is fixed (see :meth:`VnodeDriver.poll_drain_ready`)."""
        vnode = self._require_vnode()
        if self._failure is not None:
            raise self._failure
        return vnode.poll_drain_ready(round)

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        """Resolve the active round (see :meth:`VnodeDriver.finish_drain`)."""
        await self._running_vnode("finish_drain").finish_drain(resolution, deadline, handoff_cursors)
