"""A Redis server that crashes under a running pipeline: two nodes land the streams while
redis-server is SIGKILLed and restarted from its append-only file 5 s later (longer than 5 source
generations' retries); the nodes wait it out (the outage is transient, not counted toward
max-generation-failures) and the lake ends exact."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.devstack.redis_server import RedisServer
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import ZooKeeperHandle
from tests.integration.redis_source.harness import Appender, audit_lake, entries, landed, start_node

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]

OUTAGE_S = 8.0


def test_the_nodes_wait_out_a_redis_crash_and_the_lake_ends_exact(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    server = RedisServer(directory=tmp_path / "redis").start()  # its own: this test kills it
    stream, pipeline = unique("crash"), unique("redis-crash")
    output, logs = tmp_path / "lake", tmp_path / "logs"
    nodes = [start_node(n, server.url, stream, zookeeper.hosts, pipeline, output, logs) for n in (1, 2)]
    appender = Appender(server.url, stream).start()
    try:
        wait_until(lambda: landed(output, stream) >= 300, 90, "the first 300 entries landed")
        server.kill()
        time.sleep(OUTAGE_S)  # the outage itself (nothing to await: the server is down on purpose)
        before = landed(output, stream)
        server.start()
        wait_until(lambda: landed(output, stream) >= before + 600, 90, "600 more entries landed after the restart")
        appender.stop()
        total = entries(server.url, stream)
        wait_until(lambda: landed(output, stream) >= total, 60, f"all {total} entries landed")
        report = audit_lake(server.url, stream, output)
        assert report.ok and report.duplicated == 0 and report.missing == 0, report.table()
        assert all(node.alive() for node in nodes), [node.log_text()[-2000:] for node in nodes if not node.alive()]
        text = "".join(node.log_text() for node in nodes)
        assert "the server does not answer" in text  # the outage was seen, as transient
        assert "failed 6 times in a row" not in text
    finally:
        appender.stop()
        for node in nodes:
            node.stop()
        server.stop()


def test_a_redis_pipeline_whose_zookeeper_subtree_was_lost_continues_from_the_lake(
    redis_server: RedisServer, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    """The state fault that once doubled a Kafka pipeline, on the Redis one: both nodes stopped, the
    pipeline's ZooKeeper subtree deleted, the nodes started again. They must continue from the
    lake's records (the same runtime), not land every entry a second time."""
    from kazoo.client import KazooClient

    stream, pipeline = unique("subtree"), unique("redis-subtree")
    output, logs = tmp_path / "lake", tmp_path / "logs"
    appender = Appender(redis_server.url, stream).start()
    nodes = [start_node(n, redis_server.url, stream, zookeeper.hosts, pipeline, output, logs) for n in (1, 2)]
    try:
        wait_until(lambda: landed(output, stream) >= 600, 90, "the first 600 entries landed")
        appender.stop()
        for node in nodes:
            node.terminate()
        assert [node.wait(60) for node in nodes] == [0, 0]
        before = entries(redis_server.url, stream)
        zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
        zk.start(timeout=10)
        try:
            zk.delete(f"/laminar/{pipeline}", recursive=True)
        finally:
            zk.stop()
            zk.close()
        appender = Appender(redis_server.url, stream).start()
        for node in nodes:
            node.start()
        wait_until(lambda: landed(output, stream) >= before + 600, 90, "600 entries landed after the restart")
        appender.stop()
        total = entries(redis_server.url, stream)
        wait_until(lambda: landed(output, stream) >= total, 60, f"all {total} entries landed")
        report = audit_lake(redis_server.url, stream, output)
        assert report.ok and report.duplicated == 0 and report.missing == 0, report.table()
        assert "reseed" in "".join(node.log_text() for node in nodes).lower()
    finally:
        appender.stop()
        for node in nodes:
            node.stop()
