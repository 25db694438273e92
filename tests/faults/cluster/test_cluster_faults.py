"""Crashes, end to end: `laminar-kafka run` nodes as separate processes on real Kafka and
ZooKeeper, SIGKILLed at chosen moments; each scenario ends with `verify` reporting 0 missing and
0 duplicated rows in the published output.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.coordinator.engine.model import ControlState
from tests.conftest import ZooKeeperHandle
from tests.integration.cluster.harness import Pipeline, assert_exact

pytestmark = [pytest.mark.faults, pytest.mark.timeout(150)]


def test_embedded_single_node_restart_is_exact(embedded: Pipeline) -> None:
    embedded.produce(3000)
    node = embedded.launch(1)
    embedded.wait_until(lambda: any(Path(embedded.output).glob("[!_]*/**/epoch-*.parquet")), 60, "first published file")
    node.kill()  # mid-epoch crash: unsealed rows are dropped and read again
    embedded.launch(1)
    report = embedded.finish()
    assert_exact(report, embedded)
    embedded.nodes[1].terminate()
    assert embedded.nodes[1].wait(30) == 0


@pytest.mark.parametrize("table_format", list(TableFormat))
def test_node_killed_mid_epoch(pipeline: Pipeline, table_format: TableFormat) -> None:
    pipeline.table_format = table_format
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    time.sleep(1.3)  # inside an epoch (checkpoint interval 500 ms): rows written, not yet sealed
    pipeline.nodes[2].kill()
    pipeline.wait_spread(2)
    assert_exact(pipeline.finish(), pipeline)


@pytest.mark.parametrize("table_format", list(TableFormat))
def test_whole_cluster_restart(pipeline: Pipeline, table_format: TableFormat) -> None:
    pipeline.table_format = table_format
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    time.sleep(2)
    for node in pipeline.nodes.values():
        node.kill()
    for node_id in (1, 2, 3):  # before the old sessions expire: the new boots must fence the old ones
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    assert_exact(pipeline.finish(), pipeline)


def test_leader_killed_during_a_round(pipeline: Pipeline, zookeeper: ZooKeeperHandle) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    leader = pipeline.status().leader
    assert leader is not None
    killed_during: list[ControlState] = []
    fired = threading.Event()
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(timeout=15)
    path = f"/laminar/{pipeline.pipeline}/assignment"

    def watch(data: bytes | None, _stat: object) -> bool:
        if fired.is_set():
            return False
        if data and ControlState.from_json(data).round is not None:
            os.kill(pipeline.nodes[leader].pid, signal.SIGKILL)  # at once, from the watch thread
            fired.set()
            return False
        return True

    try:
        client.DataWatch(path, watch)
        pipeline.launch(4)  # the join starts a round
        assert fired.wait(30), "no round started"
        pipeline.nodes[leader].wait(10)
        frozen = ControlState.from_json(client.get(path)[0])
        if frozen.round is not None:
            killed_during.append(frozen)
    finally:
        client.stop()
        client.close()
    assert killed_during, "the round was decided before the leader died; the kill came too late"
    pipeline.wait_spread(3, timeout=90)
    assert_exact(pipeline.finish(), pipeline)
