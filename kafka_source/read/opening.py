"""Opening one source generation: the consumer, its exact start offsets, and the reader thread.

:func:`create_consumer` and :func:`start_offsets` are the blocking client steps of
:meth:`laminar_kafka.kafka_source.source.KafkaSource.start` (run them off the event loop);
:func:`build_reader` wires the reader thread to the FIFO that wakes the event loop.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException

from laminar_kafka.connector.errors import ConfigurationError
from laminar_kafka.connector.protocol import DeliveryGuarantee, InitialPosition, ResumePosition, SourcePosition
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.commits import AdvisoryCommits
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.records import RecordFields, Records
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.startup import (
    StartupPlan,
    query_broker_facts,
    resolve_initial,
    resolve_out_of_range,
    resolve_resume,
    source_consumer,
)

logger = logging.getLogger(__name__)

__all__ = ["CONSUME_TIMEOUT_S", "build_reader", "create_consumer", "start_offsets"]

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


def build_reader(
    consumer: Consumer,
    config: KafkaSourceConfig,
    offsets: dict[TopicPartitionId, int],
    *,
    event: asyncio.Event,
    delivery: DeliveryGuarantee,
    vnode_mode: bool,
    metadata_timeout_s: float,
    metrics: SourceMetrics,
    callbacks_pending: Callable[[], bool],
    fields: RecordFields,
    prefetch: Callable[[Records], None] | None = None,
    consumer_factory: Callable[[], Consumer] | None = None,
) -> Reader:
    """A reader (not started) that owns ``consumer`` at ``offsets`` and sets ``event`` (on the
    running loop) whenever it puts an item into its FIFO.

    In vnode mode it does not look for new partitions itself: they arrive through
    ``add_partitions`` (the runtime watches the topology). A read offset the broker no longer holds
    is resolved by :func:`~laminar_kafka.kafka_source.read.startup.resolve_out_of_range` (lost offsets counted in
    ``metrics``). A consumer that reaches no broker any more is replaced by one ``consumer_factory``
    makes (:mod:`~laminar_kafka.kafka_source.read.client_watch`; counted in ``metrics``).
    """
    loop = asyncio.get_running_loop()

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    return Reader(
        consumer,
        ByteBoundedFifo(config.fifo_bytes, on_ready=wake),
        selector=config.selector,
        assigned=offsets,
        chunk_records=config.consume_chunk_records,
        discovery_interval_s=0.0 if vnode_mode else config.partition_discovery_interval_ms / 1000.0,
        metadata_timeout_s=metadata_timeout_s,
        on_discovered=metrics.count_discovered,
        consume_timeout_s=CONSUME_TIMEOUT_S,
        callbacks_pending=callbacks_pending,
        fields=fields,
        prefetch=prefetch,
        out_of_range=functools.partial(resolve_out_of_range, delivery=delivery, config=config),
        on_offsets_lost=metrics.count_lost,
        consumer_factory=consumer_factory,
        on_client_replaced=metrics.count_client_replaced,
    )
