"""Helpers for tests that talk to a real Kafka: topics, producing (both from `devstack`), reading back.

Every helper is bounded in time and raises on failure; none sleeps where an event can be awaited.
"""
from __future__ import annotations

import time
from typing import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from laminar_kafka.devstack.producers import partition_count, produce, producer
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.read import positions

__all__ = [
    "admin", "create_topic", "delete_topic", "high_watermarks", "partition_count", "produce", "producer", "read_all", "values",
]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def delete_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Delete ``topic`` and wait until the cluster's metadata no longer lists it (a topic of the same
    name can be created then)."""
    client = admin(bootstrap)  # held: its futures die with it
    client.delete_topics([topic])[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while topic in client.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} still listed {timeout:.0f}s after its deletion")
        time.sleep(0.1)


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> high watermark (offset after the last record)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "enable.auto.commit": False})
    try:
        wanted = [(topic, p) for p in range(partition_count(bootstrap, topic))]
        return {p: high for (_topic, p), high in positions.high_watermarks(consumer, wanted, 10.0).items()}
    finally:
        consumer.close()


def read_all(
    bootstrap: str, topic: str, timeout: float = 60.0, isolation: str = "read_committed"
) -> dict[int, list[tuple[int, bytes | None]]]:
    """Read the whole topic from the beginning up to the current high watermarks.

    Returns partition -> [(offset, value)] in offset order.
    """
    ends = high_watermarks(bootstrap, topic)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    records: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in ends}
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_all({topic}) incomplete after {timeout}s")
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error():
                    raise KafkaException(message.error())
                records[message.partition()].append((message.offset(), message.value()))
            for p, end in ends.items():
                if p not in done and consumer.position([TopicPartition(topic, p)])[0].offset >= end:
                    done.add(p)
    finally:
        consumer.close()
    return records


def values(records: Iterable[tuple[int, bytes | None]]) -> list[bytes | None]:
    return [value for _, value in records]
