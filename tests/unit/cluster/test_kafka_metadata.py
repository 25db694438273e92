"""TopologyReader: a topic Kafka says does not exist is absent from the observation (three in a row
mean "deleted"); a topic answered with another error (authorization revoked, a leader being
elected) is not absent: the read is unavailable, retried later, and never counts towards deleted."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException

from laminar_kafka.cluster.kafka_metadata import MetadataUnavailable, TopologyReader
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.read.client_watch import ClientKeeper


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
    reader.admin.client = FakeAdmin(topics)  # type: ignore[assignment]
    return reader


def test_a_topic_kafka_does_not_know_is_absent() -> None:
    unknown = TopicMetadata(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition"), {})
    assert reader_of({"orders": unknown}).read().topics == {}
    assert reader_of({}).read().topics == {}


def test_a_topic_answered_with_another_error_makes_the_read_unavailable() -> None:
    denied = TopicMetadata(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"), {})
    with pytest.raises(MetadataUnavailable, match="topic 'orders': Broker: Topic authorization failed"):
        reader_of({"orders": denied}).read()


class LostAdmin:
    """An admin client that lost every broker: each request times out."""

    def list_topics(self, timeout: float) -> ClusterMetadata:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))

    def poll(self, timeout: float) -> int:
        return 0


def test_an_admin_client_whose_requests_fail_for_the_stall_is_replaced_and_the_next_read_answers() -> None:
    now = [0.0]
    made: list[object] = [LostAdmin(), FakeAdmin({})]
    discarded: list[object] = []
    reader = TopologyReader("127.0.0.1:1", TopicSelector(("orders",)))
    reader.admin = ClientKeeper(lambda: made.pop(0), discarded.append, stall_s=15.0, clock=lambda: now[0])
    for at in (1.0, 8.0, 14.9):  # failures inside the stall: the same client is kept, the caller retries
        now[0] = at
        with pytest.raises(MetadataUnavailable, match="Broker transport failure"):
            reader.read()
    assert discarded == [] and reader.admin.replaced == 0
    now[0] = 15.0
    with pytest.raises(MetadataUnavailable):
        reader.read()  # this failure replaces it
    assert len(discarded) == 1 and isinstance(discarded[0], LostAdmin) and reader.admin.replaced == 1
    assert reader.read().topics == {}  # the new client answers
