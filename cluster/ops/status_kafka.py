"""What ``laminar-kafka status`` reads from Kafka: which topics it shows (:func:`status_topics`,
pure) and their partitions' high watermarks (:func:`read_kafka`)."""
from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import KafkaException

from laminar_kafka.cluster.errors import ClusterError, UsageError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_consumer
from laminar_kafka.kafka_source.config.topics import PATTERN_PREFIX, TopicSelector
from laminar_kafka.kafka_source.read import positions

__all__ = ["read_kafka", "status_topics"]

#: attempts to read one partition's high watermark (a new partition may briefly have no leader)
_WATERMARK_ATTEMPTS = 8


def status_topics(asked: Sequence[str], pinned: str | None, pipeline: str) -> tuple[str, ...]:
    """The topics ``status`` shows: ``asked`` (``--topic``, names or one ``re:<regex>``) when given,
    else the pipeline's pinned ``topic`` setting (its normal form: sorted names or ``re:<regex>``).
    Pure; :class:`UsageError` (one line) with neither."""
    if asked:
        return tuple(asked)
    if pinned:
        return tuple(t for t in pinned.split(",") if t) if not pinned.startswith(PATTERN_PREFIX) else (pinned,)
    raise UsageError(f"pipeline {pipeline!r} has no pinned topics yet (none of its nodes has started): "
                     "name them with --topic")


def _selected(selector: TopicSelector, available: Sequence[str]) -> list[str]:
    """The topics of ``selector`` in Kafka's ``available`` ones: names as given, a pattern's matches sorted."""
    if selector.pattern is None:
        return list(selector.names)
    return sorted(t for t in available if selector.matches(t))


def read_kafka(kafka: KafkaClientConfig, topics: Sequence[str], timeout: float = 10.0) -> dict[TopicPartitionId, int]:
    """The high watermark of every partition of ``topics`` (names, or one ``re:<regex>``)
    (:func:`~laminar_kafka.kafka_source.read.positions.high_watermarks`, asked again while a partition
    has no leader yet); UsageError (one line, no secret) when Kafka does not answer or a topic does
    not exist (no topic matches the pattern), ClusterError when the watermarks stay unavailable."""
    try:
        selector = TopicSelector.parse(",".join(topics))
    except ConfigurationError as exc:
        raise UsageError(f"--topic: {exc}", cause=exc) from exc
    consumer = make_consumer(kafka, "laminar-status")
    try:
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise UsageError(f"cannot reach Kafka at {kafka.bootstrap} within {timeout:.0f}s", cause=exc) from exc
        wanted: list[TopicPartitionId] = []
        names = _selected(selector, list(metadata.topics))
        if not names:
            raise UsageError(f"no topic matching {selector.pattern!r} exists on {kafka.bootstrap}")
        for topic in names:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise UsageError(f"topic {topic!r} does not exist on {kafka.bootstrap}")
            wanted.extend((topic, partition) for partition in info.partitions)
        attempts = 0
        while True:
            try:
                return positions.high_watermarks(consumer, wanted, timeout)
            except KafkaException as exc:  # e.g. a new partition whose leader is not elected yet
                attempts += 1
                if attempts == _WATERMARK_ATTEMPTS:
                    raise ClusterError(f"high watermarks unavailable: {exc.args[0].str()}") from exc
                time.sleep(0.25)
    finally:
        consumer.close()
