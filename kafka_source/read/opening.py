"""Opening one source generation: the consumer, its exact start offsets, and the reader thread.

:func:`create_consumer` and :func:`start_offsets` are the blocking client steps of
:meth:`laminar_kafka.kafka_source.source.KafkaSource.start` (run off the event loop by
:func:`open_consumer`);
:func:`build_reader` wires the reader thread to the FIFO that wakes the event loop, and
:class:`SourceCallbacks` is what the reader thread asks of the source and reports to it.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.connector.protocol import DeliveryGuarantee, InitialPosition, ResumePosition, SourcePosition
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.commits import AdvisoryCommits
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.records import RecordFields, Records
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from laminar_kafka.kafka_source.read.startup import (
    StartupPlan,
    query_broker_facts,
    resolve_initial,
    resolve_out_of_range,
    resolve_resume,
    source_consumer,
)

logger = logging.getLogger(__name__)

__all__ = ["CONSUME_TIMEOUT_S", "SourceCallbacks", "build_reader", "create_consumer", "open_consumer", "start_offsets"]

#: ``consume()`` waits this long unless a chunk fills: it bounds record latency at low rates and how
#: long a submitted command (pause, assignment change, commit) waits for its turn.
CONSUME_TIMEOUT_S = 0.02


def create_consumer(config: KafkaSourceConfig, delivery: DeliveryGuarantee, commits: AdvisoryCommits) -> Consumer:
    """The source's consumer for ``config`` (:func:`~laminar_kafka.kafka_source.read.startup.source_consumer`)
    whose commit results go to ``commits``; no I/O yet.

    Raises :class:`ConfigurationError` when the client rejects the configuration (e.g. an unknown
    ``kafka.*`` pass-through property).
    """
    try:
        return source_consumer(config, guaranteed=delivery.is_guaranteed, on_commit=commits.on_commit)
    except KafkaException as exc:
        raise ConfigurationError(f"the Kafka client rejects the configuration: {exc}", cause=exc) from exc


def start_offsets(
    consumer: Consumer,
    config: KafkaSourceConfig,
    position: SourcePosition,
    delivery: DeliveryGuarantee,
    commits: AdvisoryCommits,
    timeout_s: float,
) -> StartupPlan:
    """Resolve ``position`` to exact offsets from the broker's facts (blocking), and read the
    group's committed offsets for later advisory commits (retried later if that fails)."""
    facts = query_broker_facts(consumer, config, timeout_s)
    if isinstance(position, ResumePosition):
        plan = resolve_resume(config, position.checkpoint, facts, delivery)
    elif isinstance(position, InitialPosition):
        plan = resolve_initial(config, facts, delivery)
    else:
        raise ConfigurationError(f"unknown source position {position!r}")
    try:
        commits.load(consumer, plan.offsets)
    except KafkaException as exc:
        logger.warning("cannot read committed group offsets at start (%s); will retry", exc)
    return plan


@dataclass(frozen=True)
class SourceCallbacks:
    """The :class:`ReaderCallbacks` of a source generation: its metrics, advisory commits, batch
    builder and configuration."""

    config: KafkaSourceConfig
    delivery: DeliveryGuarantee
    metrics: SourceMetrics
    commits: AdvisoryCommits
    builder: BatchBuilder

    def callbacks_pending(self) -> bool:
        """Whether an advisory commit's result is awaited."""
        return self.commits.awaiting_result()

    def prefetch(self, records: Records) -> None:
        """The builder's blocking work for ``records`` (schemas fetched from a registry), if any."""
        if self.builder.prefetches:
            self.builder.prefetch(records)

    def read_on_at(self, tp: TopicPartitionId, offset: int, low: int, high: int) -> int:
        """:func:`~laminar_kafka.kafka_source.read.startup.resolve_out_of_range` under this delivery."""
        return resolve_out_of_range(tp, offset, low, high, delivery=self.delivery, config=self.config)

    def offsets_lost(self, count: int) -> None:
        """Counted in the metrics."""
        self.metrics.count_lost(count)

    def partitions_discovered(self, count: int) -> None:
        """Counted in the metrics."""
        self.metrics.count_discovered(count)

    def new_consumer(self) -> Consumer:
        """:func:`create_consumer` of this configuration."""
        return create_consumer(self.config, self.delivery, self.commits)

    def new_catch_up_consumer(self) -> Consumer | None:
        """The reader's catch-up consumer (:mod:`~laminar_kafka.kafka_source.read.catch_up`; no I/O
        yet), or None without ``batch-wait-ms`` (the batching consumer then fetches at once itself)."""
        if not self.config.batch_wait_ms:
            return None
        return source_consumer(self.config, guaranteed=self.delivery.is_guaranteed, catch_up=True)

    def consumer_replaced(self) -> None:
        """Counted in the metrics."""
        self.metrics.count_client_replaced()


