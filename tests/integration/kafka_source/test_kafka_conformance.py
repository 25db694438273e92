"""The conformance kit on ``KafkaSource`` against a real Kafka broker (one topic per test)."""
from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewPartitions

from laminar_kafka.connector.conformance import ConnectorKit, LogBackend
from laminar_kafka.connector.conformance.pytest_kit import conformance_tests
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.kafka_source import KafkaSource
from tests import support


class KafkaBackend(LogBackend):
    """One topic on a real broker; advisory commits read from the consumer group ``group``."""

    def __init__(self, bootstrap: str, topic: str, group: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        support.create_topic(bootstrap, topic, partitions)

    def partitions(self) -> int:
        return support.partition_count(self.bootstrap, self.topic)

    def append(self, partition: int, count: int) -> None:
        support.produce(self.bootstrap, self.topic, [b"r%d" % i for i in range(count)], partition=partition)

    def end(self, partition: int) -> int:
        return support.high_watermarks(self.bootstrap, self.topic).get(partition, 0)

    def add_partition(self) -> int:
        before = self.partitions()
        admin = support.admin(self.bootstrap)  # held: its futures die with it
        for future in admin.create_partitions([NewPartitions(self.topic, before + 1)]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while self.partitions() <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partition {before} of {self.topic} not in metadata after 30 s")
            time.sleep(0.1)
        return before

    def committed_offsets(self) -> dict[int, int] | None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False})
        try:
            wanted = [TopicPartition(self.topic, p) for p in range(self.partitions())]
            return {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=10) if tp.offset >= 0}
        finally:
            consumer.close()


@pytest.fixture
def conformance_kit(kafka, unique: Callable[[str], str]) -> ConnectorKit:  # type: ignore[no-untyped-def]
    topic, group = unique("conformance"), unique("g")
    properties = {"bootstrap.servers": kafka.bootstrap, "topic": topic, "group.id": group,
                  "include-metadata": "_topic,_partition,_offset", "startup-mode": "earliest"}
    return ConnectorKit(KafkaBackend(kafka.bootstrap, topic, group, 4), KafkaSource, ConnectorConfig("kafka", properties))


conformance_tests(globals())
