"""The runtime in-process on real Kafka and ZooKeeper (one node reading every partition).

Epochs committed by the ZooKeeper coordinator, Parquet published from its manifests, an exact resume
after a stop, and the /metrics endpoint.
"""
from __future__ import annotations

import asyncio
import dataclasses
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.node import build_runtime, coordinator_config
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from laminar_kafka.demo import audit_output
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle, ZooKeeperHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run_until(runtime: NodeRuntime, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    task = asyncio.create_task(runtime.run())
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            assert not task.done(), task.exception()
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.1)
    finally:
        runtime.request_stop(planned_leave=False)
        await asyncio.wait_for(task, 30)


async def test_single_node_lands_the_topic_exactly_once_across_a_restart(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("rt")
    create_topic(kafka.bootstrap, topic, 4)
    support.produce(kafka.bootstrap, topic, [b"a%d" % i for i in range(20000)])
    port = free_port()
    settings = settings_from({}, {}, {
        "bootstrap": kafka.bootstrap, "topic": topic, "output": str(tmp_path / "out"), "zk": zookeeper.hosts,
        "pipeline": topic, "checkpoint-interval-ms": 300, "row-group-rows": 1000,
    })

    def runtime() -> NodeRuntime:
        coordinator = ZooKeeperCoordinator(coordinator_config(settings), 1, "")
        built = build_runtime(settings, coordinator, NodeMetrics(1))
        built.options = dataclasses.replace(built.options, vnode_mode=False)  # reads every partition
        return built

    first = runtime()
    stop_metrics = first.metrics.serve(port, "127.0.0.1")
    try:
        await run_until(first, lambda: first.epochs_committed >= 2 and first.rows_written >= 20000)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        stop_metrics()
    assert 'laminar_records_in_total{node="1"} 20000.0' in body
    assert "laminar_epochs_committed_total" in body and 'laminar_session_state{node="1",state="CONNECTED"} 1.0' in body

    support.produce(kafka.bootstrap, topic, [b"b%d" % i for i in range(10000)])
    second = runtime()
    await run_until(second, lambda: audit_output(kafka.bootstrap, topic, settings.output).missing == 0)
    report = audit_output(kafka.bootstrap, topic, settings.output)
    assert report.ok and sum(p.expected for p in report.partitions) == 30000, report.table()
