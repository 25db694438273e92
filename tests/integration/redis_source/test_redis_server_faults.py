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
