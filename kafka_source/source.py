"""`KafkaSource`: the Kafka implementation of the source-connector protocol (single node).

Threads: one reader thread owns ``Consumer.consume`` (see :mod:`kafka_source.reader`); the asyncio
side only touches the byte-bounded FIFO, and runs other blocking client calls (metadata, commits,
startup lookups) in the loop's default executor. The cursor (``next offset`` per partition) lives
on the asyncio side and moves only when rows are emitted by :meth:`KafkaSource.poll_batch`.

Advisory commits (:meth:`KafkaSource.notify_epoch_committed`) never raise: the epoch is already
durable and the group offsets only feed lag dashboards, so a failure is logged and counted in
``metrics.commit_failures`` (the next epoch's commit carries the newer offsets anyway).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import io
import itertools
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from coordinator.registry import VnodeRegistry
from kafka_source.arrow_batch import BatchBuilder, metadata_fields
from kafka_source.checkpoint import CONNECTOR_NAME, SourceCheckpoint
from kafka_source.config import Format, KafkaSourceConfig
from kafka_source.connector import (
    ConnectorConfig,
    ConnectorTaskTracker,
    DeliveryGuarantee,
    DrainRoundId,
    InitialPosition,
    ResumePosition,
    SourceBatch,
    SourceConnector,
    SourceContract,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceOrdering,
    SourceStart,
    SourceTopology,
)
from kafka_source.errors import (
    ConfigurationError,
    ConnectorError,
    DecodeError,
    DrainError,
    ErrorRateExceededError,
    FatalError,
    TransientError,
)
from kafka_source.ownership import DrainPhase, FinishPlan, Ownership, Reconcile, route_partitions
from kafka_source.reader import (
    AssignmentApplied,
    ByteBoundedFifo,
    ControlItem,
    DrainBoundary,
    FifoItem,
    PartitionsAssigned,
    Reader,
    ReaderFailed,
    RecordChunk,
)
from kafka_source.startup import StartupPlan, query_broker_facts, resolve_initial, resolve_resume

logger = logging.getLogger(__name__)

__all__ = ["KafkaSource", "SourceMetrics", "ERROR_RATE_MIN_RECORDS"]

TP = tuple[str, int]
#: Best-effort error rate is enforced once at least this many records were seen.
ERROR_RATE_MIN_RECORDS = 100
_CONSUME_TIMEOUT_S = 0.02


@dataclass
class SourceMetrics:
    """Monotonic counters of one source generation (read them; do not write)."""

    records: int = 0
    bytes: int = 0
    batches: int = 0
    decode_errors: int = 0
    records_skipped: int = 0
    offset_resets: int = 0
    partitions_discovered: int = 0
    commits: int = 0
    commit_failures: int = 0
    records_not_owned: int = 0
    drains_committed: int = 0
    drains_aborted: int = 0
    reconciliations: int = 0


@dataclass(frozen=True)
class _VnodeBinding:
    source_identity: str
    registry: VnodeRegistry
    self_id: int


@dataclass
class _Op:
    """One ownership change submitted to the reader thread and not yet applied here."""

    op_id: int
    plan: Reconcile | FinishPlan
    future: concurrent.futures.Future[AssignmentApplied]
    cancelled: threading.Event = field(default_factory=threading.Event)


def _config_from(config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str]) -> KafkaSourceConfig:
    if isinstance(config, KafkaSourceConfig):
        return config
    if isinstance(config, ConnectorConfig):
        if config.connector_type != CONNECTOR_NAME:
            raise ConfigurationError(
                f"connector type {config.connector_type!r} is not {CONNECTOR_NAME!r}"
            )
        return KafkaSourceConfig.from_properties(config.properties)
    return KafkaSourceConfig.from_properties(config)


class KafkaSource(SourceConnector):
    """A replayable, per-partition-ordered Kafka source with exact cursors.

    Construct it bare or with a config (needed only for :meth:`schema` before :meth:`start`);
    :meth:`start`'s request config is authoritative. One instance is one generation: after
    :meth:`close` or a fatal error it cannot be restarted.
    """

    def __init__(
        self,
        config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str] | None = None,
        *,
        request_timeout_s: float = 10.0,
        close_timeout_s: float = 10.0,
    ) -> None:
        self._config: KafkaSourceConfig | None = None if config is None else _config_from(config)
        self._json_schema: pa.Schema | None = None
        self._builder: BatchBuilder | None = None
        self._delivery = DeliveryGuarantee.AT_LEAST_ONCE
        self._request_timeout_s = request_timeout_s
        self._close_timeout_s = close_timeout_s
        self._cursor: dict[TP, int] = {}
        self._committed: dict[TP, int] = {}
        self._committed_loaded = False
        self._consumer: Consumer | None = None
        self._fifo: ByteBoundedFifo | None = None
        self._reader: Reader | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._pending_commit: concurrent.futures.Future[None] | None = None
        self._tracker = ConnectorTaskTracker()
        self._failure: ConnectorError | None = None
        self._started = False
        self._closed = False
        self._records_seen = 0
        self.metrics = SourceMetrics()
        # vnode ownership (None: embedded / single node, reads every partition)
        self._binding: _VnodeBinding | None = None
        self._own: Ownership | None = None
        self._op: _Op | None = None
        self._op_ids = itertools.count(1)
        self._offer: tuple[int, dict[TP, int]] | None = None
        #: partitions announced by add_partitions that wait to join the routing table
        self._unrouted: frozenset[TP] = frozenset()
        self._pause: tuple[DrainRoundId, concurrent.futures.Future[DrainBoundary]] | None = None
        #: Partitions whose records still in the FIFO must not be emitted (released, or acquired
        #: again at an explicit cursor); cleared when their AssignmentApplied marker is consumed.
        self._dropping: frozenset[TP] = frozenset()

    # -- configuration and schema ---------------------------------------------------------------

    @property
    def config(self) -> KafkaSourceConfig:
        if self._config is None:
            raise ConfigurationError("the source has no configuration yet (call start())")
        return self._config

    def schema(self) -> pa.Schema:
        if self._builder is not None:
            return self._builder.schema
        config = self.config
        if config.format is Format.JSON:
            payload = self._json_schema or config.json_schema
            if payload is None:
                raise ConfigurationError("format=json needs json.schema or discover_schema()")
            return pa.schema(list(payload) + metadata_fields(config.include_metadata))
        return BatchBuilder(config).schema

    async def discover_schema(self, properties: Mapping[str, str]) -> None:
        """Resolve the schema; for ``format=json`` without ``json.schema`` infer it from up to
        1000 records sampled from the start of the topics (bounded by the request timeout).

        Post: :meth:`schema` returns the resolved schema. Raises :class:`ConfigurationError`
        if the topics hold no decodable JSON sample.
        """
        config = _config_from(properties)
        self._config = config
        if config.format is not Format.JSON or config.json_schema is not None:
            return
        loop = asyncio.get_running_loop()
        sample = await loop.run_in_executor(
            None, functools.partial(_sample_values, config, 1000, self._request_timeout_s)
        )
        lines = [v.replace(b"\n", b" ").replace(b"\r", b" ") for v in sample if v]
        if not lines:
            raise ConfigurationError(f"cannot infer a JSON schema: topics {config.topics} are empty")
        try:
            table = pa_json.read_json(io.BytesIO(b"\n".join(lines)))
        except pa.ArrowInvalid as exc:
            raise ConfigurationError(f"cannot infer a JSON schema: {exc}", cause=exc) from exc
        self._json_schema = pa.schema([pa.field(f.name, f.type, nullable=True) for f in table.schema])

    def contract(self, config: ConnectorConfig) -> SourceContract:
        _config_from(config)
        return SourceContract(
            replayable=True,
            topology=SourceTopology.SPLITTABLE,
            append_only=True,
            ordering=SourceOrdering.PER_SPLIT,
        )

    def recovery_identity_options(self, config: ConnectorConfig) -> dict[str, str] | None:
        """Topics, format, schema and startup options; no endpoints, group or credentials (the
        checkpoint binds every partition by topic name)."""
        return _config_from(config).identity_options()

    def terminal_task_tracker(self) -> ConnectorTaskTracker | None:
        return self._tracker

    def data_ready_notify(self) -> asyncio.Event | None:
        return self._event

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, request: SourceStart) -> None:
        """Resolve the position to exact offsets, assign them, then start the reader thread.

        Post: :meth:`checkpoint` pins every partition's start offset. Raises
        :class:`ConfigurationError`, :class:`~kafka_source.errors.CheckpointError` (e.g.
        :class:`~kafka_source.errors.OffsetOutOfRangeError` under guaranteed delivery) or
        :class:`TransientError`; on error no consumer is left open.
        """
        if self._started or self._closed:
            raise FatalError("a KafkaSource generation can be started only once")
        config_in, position, delivery = request.into_parts()
        config = _config_from(config_in)
        if config.format is Format.JSON and config.json_schema is None:
            if self._json_schema is None or self._config is None or self._config.topics != config.topics:
                raise ConfigurationError("format=json needs json.schema or discover_schema() first")
        self._config = config
        self._delivery = delivery
        self._builder = BatchBuilder(config, self._json_schema)
        self._started = True
        self._loop = asyncio.get_running_loop()
        try:
            consumer = Consumer(
                {**config.consumer_config(guaranteed=delivery.is_guaranteed), "on_commit": self._on_commit},
                logger=logger,
            )
        except KafkaException as exc:  # e.g. an unknown or invalid kafka.* pass-through property
            self._closed = True
            raise ConfigurationError(f"the Kafka client rejects the configuration: {exc}", cause=exc) from exc
        try:
            plan = await self._loop.run_in_executor(
                None, functools.partial(self._plan_startup, consumer, config, position, delivery)
            )
            offsets = dict(plan.offsets)
            binding = self._binding
            if binding is not None:
                routes = route_partitions(
                    binding.source_identity, list(offsets), binding.registry.vnode_count
                )
                own = Ownership.at(binding.self_id, routes, binding.registry.snapshot())
                offsets = {tp: o for tp, o in offsets.items() if tp in own.owned}
                self._own = own.started(frozenset(offsets))
            assignment = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            await self._loop.run_in_executor(None, consumer.assign, assignment)
        except BaseException:
            self._closed = True
            await self._loop.run_in_executor(None, consumer.close)
            raise
        self._consumer = consumer
        self._cursor = offsets
        self.metrics.offset_resets += plan.resets
        loop = self._loop
        event = self._event

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed: nobody is waiting any more
                pass

        self._fifo = ByteBoundedFifo(config.max_fetched_bytes, on_ready=wake)
        self._reader = Reader(
            consumer,
            self._fifo,
            selector=config.selector,
            assigned=offsets,
            chunk_records=config.consume_chunk_records,
            # vnode mode: new partitions arrive through add_partitions (the runtime watches the topology)
            discovery_interval_s=(
                0.0 if binding is not None else config.partition_discovery_interval_ms / 1000.0
            ),
            metadata_timeout_s=self._request_timeout_s,
            on_discovered=self._count_discovered,
            # consume() waits this long unless a chunk fills: it bounds record latency at low rates
            # and how long a submitted command (pause, assignment change, commit) waits for its turn.
            consume_timeout_s=_CONSUME_TIMEOUT_S,
            callbacks_pending=self._commit_pending,
        )
        self._tracker.track(self._reader.thread)
        self._reader.start()
        logger.info(
            "kafka source started on %s at %d partition(s) (%s%s)",
            config.selector, len(offsets), type(position).__name__,
            f", assignment version {self._own.version}" if self._own is not None else "",
        )

    def _commit_pending(self) -> bool:
        """Whether an advisory commit waits for its result (read by the reader thread)."""
        pending = self._pending_commit
        return pending is not None and not pending.done()

    def _count_discovered(self, count: int) -> None:
        self.metrics.partitions_discovered += count

    def _plan_startup(
        self,
        consumer: Consumer,
        config: KafkaSourceConfig,
        position: Any,
        delivery: DeliveryGuarantee,
    ) -> StartupPlan:
        facts = query_broker_facts(consumer, config, self._request_timeout_s)
        if isinstance(position, ResumePosition):
            plan = resolve_resume(config, position.checkpoint, facts, delivery)
        elif isinstance(position, InitialPosition):
            plan = resolve_initial(config, facts, delivery)
        else:
            raise ConfigurationError(f"unknown source position {position!r}")
        try:
            committed = consumer.committed(
                [TopicPartition(t, p) for t, p in plan.offsets], timeout=self._request_timeout_s
            )
            self._committed = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}
            self._committed_loaded = True
        except KafkaException as exc:
            logger.warning("cannot read committed group offsets at start (%s); will retry", exc)
        return plan

    async def close(self) -> None:
        """Stop the reader (which closes the consumer); returns within ``close_timeout_s`` plus
        any in-flight advisory commit's bound. Idempotent."""
        if self._closed:
            return
        self._closed = True
        reader = self._reader
        if reader is None:
            return
        try:
            await asyncio.wait_for(self._commit_lock.acquire(), self._close_timeout_s)
            self._commit_lock.release()
        except asyncio.TimeoutError:
            logger.warning("closing while an advisory commit is still running")
        reader.stop()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, reader.thread.join, self._close_timeout_s)
        if reader.is_alive():
            logger.warning("kafka source reader did not stop within %.1fs", self._close_timeout_s)

    # -- data path ------------------------------------------------------------------------------

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        """Up to ``max_records`` rows bound to the cursor after the last of them, or ``None``.

        Never awaits, so it cannot be cancelled half way. Raises :class:`DecodeError` under
        guaranteed delivery when a record does not decode (nothing moves; the same records fail
        again), :class:`ErrorRateExceededError` under best-effort when skipped records exceed
        ``max.error.rate``, and the reader's error (e.g. an out-of-range position) once every
        record fetched before it was emitted.

        Vnode mode: only records of partitions owned under the pinned version are emitted (records
        still queued for a released partition are dropped and counted in
        ``metrics.records_not_owned``); a drain boundary reached with nothing pending before it
        fixes the cut; a revoked partition's cursor moving after the cut fails the generation.
        """
        if max_records < 1:
            raise ConfigurationError(f"max_records must be >= 1, got {max_records}")
        self._check_alive()
        if not self._started or self._closed or self._fifo is None or self._builder is None:
            raise FatalError("poll_batch on a source that is not running")
        fifo = self._fifo
        items = fifo.peek(max_records)
        messages: list[Message] = []
        spans: list[tuple[RecordChunk, int]] = []  # (chunk, new taken)
        done: list[FifoItem] = []
        assigned: dict[TP, int] = {}
        failure: ConnectorError | None = None
        for item in items:
            if isinstance(item, RecordChunk):
                want = max_records - len(messages)
                if want <= 0:
                    break
                end = min(len(item.messages), item.taken + want)
                if item.taken == 0 and end == len(item.messages):
                    messages.extend(item.messages)
                else:
                    messages.extend(item.messages[item.taken:end])
                spans.append((item, end))
                if end == len(item.messages):
                    done.append(item)
                else:
                    break
            elif isinstance(item, PartitionsAssigned):
                assigned.update(item.offsets)
                done.append(item)
            elif isinstance(item, ReaderFailed):
                if not messages:
                    failure = item.error
                    done.append(item)
                break
            elif isinstance(item, (DrainBoundary, AssignmentApplied)) and not (messages or spans or assigned):
                # Nothing before it is pending: its effect applies to the cursor as it is now.
                self._consume_control(item)
                self._check_alive()
                done.append(item)
            else:
                break  # a control item with records before it: the next poll handles it
        if failure is not None:
            self._release(done)
            self._failure = failure
            raise failure
        cursor = self._cursor
        if assigned:
            cursor = {**cursor, **{tp: o for tp, o in assigned.items() if tp not in cursor}}
        dropping = self._dropping
        if dropping and messages:
            kept = [m for m in messages if (m.topic(), m.partition()) not in dropping]
            self.metrics.records_not_owned += len(messages) - len(kept)
            messages = kept
        batch = None
        if messages:
            built = self._builder.build(messages)
            if built.bad:
                first = messages[built.bad[0].index]
                if self._delivery.is_guaranteed:
                    self.metrics.decode_errors += 1
                    raise DecodeError(
                        f"{first.topic()}:{first.partition()}@{first.offset()} does not decode as "
                        f"{self.config.format.value}: {built.bad[0].reason} (cursor not advanced)",
                        topic=first.topic(), partition=first.partition(), offset=first.offset(),
                    )
            if not self._delivery.is_guaranteed:
                self._check_error_rate(len(messages), len(built.bad))
            multi_topic = self.config.topic_pattern is not None or len(self.config.topics) > 1
            cursor = _advance(cursor, messages, built.partitions, built.offsets, multi_topic)
            batch = built.batch
        for chunk, end in spans:
            if end == len(chunk.messages):
                for tp, position in chunk.positions.items():
                    if tp in dropping or tp not in cursor:
                        continue  # released, or acquired again: its old position is void
                    if position > cursor[tp]:
                        if cursor is self._cursor:
                            cursor = dict(cursor)
                        cursor[tp] = position
        own = self._own
        if own is not None and cursor is not self._cursor:
            extra = set(cursor) - set(self._cursor) - set(assigned) if len(cursor) > len(self._cursor) else ()
            if extra:
                self._fail(f"records of partitions this source does not read were fetched: {sorted(extra)}")
            elif own.drain is not None and own.drain.phase is DrainPhase.READY:
                self._set_own(own.check_cut(cursor))
            self._check_alive()
        # Commit: nothing below raises.
        for chunk, end in spans:
            chunk.taken = end
        self._release(done)
        self._cursor = cursor
        fifo.clear_event_if_empty(self._event)
        if batch is None or batch.num_rows == 0:
            return None
        self.metrics.records += batch.num_rows
        self.metrics.bytes += batch.nbytes
        self.metrics.batches += 1
        return SourceBatch(batch, self.checkpoint())

    def _release(self, items: list[FifoItem]) -> None:
        assert self._fifo is not None
        for item in items:
            self._fifo.release_head(item)

    def _check_error_rate(self, seen: int, bad: int) -> None:
        """Best-effort: count ``seen`` decoded records (every batch, so the rate's denominator is
        every record seen), ``bad`` of them skipped; raise once the rate exceeds the limit."""
        self._records_seen += seen
        self.metrics.records_skipped += bad
        self.metrics.decode_errors += bad
        if bad:
            logger.warning("skipped %d undecodable record(s) (best-effort)", bad)
        total_bad = self.metrics.records_skipped
        if (
            self._records_seen >= ERROR_RATE_MIN_RECORDS
            and total_bad > self.config.max_error_rate * self._records_seen
        ):
            self._failure = ErrorRateExceededError(
                f"{total_bad} of {self._records_seen} records did not decode, above "
                f"max.error.rate={self.config.max_error_rate}"
            )
            raise self._failure

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self) -> SourceCheckpoint:
        """Next offset per partition read after exactly the rows emitted so far.

        ``assignment_version`` is the pinned version in vnode mode (0 otherwise). During a drain
        the revoked partitions are included (at their cut once it is fixed): they are owned under
        the pinned predecessor version until the round commits.
        """
        version = self._own.version if self._own is not None else 0
        return SourceCheckpoint.from_partitions(self._cursor, version)

    def try_checkpoint(self) -> SourceCheckpoint | None:
        """:meth:`checkpoint`, or ``None`` while not reconciled (:meth:`checkpoint_ready` is False).

        Raises :class:`FatalError` once the generation failed.
        """
        if not self.checkpoint_ready():
            return None
        return self.checkpoint()

    # -- vnode ownership and drains ---------------------------------------------------------------

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        """From now on read exactly the partitions whose vnode ``self_id`` owns in ``registry``.

        Typically called before :meth:`start`, which then assigns only the partitions owned in
        the snapshot published at that moment (the pinned version); a Resume checkpoint's other
        partitions are ignored (this node reports only what it owns) and owned partitions it
        lacks start at their low watermark. Called after :meth:`start`, the partitions not owned
        stop being emitted at once and are released by :meth:`drive_control_plane`. The partition
        set is listed at :meth:`start`; later partitions arrive through :meth:`add_partitions`
        (the source does not look for them itself in vnode mode). Calling it again
        with the same arguments is a no-op; different arguments raise :class:`ConfigurationError`.
        """
        if not isinstance(source_identity, str) or not source_identity:
            raise ConfigurationError("source_identity must be a non-empty string")
        if not isinstance(registry, VnodeRegistry):
            raise ConfigurationError(f"registry must be a coordinator VnodeRegistry, got {type(registry).__name__}")
        if not isinstance(self_id, int) or isinstance(self_id, bool) or self_id < 1:
            raise ConfigurationError(f"self_id {self_id!r} must be a node id >= 1")
        binding = _VnodeBinding(source_identity, registry, self_id)
        if self._binding is not None:
            if self._binding.source_identity == source_identity and self._binding.registry is registry \
                    and self._binding.self_id == self_id:
                return
            raise ConfigurationError("set_vnode_assignment was already called with other arguments")
        if self._closed or self._failure is not None:
            raise FatalError("set_vnode_assignment on a retired source generation")
        self._binding = binding
        if not self._started:
            return
        live = frozenset(self._cursor)
        routes = route_partitions(source_identity, list(live), registry.vnode_count)
        own = Ownership.at(self_id, routes, registry.snapshot()).started(live)
        self._own = own
        self._dropping = self._dropping | (live - own.owned)
        self._cursor = {tp: o for tp, o in self._cursor.items() if tp in own.owned}

    def checkpoint_ready(self) -> bool:
        """True iff the live consumer assignment equals the partitions owned at the published
        version and this source is pinned to it (always True without vnode mode).

        False before :meth:`start`, while an ownership change runs on the reader thread, while
        owned partitions wait for explicit cursors, and between a committed drain and the
        publication of its target. Raises :class:`FatalError` once the generation failed or the
        published map contradicts the pinned one.
        """
        self._check_alive()
        own = self._own
        if self._binding is None:
            return True
        if own is None or not self._started or self._closed:
            return False
        if self._op is not None:
            return False
        try:
            return own.is_ready(self._binding_registry().snapshot())
        except FatalError as exc:
            self._fail(str(exc))
            raise

    def drive_control_plane(self) -> None:
        """Advance reconciliation with the published assignment without blocking; never raises
        (a failure surfaces from the next :meth:`checkpoint_ready` / :meth:`poll_batch`).

        Observes finished reader-thread work, consumes control markers at the FIFO head, and when
        the published version moved (and no drain is active) submits one assignment change: it
        releases the live partitions not owned any more (or that changed owner in between: a
        self -> other -> self move) and acquires gained partitions at the cursors offered by
        :meth:`acquire_partitions` for exactly that version. A change that touches no partition
        only moves the pinned version.
        """
        own = self._own
        if own is None or not self._started or self._closed or self._failure is not None:
            return
        try:
            self._set_own(own.expire(time.monotonic()))
            self._observe_pause()
            self._consume_head_controls()
            op = self._op
            if op is not None:
                if not op.future.done() or not isinstance(op.plan, Reconcile):
                    return
                self._apply_op(op.future.result())
            if self._failure is not None:
                return
            assert self._own is not None
            self._route_new_partitions()
            plan = self._own.plan_reconcile(self._binding_registry().snapshot(), self._offer)
            if plan is None:
                return
            self.metrics.reconciliations += 1
            if not plan.needs_consumer:
                self._set_own(self._own.reconciled(plan, {}))
                logger.info("kafka source pinned to assignment version %d (no partition moved)", plan.version)
                return
            logger.info(
                "kafka source reconciling to version %d: releasing %d, acquiring %d partition(s)",
                plan.version, len(plan.release), len(plan.acquire),
            )
            self._submit_op(plan, release=plan.release, acquire=plan.acquire)
        except ConnectorError as exc:
            self._fail(f"reconciliation failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reader-thread failure; surfaced as terminal
            self._fail(f"reconciliation failed: {exc!r}")

    def add_partitions(self, partitions: Iterable[TP]) -> None:
        """The topology grew: ``partitions`` exist now (partitions added to a topic, or the
        partitions of a new topic that the pattern matches). Never blocks; idempotent; partitions
        this generation already knows, or of topics it does not select, are ignored; a no-op
        before :meth:`start` (which lists the partitions itself) and after :meth:`close`.

        Without a vnode assignment the new partitions are assigned at their first offset (low
        watermark) by the reader thread and appear in :meth:`checkpoint` from then on. In vnode
        mode they join the routing table; the ones whose vnode this node owns become owned and
        pending, :meth:`checkpoint_ready` turns False, and :meth:`acquisition_needed` names them
        until :meth:`acquire_partitions` offers their cursors for the published version (a
        partition the offer lacks starts at its first offset). They join the table only while no
        round is active and the source is pinned to the published version; until then they wait
        and :meth:`drive_control_plane` adds them.
        """
        if not self._started or self._closed or self._failure is not None:
            return
        selector = self.config.selector
        wanted = frozenset(tp for tp in partitions if selector.matches(tp[0]) and tp not in self._cursor)
        if not wanted:
            return
        if self._binding is None:
            assert self._reader is not None
            self._reader.assign_new(wanted)  # its PartitionsAssigned marker extends the cursor
            return
        own = self._require_vnode()
        wanted = wanted - frozenset(own.routes)
        if wanted:
            self._unrouted = self._unrouted | wanted
            self._offer = None  # offered before the growth: the runtime offers the latest cursors again

    def _route_new_partitions(self) -> None:
        """Add :attr:`_unrouted` partitions to the routing table when the ownership allows it."""
        own, pending = self._own, self._unrouted
        if not pending or own is None or self._op is not None:
            return
        binding = self._binding
        assert binding is not None
        snapshot = binding.registry.snapshot()
        if not own.can_route_more(snapshot):
            return
        grown = own.with_partitions(route_partitions(binding.source_identity, pending, snapshot.vnode_count), snapshot)
        self._unrouted = frozenset()
        gained = grown.owned - own.owned
        self._set_own(grown)
        self.metrics.partitions_discovered += len(pending)
        logger.info(
            "kafka source routed %d new partition(s) at version %d; %d owned here: %s",
            len(pending), snapshot.version, len(gained), sorted(gained),
        )

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        """Offer explicit start cursors for partitions acquired *without* a drain at ``version``.

        Use it when the published ``version`` gives this node partitions it does not read (a dead
        node's vnodes, a first assignment after start, a partition that left and came back, or a
        committed drain whose handoff cursors were not passed to :meth:`finish_drain`).
        ``cursors`` maps ``"topic:partition"`` to the next offset to read, normally the cursors of
        the last durable manifest (all partitions may be passed; only the ones to acquire are
        used; one it lacks starts at its low watermark). :meth:`drive_control_plane` applies it
        when reconciling to exactly ``version``; an offer for another version is ignored, so offer
        again after a newer publication. :meth:`acquisition_needed` says what is waited for.
        Raises :class:`DrainError` for a version older than the pinned one.
        """
        own = self._require_vnode()
        if not isinstance(version, int) or version < own.version:
            raise DrainError(f"cursors for version {version!r} are stale (pinned to {own.version})")
        offsets = cursors.partitions() if isinstance(cursors, SourceCheckpoint) else SourceCheckpoint(dict(cursors)).partitions()
        self._offer = (version, offsets)

    def acquisition_needed(self) -> tuple[int, frozenset[TP]] | None:
        """``(published version, partitions)`` when reconciling needs explicit cursors
        (:meth:`acquire_partitions`) for these partitions, else ``None``."""
        own = self._own
        if own is None or self._failure is not None or self._op is not None:
            return None
        snapshot = self._binding_registry().snapshot()
        try:
            plan = own.plan_reconcile(snapshot, (snapshot.version, {}))
        except ConnectorError:
            return None
        if plan is None or not plan.acquire:
            return None
        return plan.version, frozenset(plan.acquire)

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        """Stop the partitions this node loses in ``request.round``; never blocks.

        Pre (else :class:`DrainError`, nothing changes): the round is the registry's pending round,
        its predecessor is the published version, this source is reconciled with it and no
        ownership change is running; no other round is active (the same round again is a no-op);
        the round is newer than the last resolved one. Post: the revoked partitions are paused by
        the reader thread, which then puts a boundary marker into the data FIFO, so every record
        fetched before the pause precedes it; records of revoked partitions fetched afterwards
        are dropped. Partitions that stay keep flowing. ``deadline`` (absolute
        :func:`time.monotonic`): if the boundary is not consumed by then the generation fails.
        """
        own = self._require_vnode()
        self._check_alive()
        if not self._started or self._closed or self._reader is None:
            raise FatalError("begin_drain on a source that is not running")
        drain = own.drain
        if drain is not None and drain.round == request.round and drain.active:
            return
        if self._op is not None:
            raise DrainError(f"drain {request.round}: an ownership change is still running")
        snapshot, pending = self._binding_registry().state()
        own, started = own.begin_drain(request.round, deadline, time.monotonic(), snapshot, pending)  # type: ignore[arg-type]
        if not started:
            return
        self._set_own(own)
        assert own.drain is not None
        revoked = own.drain.revoked
        self._pause = (request.round, self._reader.pause_for_drain(request.round, revoked)) if revoked else None
        logger.info(
            "drain %s begun: %d partition(s) revoked, %d kept, %d gained under the target",
            request.round, len(revoked), len(own.owned - revoked), len(own.drain.target_owned - own.owned),
        )

    def poll_drain_ready(self, round: DrainRoundId) -> bool:
        """Whether every record fetched before ``round``'s boundary has been emitted.

        Once True the cut (next offset of every revoked partition) is fixed and in
        :meth:`checkpoint`. Raises :class:`DrainError` for a round that is not the current one and
        :class:`FatalError` once the generation failed (e.g. the deadline passed first).
        """
        own = self._require_vnode()
        if own.failure is None:
            self._set_own(own.expire(time.monotonic()))
            self._observe_pause()
            self._consume_head_controls()
        self._check_alive()
        assert self._own is not None
        return self._own.ready(round)  # type: ignore[arg-type]

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None,
    ) -> None:
        """Resolve the active round: Commit adopts the target ownership, Abort rewinds to the cut.

        Commit (only once :meth:`poll_drain_ready` was True): the revoked partitions are released
        and the pinned version becomes the target; partitions gained under the target are
        assigned at ``handoff_cursors`` (``"topic:partition" -> next offset``, or a
        :class:`SourceCheckpoint`: the cursors of the durable manifest that holds the cut; every
        partition may be passed, only the gained ones are used; never the broker's group offsets).
        Without ``handoff_cursors`` the gained partitions stay pending until
        :meth:`acquire_partitions`. Handoff cursors that lack a gained partition raise
        :class:`DrainError` (nothing changes); ones that contradict this node's cut fail the
        generation. :meth:`checkpoint_ready` turns True once the registry publishes the target.

        Abort: each paused partition is rewound to its cut (or, before the boundary was consumed,
        to the pause position, which becomes the cut) and resumed; ownership does not change.

        Repeating a resolution already applied is a no-op; the other outcome, an unknown or a
        stale round raise :class:`DrainError`. A Commit before the drain is ready, a resolution
        whose ``deadline`` (absolute :func:`time.monotonic`) passes before the consumer change is
        done, or any failure of it, fail the generation (:class:`FatalError`): a timed-out
        resolution can never act later.
        """
        own = self._require_vnode()
        self._check_alive()
        if not self._started or self._closed or self._reader is None:
            raise FatalError("finish_drain on a source that is not running")
        self._set_own(own.expire(time.monotonic()))
        self._check_alive()
        if resolution.outcome is SourceDrainOutcome.ABORT:
            await self._await_pause(resolution.round, deadline)
        handoff: dict[TP, int] | None = None
        if handoff_cursors is not None:
            handoff = (
                handoff_cursors.partitions()
                if isinstance(handoff_cursors, SourceCheckpoint)
                else SourceCheckpoint(dict(handoff_cursors)).partitions()
            )
        assert self._own is not None
        try:
            plan = self._own.plan_finish(resolution, time.monotonic(), deadline, handoff)  # type: ignore[arg-type]
        except FatalError as exc:
            self._fail(str(exc))
            raise
        if plan is None:
            return
        op = self._submit_op(plan, release=plan.release, acquire=plan.acquire, resume=plan.resume)
        try:
            marker = await asyncio.wait_for(asyncio.wrap_future(op.future), max(0.0, deadline - time.monotonic()))
        except BaseException as exc:
            op.cancelled.set()
            self._fail(f"{resolution.outcome.value} of drain {resolution.round} did not complete: {exc!r}")
            raise FatalError(
                f"{resolution.outcome.value} of drain {resolution.round} did not complete in time; "
                "this source generation is retired", cause=exc,
            ) from exc
        self._apply_op(marker)
        if plan.outcome is SourceDrainOutcome.COMMIT:
            self.metrics.drains_committed += 1
        else:
            self.metrics.drains_aborted += 1
        logger.info("drain %s resolved: %s", resolution.round, resolution.outcome.value)

    # -- ownership internals ------------------------------------------------------------------------

    def _require_vnode(self) -> Ownership:
        if self._binding is None:
            raise ConfigurationError("this source has no vnode assignment (set_vnode_assignment)")
        if self._own is None:
            raise FatalError("the vnode-assigned source is not started")
        return self._own

    def _binding_registry(self) -> VnodeRegistry:
        assert self._binding is not None
        return self._binding.registry

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _fail(self, reason: str) -> None:
        if self._own is not None:
            self._own = self._own.fail(reason)
        if self._failure is None:
            self._failure = FatalError(f"source generation failed: {reason}")

    def _set_own(self, own: Ownership) -> None:
        self._own = own
        if own.failure is not None and self._failure is None:
            self._failure = FatalError(f"source generation failed: {own.failure}")

    def _submit_op(
        self,
        plan: Reconcile | FinishPlan,
        *,
        release: frozenset[TP],
        acquire: Mapping[TP, int | None],
        resume: Mapping[TP, int] | None = None,
    ) -> _Op:
        assert self._reader is not None and self._op is None
        op_id = next(self._op_ids)
        cancelled = threading.Event()
        future = self._reader.change_assignment(
            op_id, release=release, acquire=acquire, resume=resume, cancelled=cancelled
        )
        op = _Op(op_id, plan, future, cancelled)
        self._op = op
        return op

    def _apply_op(self, marker: AssignmentApplied) -> None:
        """Adopt what the reader thread did for the pending op (idempotent per op)."""
        op = self._op
        if op is None or op.op_id != marker.op_id:
            return
        self._op = None
        assert self._own is not None
        cursor = {tp: o for tp, o in self._cursor.items() if tp not in marker.released}
        cursor.update(marker.acquired)
        self._cursor = cursor
        if marker.acquired:  # another node may have committed past what we knew: read the group again
            for tp in marker.acquired:
                self._committed.pop(tp, None)
            self._committed_loaded = False
        self._dropping = self._dropping | marker.released | frozenset(marker.acquired)
        if isinstance(op.plan, Reconcile):
            self._set_own(self._own.reconciled(op.plan, marker.acquired))
            if marker.acquired and self._offer is not None and self._offer[0] == op.plan.version:
                self._offer = None
        else:
            self._set_own(self._own.finished(op.plan, marker.acquired))

    def _observe_pause(self) -> None:
        pause = self._pause
        if pause is None or not pause[1].done():
            return
        self._pause = None
        assert self._own is not None
        round, future = pause
        try:
            marker = future.result()
        except Exception as exc:  # noqa: BLE001 - the pause failed on the reader thread
            self._fail(f"pausing for drain {round} failed: {exc!r}")
            return
        drain = self._own.drain
        if drain is not None and drain.round == round and drain.active:
            self._set_own(self._own.boundary_paused(round, marker.positions))  # type: ignore[arg-type]

    async def _await_pause(self, round: DrainRoundId, deadline: float) -> None:
        pause = self._pause
        if pause is not None and pause[0] == round and not pause[1].done():
            try:
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(pause[1])), max(0.0, deadline - time.monotonic())
                )
            except asyncio.TimeoutError:
                pass  # plan_finish reports the missing pause position
            except Exception:  # noqa: BLE001 - observed (and failed) below
                pass
        self._observe_pause()
        self._check_alive()

    def _consume_head_controls(self) -> None:
        """Consume ownership markers at the FIFO head (nothing is pending before them)."""
        fifo = self._fifo
        if fifo is None:
            return
        while True:
            head = fifo.head()
            if not isinstance(head, (DrainBoundary, AssignmentApplied)):
                return
            self._consume_control(head)
            fifo.release_head(head)
            if self._failure is not None:
                return

    def _consume_control(self, item: ControlItem) -> None:
        """Apply a marker whose predecessors in the FIFO have all been emitted."""
        assert self._own is not None
        if isinstance(item, DrainBoundary):
            drain = self._own.drain
            if drain is not None and drain.round == item.round and drain.active:
                own = self._own.boundary_paused(item.round, item.positions)  # type: ignore[arg-type]
                self._set_own(own.boundary_consumed(item.round, self._cursor, time.monotonic()))  # type: ignore[arg-type]
                if self._own.phase is DrainPhase.READY:
                    logger.info("drain %s ready: cut %s", item.round, dict(self._own.drain.cut))  # type: ignore[union-attr]
        elif isinstance(item, AssignmentApplied):
            self._apply_op(item)
            self._dropping = self._dropping - item.released - frozenset(item.acquired)

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """Commit ``checkpoint``'s offsets to ``group.id`` (advisory, for lag dashboards).

        Only partitions this source reads whose owner has not changed since the checkpoint's
        assignment version, and only offsets above the highest committed so far (read from the
        group at the first commit and again after each acquisition, then tracked), so a group
        offset never moves backwards.
        Empty checkpoint: no-op. Idempotent. The commit is issued asynchronously by the reader
        thread (librdkafka delivers the result to the consuming thread) and awaited up to the
        request timeout (the reader serves the result even while the FIFO is at its cap, so it
        never waits for the caller to poll). Failures are logged and counted in
        ``metrics.commit_failures``; they never raise.
        """
        if checkpoint.is_empty or self._reader is None or self._closed:
            return
        async with self._commit_lock:
            if self._closed:
                return
            offsets = checkpoint.partitions()
            try:
                if not self._committed_loaded:
                    await asyncio.wait_for(
                        asyncio.wrap_future(self._reader.submit(self._load_committed)),
                        self._request_timeout_s,
                    )
                moved = self._moved_since(checkpoint.assignment_version)
                todo = [
                    TopicPartition(t, p, o)
                    for (t, p), o in sorted(offsets.items())
                    if (t, p) in self._cursor and (t, p) not in moved and o > self._committed.get((t, p), -1)
                ]
                if not todo:
                    return
                done: concurrent.futures.Future[None] = concurrent.futures.Future()
                self._pending_commit = done
                deadline = time.monotonic() + self._request_timeout_s
                # Issuing the commit can fail at once (reader stopped, client error): surface that
                # error now rather than waiting out the timeout for a callback that never comes.
                await asyncio.wait_for(
                    asyncio.wrap_future(
                        self._reader.submit(lambda consumer: consumer.commit(offsets=todo, asynchronous=True))
                    ),
                    self._request_timeout_s,
                )
                await asyncio.wait_for(asyncio.wrap_future(done), max(0.0, deadline - time.monotonic()))
                self.metrics.commits += 1
            except (KafkaException, ConnectorError, RuntimeError, asyncio.TimeoutError) as exc:
                self.metrics.commit_failures += 1
                logger.warning("advisory offset commit of epoch %d failed: %r", epoch, exc)
            finally:
                self._pending_commit = None

    def _moved_since(self, version: int) -> frozenset[TP]:
        """Partitions whose vnode changed owner after assignment `version` (vnode mode only).

        A checkpoint taken under `version` speaks for such a partition only as it was then; another
        node may since have read and committed further, so its offsets must not be committed now.
        """
        own = self._own
        if self._binding is None or own is None:
            return frozenset()
        changed_at = self._binding.registry.snapshot().changed_at
        return frozenset(tp for tp, vnode in own.routes.items() if changed_at[vnode] > version)

    def _load_committed(self, consumer: Consumer) -> None:
        committed = consumer.committed(
            [TopicPartition(t, p) for t, p in self._cursor], timeout=self._request_timeout_s
        )
        for tp in committed:
            if tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self._committed[key] = max(self._committed.get(key, -1), tp.offset)
        self._committed_loaded = True

    def _on_commit(self, error: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka commit callback (runs on the reader thread inside ``consume``)."""
        failed = [tp for tp in partitions or [] if tp.error is not None]
        for tp in partitions or []:
            if tp.error is None and error is None and tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self._committed[key] = max(self._committed.get(key, -1), tp.offset)
        pending = self._pending_commit
        if pending is None or pending.done():
            return
        # The awaiting side may cancel ``pending`` (its timeout) between the check above and the
        # set below; an exception escaping this callback would fail the reader thread.
        try:
            if error is not None or failed:
                detail = error if error is not None else [(tp.topic, tp.partition, str(tp.error)) for tp in failed]
                pending.set_exception(TransientError(f"offset commit failed: {detail}", cause=error))
            else:
                pending.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # the waiter gave up (timeout or cancellation)


def _advance(
    cursor: dict[TP, int],
    messages: list[Message],
    partitions: list[int],
    offsets: list[int],
    multi_topic: bool,
) -> dict[TP, int]:
    """``cursor`` moved past ``messages`` (client order; ``partitions``/``offsets`` are theirs):
    last offset per partition + 1."""
    if multi_topic:
        last = dict(zip(zip(map(Message.topic, messages), partitions), offsets))
    else:
        topic = messages[0].topic()
        last = {(topic, p): o for p, o in dict(zip(partitions, offsets)).items()}
    result = dict(cursor)
    for tp, offset in last.items():
        if offset + 1 > result.get(tp, -1):
            result[tp] = offset + 1
    return result


def _sample_values(config: KafkaSourceConfig, limit: int, timeout_s: float) -> list[bytes]:
    """Up to ``limit`` values from the start of the topics, within ``timeout_s`` (blocking)."""
    consumer = Consumer(config.consumer_config(guaranteed=False), logger=logger)
    try:
        facts = query_broker_facts(consumer, config, timeout_s)
        assignment = [TopicPartition(t, p, low) for (t, p), (low, high) in facts.watermarks.items() if high > low]
        if not assignment:
            return []
        consumer.assign(assignment)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < limit and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=limit - len(values), timeout=0.2):
                if message.error() is None and message.value() is not None:
                    values.append(message.value())
            if values and len(values) >= min(limit, sum(h - l for l, h in facts.watermarks.values())):
                break
        return values
    finally:
        consumer.close()
