"""End to end: `laminar-kafka run` nodes as separate processes, real Kafka and ZooKeeper, `verify`.

Each scenario ends with 0 missing and 0 duplicated rows in the published output.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import Pipeline, assert_exact, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def pipeline(kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str],
             tmp_path: Path) -> Iterator[Pipeline]:
    p = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("e2e"), tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def embedded(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> Iterator[Pipeline]:
    p = make_pipeline(kafka.bootstrap, None, unique("embedded"), tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def test_embedded_single_node_restart_is_exact(embedded: Pipeline) -> None:
    embedded.produce(3000)
    node = embedded.launch(1)
    embedded.wait_until(lambda: any((Path(embedded.output)).glob("epoch-*.parquet")), 60, "first published file")
    node.kill()  # mid-epoch crash: unsealed rows are dropped and read again
    embedded.launch(1)
    time.sleep(2)
    report = embedded.finish()
    assert_exact(report, embedded)
    embedded.nodes[1].terminate()
    assert embedded.nodes[1].wait(30) == 0


def test_node_killed_mid_epoch(pipeline: Pipeline) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    time.sleep(1.3)  # inside an epoch
    pipeline.nodes[2].kill()
    pipeline.wait_spread(2)
    assert_exact(pipeline.finish(), pipeline)


def test_planned_leave(pipeline: Pipeline) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    pipeline.nodes[3].terminate()
    assert pipeline.nodes[3].wait(90) == 0
    pipeline.wait_spread(2)
    assert_exact(pipeline.finish(), pipeline)


def test_join_under_load(pipeline: Pipeline) -> None:
    pipeline.produce(4000)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_spread(2)
    pipeline.launch(3)
    pipeline.wait_spread(3)
    pipeline.launch(4)
    pipeline.wait_spread(4)
    assert_exact(pipeline.finish(), pipeline)


def test_whole_cluster_restart(pipeline: Pipeline) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    time.sleep(2)
    for node in pipeline.nodes.values():
        node.kill()
    time.sleep(5)  # sessions expire
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    assert_exact(pipeline.finish(), pipeline)


def test_leader_killed_during_a_round(pipeline: Pipeline) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    leader = pipeline.status().leader
    assert leader is not None
    pipeline.launch(4)
    pipeline.wait_until(lambda: pipeline.status().round is not None, 30, "a round running")
    pipeline.nodes[leader].kill()
    pipeline.wait_spread(3, timeout=90)
    assert_exact(pipeline.finish(), pipeline)
