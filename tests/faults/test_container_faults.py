"""Container faults under a running pipeline: the Kafka or ZooKeeper container is killed, stopped,
paused or restarted while `laminar-kafka run` nodes land a topic; every scenario ends with `verify`
reporting 0 missing and 0 duplicated rows.

Runs with the container backend (LAMINAR_TEST_BACKEND=docker), where `kafka_restartable` and
`zookeeper_restartable` are dedicated containers of the project's images (published on loopback,
so a restarted container keeps its address). The broker and ZooKeeper restart tests of the rest of
the fault suite also run on containers then.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import Pipeline, assert_exact, make_pipeline

pytestmark = [pytest.mark.faults, pytest.mark.containers, pytest.mark.timeout(240)]


@pytest.fixture
def pipeline(kafka_restartable: KafkaHandle, zookeeper_restartable: ZooKeeperHandle,
             unique: Callable[[str], str], tmp_path: Path) -> Iterator[Pipeline]:
    """A ZooKeeper-mode pipeline on the module's own Kafka and ZooKeeper containers."""
    if not hasattr(kafka_restartable.cluster, "stop_member"):
        pytest.skip("container faults need the container backend (LAMINAR_TEST_BACKEND=docker)")
    p = make_pipeline(kafka_restartable.bootstrap, zookeeper_restartable.hosts, unique("ctr-fault"), tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def _running(pipeline: Pipeline, nodes: int = 2, rate: int = 1000) -> None:
    pipeline.produce(rate)
    for node_id in range(1, nodes + 1):
        pipeline.launch(node_id)
    pipeline.wait_spread(nodes, timeout=90)
    time.sleep(1.5)  # inside an epoch: rows staged, not yet sealed


def test_kafka_container_killed_then_started(pipeline: Pipeline, kafka_restartable: KafkaHandle) -> None:
    _running(pipeline)
    kafka_restartable.kill_broker(0)  # SIGKILL: no controlled shutdown, unflushed log tail recovered
    time.sleep(4)
    kafka_restartable.start_broker(0)
    time.sleep(3)
    pipeline.wait_spread(2, timeout=90)
    assert_exact(pipeline.finish(timeout=120), pipeline)


def test_kafka_container_paused_then_zookeeper_container_restarted(
    pipeline: Pipeline, kafka_restartable: KafkaHandle, zookeeper_restartable: ZooKeeperHandle
) -> None:
    _running(pipeline)
    kafka_restartable.pause_broker(0)  # frozen: connections stay open, nothing answers
    time.sleep(6)
    kafka_restartable.resume_broker(0)
    time.sleep(3)
    zookeeper_restartable.restart_server(0)  # stop + start within the nodes' session timeout
    time.sleep(3)
    pipeline.wait_spread(2, timeout=90)
    assert_exact(pipeline.finish(timeout=120), pipeline)


def test_zookeeper_container_stopped_past_the_session_timeout(
    pipeline: Pipeline, zookeeper_restartable: ZooKeeperHandle
) -> None:
    _running(pipeline)
    group = zookeeper_restartable.ensemble  # a ContainerGroup: the handle itself has no graceful stop
    group.stop_member(0)  # type: ignore[union-attr] - SIGTERM; the nodes' sessions (4 s) expire meanwhile
    time.sleep(8)
    group.start_member(0)  # type: ignore[union-attr]
    pipeline.wait_spread(2, timeout=120)
    assert_exact(pipeline.finish(timeout=120), pipeline)
