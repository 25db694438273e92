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
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from kafka_source.arrow_batch import BatchBuilder, metadata_fields
from kafka_source.checkpoint import SourceCheckpoint
from kafka_source.config import Format, KafkaSourceConfig
from kafka_source.connector import (
    ConnectorConfig,
    ConnectorTaskTracker,
    DeliveryGuarantee,
    InitialPosition,
    ResumePosition,
    SourceBatch,
    SourceConnector,
    SourceContract,
    SourceOrdering,
    SourceStart,
    SourceTopology,
)
from kafka_source.errors import (
    ConfigurationError,
    ConnectorError,
    DecodeError,
    ErrorRateExceededError,
    FatalError,
    TransientError,
)
from kafka_source.reader import (
    ByteBoundedFifo,
    ControlItem,
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
_KAFKA_CONNECTOR = "kafka"


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


def _config_from(config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str]) -> KafkaSourceConfig:
    if isinstance(config, KafkaSourceConfig):
        return config
    if isinstance(config, ConnectorConfig):
        if config.connector_type != _KAFKA_CONNECTOR:
            raise ConfigurationError(
                f"connector type {config.connector_type!r} is not {_KAFKA_CONNECTOR!r}"
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
        consumer = Consumer(
            {**config.consumer_config(guaranteed=delivery.is_guaranteed), "on_commit": self._on_commit},
            logger=logger,
        )
        try:
            plan = await self._loop.run_in_executor(
                None, functools.partial(self._plan_startup, consumer, config, position, delivery)
            )
            assignment = [TopicPartition(t, p, o) for (t, p), o in plan.offsets.items()]
            await self._loop.run_in_executor(None, consumer.assign, assignment)
        except BaseException:
            self._closed = True
            await self._loop.run_in_executor(None, consumer.close)
            raise
        self._consumer = consumer
        self._cursor = dict(plan.offsets)
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
            topics=config.topics,
            assigned=plan.offsets,
            chunk_records=config.consume_chunk_records,
            discovery_interval_s=config.partition_discovery_interval_ms / 1000.0,
            metadata_timeout_s=self._request_timeout_s,
            on_discovered=self._count_discovered,
        )
        self._tracker.track(self._reader.thread)
        self._reader.start()
        logger.info(
            "kafka source started on %s at %d partition(s) (%s)",
            ",".join(config.topics), len(plan.offsets), type(position).__name__,
        )

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
        """
        if max_records < 1:
            raise ConfigurationError(f"max_records must be >= 1, got {max_records}")
        if self._failure is not None:
            raise self._failure
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
            else:
                break  # an unknown control item stops the batch; its owner handles it
        if failure is not None:
            self._release(done)
            self._failure = failure
            raise failure
        cursor = self._cursor
        if assigned:
            cursor = {**cursor, **{tp: o for tp, o in assigned.items() if tp not in cursor}}
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
                self._check_error_rate(len(messages), len(built.bad))
            cursor = _advance(cursor, messages, built.partitions, built.offsets, len(self.config.topics) > 1)
            batch = built.batch
        for chunk, end in spans:
            if end == len(chunk.messages):
                for tp, position in chunk.positions.items():
                    if position > cursor.get(tp, -1):
                        if cursor is self._cursor:
                            cursor = dict(cursor)
                        cursor[tp] = position
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
        return SourceBatch(batch, SourceCheckpoint.from_partitions(cursor))

    def _release(self, items: list[FifoItem]) -> None:
        assert self._fifo is not None
        for item in items:
            self._fifo.release_head(item)

    def _check_error_rate(self, seen: int, bad: int) -> None:
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
        """Next offset per assigned partition after exactly the rows emitted so far (version 0)."""
        return SourceCheckpoint.from_partitions(self._cursor)

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        """Commit ``checkpoint``'s offsets to ``group.id`` (advisory, for lag dashboards).

        Only partitions this source reads, and only offsets above the highest committed so far
        (read from the group once, then tracked), so a group offset never moves backwards.
        Empty checkpoint: no-op. Idempotent. The commit is issued asynchronously by the reader
        thread (librdkafka delivers the result to the consuming thread) and awaited up to the
        request timeout. Failures are logged and counted in ``metrics.commit_failures``; they
        never raise.
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
                todo = [
                    TopicPartition(t, p, o)
                    for (t, p), o in sorted(offsets.items())
                    if (t, p) in self._cursor and o > self._committed.get((t, p), -1)
                ]
                if not todo:
                    return
                done: concurrent.futures.Future[None] = concurrent.futures.Future()
                self._pending_commit = done
                self._reader.submit(lambda consumer: consumer.commit(offsets=todo, asynchronous=True))
                await asyncio.wait_for(asyncio.wrap_future(done), self._request_timeout_s)
                self.metrics.commits += 1
            except (KafkaException, ConnectorError, RuntimeError, asyncio.TimeoutError) as exc:
                self.metrics.commit_failures += 1
                logger.warning("advisory offset commit of epoch %d failed: %r", epoch, exc)
            finally:
                self._pending_commit = None

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
        if error is not None or failed:
            detail = error if error is not None else [(tp.topic, tp.partition, str(tp.error)) for tp in failed]
            pending.set_exception(TransientError(f"offset commit failed: {detail}", cause=error))
        else:
            pending.set_result(None)


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
