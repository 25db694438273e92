"""Producing and reading back test records, bounded in time: `produce_records` and `consume_records`.

Both take a `KafkaTestCluster` (its client settings apply: a secured cluster works the same way).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from laminar_kafka.testing.handles import KafkaTestCluster

__all__ = ["Record", "consume_records", "produce_records"]


@dataclass(frozen=True)
class Record:
    """One record read back: where it is (partition, offset) and what it holds."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def _as_bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def produce_records(
    cluster: KafkaTestCluster, topic: str, values: Iterable[bytes | str], *, key: bytes | str | None = None,
    partition: int | None = None, timeout: float = 60.0,
) -> int:
    """Produce `values` (str is UTF-8 encoded) idempotently with ``acks=all``: to `partition`, or
    round-robin over the topic's partitions when None. Returns the count the brokers acknowledged
    once all are; raises confluent_kafka.KafkaException when a delivery failed or is still
    outstanding after `timeout` seconds."""
    from laminar_kafka.devstack.producers import produce
    from laminar_kafka.kafka_source.clients import KafkaClientConfig

    encoded: Sequence[bytes] = [value.encode() if isinstance(value, str) else value for value in values]
    config = KafkaClientConfig(cluster.bootstrap, dict(cluster.client_settings))
    return produce(config, topic, encoded, partition=partition, key=_as_bytes(key), timeout=timeout)


def consume_records(
    cluster: KafkaTestCluster, topic: str, count: int | None = None, *, timeout: float = 30.0,
    isolation: str = "read_committed",
) -> list[Record]:
    """The topic's records from the beginning, partition by partition in offset order.

    With `count` None: every record up to the high watermarks at the call. With a `count`: returns
    as soon as that many arrived (records produced after the call count too). Raises TimeoutError,
    saying how many arrived, when `timeout` seconds pass first."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(cluster.config(**{
        "group.id": "laminar-testing-reader", "enable.auto.commit": False, "isolation.level": isolation,
    }))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        if metadata.error is not None:
            raise KafkaException(metadata.error)
        partitions = sorted(metadata.partitions)
        deadline = time.monotonic() + timeout
        ends = {p: _high_watermark(consumer, TopicPartition(topic, p), deadline) for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[Record] = []

        def done() -> bool:
            if count is not None:
                return len(records) >= count
            return all(consumer.position([TopicPartition(topic, p)])[0].offset >= end
                       for p, end in ends.items() if end > 0)

        while not done():
            if time.monotonic() > deadline:
                wanted = f"{count}" if count is not None else f"up to the watermarks {ends}"
                raise TimeoutError(f"consume_records({topic!r}): {len(records)} records after {timeout:.0f}s, "
                                   f"wanted {wanted}")
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error():
                    raise KafkaException(message.error())
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # a fetched record always has both
                records.append(Record(partition, offset, message.key(), message.value()))
    finally:
        consumer.close()
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    return ordered[:count] if count is not None else ordered


def _high_watermark(consumer: Any, partition: Any, deadline: float) -> int:
    """The partition's high watermark, asked again while the broker answers with a retriable error
    (a leader moved after a broker was killed or paused: ``NOT_LEADER_FOR_PARTITION``) until ``deadline``."""
    from confluent_kafka import KafkaError, KafkaException

    moving = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
              KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
    while True:
        try:
            return int(consumer.get_watermark_offsets(partition, timeout=10)[1])
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and (error.code() in moving or error.retriable())
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
