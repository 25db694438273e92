"""Smoke tests: the session's real Kafka and ZooKeeper serve clients."""
from __future__ import annotations

import threading
from typing import Callable

import pytest
from kazoo.client import KazooClient

from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.support import create_topic, produce, read_all

pytestmark = pytest.mark.integration


def test_produce_and_read_back_10000_records_over_4_partitions(kafka: KafkaHandle, unique: Callable[[str], str]) -> None:
    topic = unique("smoke")
    create_topic(kafka.bootstrap, topic, partitions=4)
    sent = [f"record-{i}".encode() for i in range(10_000)]
    produce(kafka.bootstrap, topic, sent)

    records = read_all(kafka.bootstrap, topic)

    assert sum(len(r) for r in records.values()) == 10_000
    for partition, rows in records.items():
        assert [offset for offset, _ in rows] == list(range(len(rows))), f"gap in partition {partition}"
        assert [value for _, value in rows] == sent[partition::4]


def test_ephemeral_node_disappears_for_a_second_client_when_the_first_session_ends(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    chroot = "/" + unique("smoke")
    root = KazooClient(hosts=zookeeper.hosts, timeout=5.0)
    root.start(timeout=10)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    first = KazooClient(hosts=zookeeper.hosts + chroot, timeout=5.0)
    second = KazooClient(hosts=zookeeper.hosts + chroot, timeout=5.0)
    first.start(timeout=10)
    second.start(timeout=10)
    try:
        first.ensure_path("/members")
        first.create("/members/node-1", b"boot", ephemeral=True)
        gone = threading.Event()

        def watch(children: list[str]) -> bool | None:
            if "node-1" not in children:
                gone.set()
                return False
            return None

        assert second.exists("/members/node-1") is not None
        second.ChildrenWatch("/members", watch)
        first.stop()
        first.close()

        assert gone.wait(timeout=10), "ephemeral node survived its session"
        assert second.exists("/members/node-1") is None
    finally:
        second.delete("/members", recursive=True)
        second.stop()
        second.close()
