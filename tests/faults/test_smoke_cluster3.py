"""The three-broker option: replication 3 with min.insync.replicas 2 survives one broker's death."""
from __future__ import annotations

from typing import Callable

import pytest

from tests.conftest import KafkaHandle
from tests.support import create_topic, produce, read_all

pytestmark = pytest.mark.faults


def test_one_of_three_brokers_killed_loses_nothing_acknowledged(
    kafka_cluster3: KafkaHandle, unique: Callable[[str], str]
) -> None:
    topic = unique("rf3")
    create_topic(kafka_cluster3.bootstrap, topic, partitions=4, replication=3)
    produce(kafka_cluster3.bootstrap, topic, [f"before-{i}".encode() for i in range(2_000)])

    kafka_cluster3.kill_broker(1)
    produce(kafka_cluster3.bootstrap, topic, [f"degraded-{i}".encode() for i in range(2_000)])
    kafka_cluster3.start_broker(1)
    produce(kafka_cluster3.bootstrap, topic, [f"healed-{i}".encode() for i in range(2_000)])

    records = read_all(kafka_cluster3.bootstrap, topic)
    assert sum(len(rows) for rows in records.values()) == 6_000
    for partition, rows in records.items():
        assert [offset for offset, _ in rows] == list(range(len(rows))), f"gap in partition {partition}"
