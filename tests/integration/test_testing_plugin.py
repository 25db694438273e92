"""laminar_kafka.testing's fixtures beyond docs/testing.md's examples: a three-broker cluster keeps
taking writes with a broker killed or paused, and `consume_records` with a count waits for records
produced after the call."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

from laminar_kafka.testing.handles import KafkaTestCluster
from laminar_kafka.testing.records import Record

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]


def test_three_brokers_take_writes_with_one_killed_then_one_paused(
    kafka_cluster_3: KafkaTestCluster, unique_topic: Callable[..., str], produce_records: Callable[..., int],
    consume_records: Callable[..., list[Record]],
) -> None:
    topic = unique_topic(partitions=3, cluster=kafka_cluster_3)  # replication 3, min.insync.replicas 2
    assert kafka_cluster_3.replication == 3 and len(kafka_cluster_3.brokers) == 3
    produce_records(topic, [b"all up"], partition=0, cluster=kafka_cluster_3)
    victim = kafka_cluster_3.brokers[1]
    victim.kill()
    try:
        assert produce_records(topic, [b"one killed"], partition=0, cluster=kafka_cluster_3) == 1
    finally:
        victim.start()
    kafka_cluster_3.brokers[2].pause()
    try:
        assert produce_records(topic, [b"one paused"], partition=0, cluster=kafka_cluster_3) == 1
    finally:
        kafka_cluster_3.brokers[2].resume()
    values = [r.value for r in consume_records(topic, cluster=kafka_cluster_3, timeout=60)]
    assert values == [b"all up", b"one killed", b"one paused"]


def test_consume_records_with_a_count_waits_for_records_produced_later(
    unique_topic: Callable[..., str], produce_records: Callable[..., int], consume_records: Callable[..., list[Record]],
) -> None:
    topic = unique_topic(partitions=2)
    with ThreadPoolExecutor(1) as pool:
        produced = pool.submit(produce_records, topic, [b"x", b"y", b"z"])
        records = consume_records(topic, 3, timeout=60)
        assert produced.result(60) == 3
    assert sorted(r.value for r in records) == [b"x", b"y", b"z"]
    assert all(records[i].partition <= records[i + 1].partition for i in range(2))
    with pytest.raises(TimeoutError, match=r"3 records after 1s, wanted 4"):
        consume_records(topic, 4, timeout=1)
