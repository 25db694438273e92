"""TopologyReader: a topic Kafka says does not exist is absent from the observation (three in a row
mean "deleted"); a topic answered with another error (authorization revoked, a leader being
elected) is not absent: the read is unavailable, retried later, and never counts towards deleted."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError

from laminar_kafka.cluster.runtime.metadata import MetadataUnavailable, TopologyReader
from laminar_kafka.kafka_source.config.topics import TopicSelector


@dataclass
class TopicMetadata:
    error: KafkaError | None = None
    partitions: dict[int, object] = field(default_factory=lambda: {0: object()})


@dataclass
class ClusterMetadata:
    topics: dict[str, TopicMetadata]


class FakeAdmin:
    def __init__(self, topics: dict[str, TopicMetadata]) -> None:
        self.topics = topics

    def list_topics(self, timeout: float) -> ClusterMetadata:
        return ClusterMetadata(self.topics)

    def describe_topics(self, names: object, request_timeout: float) -> dict[str, object]:
        raise AssertionError("no topic to describe in these tests")


def reader_of(topics: dict[str, TopicMetadata]) -> TopologyReader:
    reader = TopologyReader("127.0.0.1:1", TopicSelector(("orders",)))
    reader._admin = FakeAdmin(topics)  # type: ignore[assignment]
    return reader


def test_a_topic_kafka_does_not_know_is_absent() -> None:
    unknown = TopicMetadata(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition"), {})
    assert reader_of({"orders": unknown}).read().topics == {}
    assert reader_of({}).read().topics == {}


def test_a_topic_answered_with_another_error_makes_the_read_unavailable() -> None:
    denied = TopicMetadata(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"), {})
    with pytest.raises(MetadataUnavailable, match="topic 'orders': Broker: Topic authorization failed"):
        reader_of({"orders": denied}).read()
