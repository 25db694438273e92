"""Resolution of a startup request to exact numeric offsets.

The pure functions :func:`resolve_initial` and :func:`resolve_resume` decide offsets from broker
facts (partitions, watermarks, timestamp lookups); :func:`query_broker_facts` gathers those facts
with blocking client calls and must run off the event loop, as must :func:`resolve_start_offsets`
(the whole Initial resolution with its own short-lived consumer).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from coordinator.routing import TopicPartition

from kafka_source.checkpoint import SourceCheckpoint
from kafka_source.client_positions import watermarks
from kafka_source.config import KafkaSourceConfig, StartupMode
from kafka_source.connector import DeliveryGuarantee
from kafka_source.topics import TopicSelector
from kafka_source.errors import (
    CheckpointError,
    ConfigurationError,
    OffsetOutOfRangeError,
    TransientError,
)

logger = logging.getLogger(__name__)

__all__ = [
    "BrokerFacts", "StartupPlan", "query_broker_facts", "resolve_initial", "resolve_resume",
    "resolve_out_of_range", "resolve_start_offsets", "selected_topics",
]


@dataclass(frozen=True)
class BrokerFacts:
    """``watermarks[(topic, partition)] = (low, high)`` for every partition of the topics;
    ``time_offsets`` only for ``startup.mode=timestamp`` (``None`` = no record at/after it)."""

    watermarks: Mapping[TopicPartition, tuple[int, int]]
    time_offsets: Mapping[TopicPartition, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class StartupPlan:
    """Exact next-offsets for every partition to read, how many were reset to the low watermark
    (best-effort, or ``fail.on.data.loss=false``), and how many offsets below it those skipped."""

    offsets: Mapping[TopicPartition, int]
    resets: int = 0
    lost: int = 0


def _below_low(
    tp: TopicPartition, offset: int, low: int, high: int, delivery: DeliveryGuarantee, what: str,
    config: KafkaSourceConfig,
) -> int:
    """The offset to start at when ``offset`` lies below the low watermark: an error under
    guaranteed delivery unless ``fail.on.data.loss=false``, else the low watermark (logged)."""
    if delivery.is_guaranteed and config.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{what} offset {offset} of {tp[0]}:{tp[1]} is below the low watermark {low} "
            f"(records were deleted by retention); refusing to skip them under {delivery.value} "
            "(fail.on.data.loss=false resumes at the low watermark, the loss logged)",
            topic=tp[0],
            partition=tp[1],
            offset=offset,
            low=low,
            high=high,
        )
    if delivery.is_guaranteed:
        logger.warning(
            "%s offset %d of %s:%d is below the low watermark %d: offsets %d..%d were deleted by retention "
            "before they were read and are lost; resuming at %d (fail.on.data.loss=false)",
            what, offset, tp[0], tp[1], low, offset, low - 1, low,
        )
    else:
        logger.warning(
            "%s offset %d of %s:%d is below the low watermark %d; best-effort reset to it",
            what, offset, tp[0], tp[1], low,
        )
    return low


def resolve_initial(
    config: KafkaSourceConfig, facts: BrokerFacts, delivery: DeliveryGuarantee
) -> StartupPlan:
    """Offsets for ``SourcePosition.Initial`` under ``config.startup_mode``.

    earliest = low watermark; latest = high watermark; timestamp = first offset with a timestamp
    >= the given one (high watermark if none); specific-offsets = the listed offsets (unlisted
    partitions: low watermark). A listed offset above the high watermark or of an unknown
    partition is a :class:`ConfigurationError`; below the low watermark it fails under guaranteed
    delivery and is reset to the low watermark under best-effort.
    """
    mode = config.startup_mode
    offsets: dict[TopicPartition, int] = {}
    resets = lost = 0
    for tp, (low, high) in sorted(facts.watermarks.items()):
        if mode is StartupMode.EARLIEST:
            offsets[tp] = low
        elif mode is StartupMode.LATEST:
            offsets[tp] = high
        elif mode is StartupMode.TIMESTAMP:
            found = facts.time_offsets.get(tp)
            offsets[tp] = high if found is None or found < 0 else max(found, low)
        else:
            wanted = config.startup_specific_offsets.get(tp)
            if wanted is None:
                offsets[tp] = low
            elif wanted > high:
                raise ConfigurationError(
                    f"startup.specific-offsets: {tp[0]}:{tp[1]}:{wanted} is beyond the high "
                    f"watermark {high}"
                )
            elif wanted < low:
                offsets[tp] = _below_low(tp, wanted, low, high, delivery, "specific", config)
                resets, lost = resets + 1, lost + low - wanted
            else:
                offsets[tp] = wanted
    for tp in config.startup_specific_offsets:
        if tp not in facts.watermarks:
            raise ConfigurationError(f"startup.specific-offsets: {tp[0]}:{tp[1]} does not exist")
    return StartupPlan(offsets, resets, lost)


def resolve_resume(
    config: KafkaSourceConfig,
    checkpoint: SourceCheckpoint,
    facts: BrokerFacts,
    delivery: DeliveryGuarantee,
) -> StartupPlan:
    """Offsets for ``SourcePosition.Resume``: exactly the checkpoint's next-offsets.

    Partitions of the configured topics that the checkpoint lacks (created since) start at the
    low watermark. A checkpoint naming another topic or a missing partition is a
    :class:`CheckpointError`; an offset outside ``[low, high]`` raises
    :class:`OffsetOutOfRangeError` under guaranteed delivery and is reset to the low watermark
    (counted in ``resets``) under best-effort.
    """
    cursor = checkpoint.partitions()
    offsets: dict[TopicPartition, int] = {}
    resets = lost = 0
    for tp in cursor:
        if not config.selector.matches(tp[0]):
            raise CheckpointError(
                f"checkpoint names topic {tp[0]!r}, which is not configured ({config.selector})"
            )
        if tp not in facts.watermarks:
            raise CheckpointError(f"checkpoint names {tp[0]}:{tp[1]}, which does not exist")
    for tp, (low, high) in sorted(facts.watermarks.items()):
        offset = cursor.get(tp)
        if offset is None:
            offsets[tp] = low
        elif offset < low:
            offsets[tp] = _below_low(tp, offset, low, high, delivery, "checkpoint", config)
            resets, lost = resets + 1, lost + low - offset
        elif offset > high:
            if delivery.is_guaranteed:
                raise OffsetOutOfRangeError(
                    f"checkpoint offset {offset} of {tp[0]}:{tp[1]} is beyond the high watermark "
                    f"{high} (was the topic recreated?)",
                    topic=tp[0], partition=tp[1], offset=offset, low=low, high=high,
                )
            logger.warning(
                "checkpoint offset %d of %s:%d is beyond the high watermark %d; best-effort "
                "reset to the low watermark %d", offset, tp[0], tp[1], high, low,
            )
            offsets[tp] = low
            resets += 1
        else:
            offsets[tp] = offset
    return StartupPlan(offsets, resets, lost)


def resolve_out_of_range(
    tp: TopicPartition, position: int, low: int, high: int, delivery: DeliveryGuarantee, config: KafkaSourceConfig
) -> int:
    """Where to read on after the broker answered a running fetch at ``position`` with "offset out
    of range" (guaranteed delivery only: best-effort lets the client reset to the earliest offset).

    Below the low watermark (records deleted by retention while the reader lagged behind): as a
    checkpoint cursor below it (:func:`_below_low`), so ``fail.on.data.loss=false`` resumes at the
    low watermark with the loss logged. Beyond the high watermark (the topic was deleted and
    re-created, or an unclean leader election truncated the log): :class:`OffsetOutOfRangeError`,
    always. Inside ``[low, high]`` (the log moved under the fetch): ``position`` again.
    """
    if position > high:
        raise OffsetOutOfRangeError(
            f"{tp[0]}:{tp[1]} now ends at offset {high}, below the read offset {position}: the topic was "
            "deleted and re-created, or an unclean leader election truncated its log; the records already "
            "read no longer match the topic's, so the source cannot go on exactly once",
            topic=tp[0], partition=tp[1], offset=position, low=low, high=high,
        )
    if position < low:
        return _below_low(tp, position, low, high, delivery, "read", config)
    logger.warning("%s:%d: the broker answered a read at offset %d 'out of range', inside its range [%d, %d]; "
                   "reading there again", tp[0], tp[1], position, low, high)
    return position


def selected_topics(consumer: Consumer, selector: TopicSelector, timeout_s: float) -> dict[str, Any]:
    """``{topic: TopicMetadata}`` of the selected topics (blocking). Raises :class:`ConfigurationError`
    when a named topic is missing or has an error, and ``KafkaException`` when Kafka does not answer."""
    if selector.is_pattern:
        metadata = consumer.list_topics(timeout=timeout_s)
        return {t: metadata.topics[t] for t in selector.select(metadata.topics)
                if metadata.topics[t].error is None and metadata.topics[t].partitions}
    found: dict[str, Any] = {}
    for topic in selector.names:
        info = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            reason = info.error.str() if info is not None and info.error else "no partitions"
            raise ConfigurationError(f"topic {topic!r} is not available: {reason}")
        found[topic] = info
    return found


def resolve_start_offsets(
    config: KafkaSourceConfig, delivery: DeliveryGuarantee, timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """Resolve ``config``'s startup mode once to exact next-offsets of every selected partition,
    with a short-lived consumer (blocking). Used to pin a pipeline's start durably before any node
    reads (DESIGN section 10.2). Raises like :meth:`KafkaSource.start` does."""
    consumer = Consumer(config.consumer_config(guaranteed=delivery.is_guaranteed), logger=logger)
    try:
        return dict(resolve_initial(config, query_broker_facts(consumer, config, timeout_s), delivery).offsets)
    finally:
        consumer.close()


def query_broker_facts(
    consumer: Consumer, config: KafkaSourceConfig, timeout_s: float
) -> BrokerFacts:
    """Partitions and watermarks of every selected topic (blocking; run off the loop).

    Named topics must exist (:class:`ConfigurationError`); a pattern may match none yet.
    """
    try:
        selected = selected_topics(consumer, config.selector, timeout_s)
        bounds = watermarks(consumer, [(t, p) for t, info in selected.items() for p in info.partitions], timeout_s)
        time_offsets: dict[TopicPartition, int | None] = {}
        if config.startup_mode is StartupMode.TIMESTAMP:
            assert config.startup_timestamp_ms is not None
            wanted = [KafkaTopicPartition(t, p, config.startup_timestamp_ms) for t, p in bounds]
            for tp in consumer.offsets_for_times(wanted, timeout=timeout_s):
                if tp.error is not None:
                    raise TransientError(f"offsets_for_times failed: {tp.error}", cause=tp.error)
                time_offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return BrokerFacts(bounds, time_offsets)
    except KafkaException as exc:
        raise TransientError(f"cannot read partition metadata: {exc}", cause=exc.args[0]) from exc
