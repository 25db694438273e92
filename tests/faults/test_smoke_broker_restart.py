"""A broker restart in the middle of consumption loses nothing (plain confluent-kafka consumer)."""
from __future__ import annotations

import time
from typing import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import KafkaHandle
from tests.support import create_topic, produce

pytestmark = pytest.mark.faults


def test_broker_restart_mid_consumption_loses_nothing(
    kafka_restartable: KafkaHandle, unique: Callable[[str], str]
) -> None:
    bootstrap = kafka_restartable.bootstrap
    topic = unique("restart")
    create_topic(bootstrap, topic, partitions=4)
    produce(bootstrap, topic, [f"before-{i}".encode() for i in range(20_000)])

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False,
        "max.partition.fetch.bytes": 16 * 1024, "queued.max.messages.kbytes": 64,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    seen: dict[int, list[int]] = {p: [] for p in range(4)}

    def consume_until(total: int, deadline: float) -> None:
        while sum(len(v) for v in seen.values()) < total and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error():
                    continue  # transport errors while the broker is down are retried by the client
                seen[message.partition()].append(message.offset())

    try:
        consume_until(5_000, time.monotonic() + 30)
        kafka_restartable.restart_broker()
        produce(bootstrap, topic, [f"after-{i}".encode() for i in range(10_000)])
        consume_until(30_000, time.monotonic() + 90)
    finally:
        consumer.close()

    for partition, offsets in seen.items():
        assert offsets == list(range(len(offsets))), f"gap or duplicate in partition {partition}"
    assert sum(len(v) for v in seen.values()) == 30_000
