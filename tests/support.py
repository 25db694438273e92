"""Helpers for tests that talk to a real Kafka: topics, producing, reading back.

Every helper is bounded in time and raises on failure; none sleeps where an event can be awaited.
"""
from __future__ import annotations

import time
from typing import Iterable, Sequence

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster.demo import create_topic as cluster_create_topic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    config: dict[str, str] | None = None,
    replication: int = 1,
    timeout: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader visible in metadata."""
    cluster_create_topic(bootstrap, name, partitions, timeout, replication=replication, config=config)


def producer(bootstrap: str, **extra: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "enable.idempotence": True,
        "acks": "all",
    }
    config.update(extra)
    return Producer(config)


def produce(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    partition: int | None = None,
    key: bytes | None = None,
    timeout: float = 60.0,
) -> int:
    """Produce `values` (to one partition, or round-robin over the topic's partitions when None).

    Returns how many the broker acknowledged; raises if any delivery failed.
    """
    failures: list[str] = []
    partitions = partition_count(bootstrap, topic) if partition is None else 0
    client = producer(bootstrap)

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for index, value in enumerate(values):
        target = partition if partition is not None else index % partitions
        while True:
            try:
                client.produce(topic, value=value, key=key, partition=target, on_delivery=on_delivery)
                break
            except BufferError:
                client.poll(0.05)
        if index % 10_000 == 0:
            client.poll(0)
    remaining = client.flush(timeout)
    if remaining or failures:
        raise KafkaException(f"{remaining} undelivered, failures: {failures[:3]}")
    return len(values)


def partition_count(bootstrap: str, topic: str) -> int:
    metadata = admin(bootstrap).list_topics(topic, timeout=10)
    return len(metadata.topics[topic].partitions)


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> high watermark (offset after the last record)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "enable.auto.commit": False})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partition_count(bootstrap, topic))
        }
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