Blocking = Callable[[str, Callable[[], Any]], Awaitable[Any]]


async def open_consumer(
    config: KafkaSourceConfig,
    position: SourcePosition,
    delivery: DeliveryGuarantee,
    commits: AdvisoryCommits,
    timeout_s: float,
    *,
    blocking: Blocking,
    pin: Callable[[dict[TopicPartitionId, int]], dict[TopicPartitionId, int]] | None,
) -> tuple[Consumer, StartupPlan, dict[TopicPartitionId, int]]:
    """Create the consumer, resolve ``position`` to exact offsets (:func:`start_offsets`; ``pin``
    keeps those a vnode-assigned source reads) and assign it them; each blocking step runs through
    ``blocking(name, fn)`` (on a thread the source tracks). Returns the consumer, the plan and the
    offsets assigned.

    On any failure, cancellation included, no consumer is left open. Raises
    :class:`ConfigurationError`, :class:`~laminar_kafka.connector.errors.CheckpointError` or
    :class:`~laminar_kafka.connector.errors.TransientError`.
    """
    consumer = create_consumer(config, delivery, commits)
    try:
        plan = await blocking("kafka-source-start", functools.partial(
            start_offsets, consumer, config, position, delivery, commits, timeout_s
        ))
        offsets = dict(plan.offsets)
        if pin is not None:
            offsets = pin(offsets)
        assignment = [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()]
        await blocking("kafka-source-assign", functools.partial(consumer.assign, assignment))
    except BaseException:  # any exit, cancellation included, closes the consumer; re-raised
        await blocking("kafka-source-close", consumer.close)
        raise
    return consumer, plan, offsets


def build_reader(
    consumer: Consumer,
    config: KafkaSourceConfig,
    offsets: dict[TopicPartitionId, int],
    *,
    event: asyncio.Event,
    vnode_mode: bool,
    metadata_timeout_s: float,
    fields: RecordFields,
    callbacks: SourceCallbacks,
) -> Reader:
    """A reader (not started) that owns ``consumer`` at ``offsets``, reports to ``callbacks``
    (:class:`SourceCallbacks` for a source), and sets ``event`` (on the running loop) whenever it
    puts an item into its FIFO.

    In vnode mode it does not look for new partitions itself: they arrive through
    ``add_partitions`` (the runtime watches the topology).
    """
    loop = asyncio.get_running_loop()

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    settings = ReaderSettings(
        selector=config.selector,
        chunk_records=config.consume_chunk_records,
        discovery_interval_s=0.0 if vnode_mode else config.partition_discovery_interval_ms / 1000.0,
        metadata_timeout_s=metadata_timeout_s,
        consume_timeout_s=CONSUME_TIMEOUT_S,
        fields=fields,
    )
    fifo = ByteBoundedFifo(config.fifo_bytes, on_ready=wake)
    return Reader(consumer, fifo, offsets, settings, callbacks, catch_up=callbacks.new_catch_up_consumer())
