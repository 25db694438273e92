"""The topology changes while nodes run (docs/settings.md): partitions added to the topic, a new
topic matching a pattern, a re-created topic, and a start position pinned cluster-wide.

Real `laminar-kafka run` processes on the session's Kafka and ZooKeeper; each growth scenario ends
with the exactly-once audit over every partition, including the new ones.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import Pipeline, assert_exact
from tests.support import produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAST_TOPOLOGY = ("--topology-interval-ms", "500")


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(30)

    def grown() -> bool:
        info = admin.list_topics(topic, timeout=5).topics[topic]
        return len(info.partitions) == total and all(p.leader >= 0 for p in info.partitions.values())

    wait_until(grown, 30, f"{topic} reaching {total} partitions with leaders", interval=0.1)


def wait_for_node(node: NodeProcess, predicate: Callable[[], bool], timeout: float) -> None:
    """Poll ``predicate`` until true; fail with the node's log tail on timeout or if it exited."""

    def holds_while_alive() -> bool:
        assert node.alive(), f"the node exited:\n{node.log_text()[-3000:]}"
        return predicate()

    try:
        wait_until(holds_while_alive, timeout, "the awaited condition")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; node log:\n{node.log_text()[-3000:]}") from exc


def rows_of(output: str, topic: str) -> dict[int, list[int]]:
    """Published offsets per partition of ``topic``."""
    fs, root = open_output(output)
    result: dict[int, list[int]] = {}
    for path in list_published(fs, root):
        table = pq.read_table(path, columns=["_topic", "_partition", "_offset"], filesystem=fs)
        for t, partition, offset in zip(table["_topic"].to_pylist(), table["_partition"].to_pylist(),
                                        table["_offset"].to_pylist(), strict=True):
            if t == topic:
                result.setdefault(partition, []).append(offset)
    return {p: sorted(o) for p, o in result.items()}


def test_partitions_added_while_nodes_run_land_exactly_once(pipeline: Pipeline) -> None:
    """8 -> 12 -> 16 partitions under load with three nodes, and a node killed in between: every
    acknowledged record of every partition lands once (the 8 % loss of issue 9)."""
    producer = pipeline.produce(rate=1500)
    for node_id in (1, 2, 3):
        pipeline.launch(node_id, *FAST_TOPOLOGY)
    pipeline.wait_spread(3)
    add_partitions(pipeline.bootstrap, pipeline.topic, 12)
    producer.partitions = 12
    pipeline.wait_until(lambda: sum(len(n.partitions) for n in pipeline.status().nodes if n.live) == 12, 60,
                        "12 partitions owned")
    pipeline.nodes[2].kill()
    add_partitions(pipeline.bootstrap, pipeline.topic, 16)
    producer.partitions = 16
    pipeline.wait_until(lambda: sum(len(n.partitions) for n in pipeline.status().nodes if n.live) == 16, 60,
                        "16 partitions owned by the survivors")
    pipeline.launch(4, *FAST_TOPOLOGY)
    pipeline.wait_until(lambda: len(rows_of(pipeline.output, pipeline.topic)) == 16, 90,
                        "rows of every partition published")
    report = pipeline.finish(timeout=120)
    assert_exact(report, pipeline)
    assert len(report.partitions) == 16
    assert all(p.expected > 0 for p in report.partitions), report.table()
    assert "topology grew" in pipeline.nodes[1].log_text() + pipeline.nodes[3].log_text()


def test_a_new_topic_matching_the_pattern_is_landed(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    prefix = unique("pat")
    first, second = f"{prefix}.a", f"{prefix}.b"
    create_topic(kafka.bootstrap, first, 4)
    create_topic(kafka.bootstrap, f"{prefix}-other", 2)  # does not match: never landed
    produce(kafka.bootstrap, f"{prefix}-other", [b"x"] * 10)
    p = Pipeline(bootstrap=kafka.bootstrap, zk=zookeeper.hosts, topic=f"re:{prefix}\\..*", pipeline=prefix, base=tmp_path)
    producers: list[ContinuousProducer] = []
    try:
        producers.append(ContinuousProducer(kafka.bootstrap, first, 800, 4).start())
        for node_id in (1, 2):
            p.launch(node_id, *FAST_TOPOLOGY)
        p.wait_until(lambda: bool(rows_of(p.output, first)), 60, "the first topic landed")
        create_topic(kafka.bootstrap, second, 3)
        producers.append(ContinuousProducer(kafka.bootstrap, second, 800, 3).start())
        p.wait_until(lambda: bool(rows_of(p.output, second)), 60, "the new matching topic landed")
        for producer in producers:
            producer.stop()
            assert producer.failed == 0
        for topic in (first, second):
            assert_exact(wait_caught_up(kafka.bootstrap, topic, p.output, 90), p)
        assert not rows_of(p.output, f"{prefix}-other")
        audit = subprocess.run(
            [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--bootstrap", kafka.bootstrap, "--output", p.output,
             "--topic", f"re:{prefix}\\..*", "--json"], capture_output=True, text=True, timeout=120,
        )
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert sorted(r["topic"] for r in json.loads(audit.stdout)["topics"]) == [first, second]
    finally:
        for producer in producers:
            producer.stop()
        p.stop_all()


def test_startup_latest_is_pinned_once_for_every_node(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """startup-mode=latest resolved once: records written before the pipeline started are never
    landed, every record after the pin is, even by nodes that start (or take over) later."""
    topic = unique("latest")
    create_topic(kafka.bootstrap, topic, 4)
    produce(kafka.bootstrap, topic, [b"before-%d" % i for i in range(400)])
    p = Pipeline(bootstrap=kafka.bootstrap, zk=zookeeper.hosts, topic=topic, pipeline=topic, base=tmp_path)
    try:
        p.launch(1, "--startup-mode", "latest")
        p.wait_until(lambda: "start position pinned" in p.nodes[1].log_text(), 60, "the start pinned")
        produce(kafka.bootstrap, topic, [b"after-%d" % i for i in range(400)])
        p.launch(2, "--startup-mode", "latest")
        p.wait_until(lambda: sum(map(len, rows_of(p.output, topic).values())) >= 400, 60, "the later records landed")
        p.nodes[1].kill()  # node 2 takes node 1's partitions from the manifest, never from "latest" again
        produce(kafka.bootstrap, topic, [b"late-%d" % i for i in range(400)])
        p.wait_until(lambda: sum(map(len, rows_of(p.output, topic).values())) >= 800, 90, "every later record landed")
        rows = rows_of(p.output, topic)
        assert sorted(rows) == [0, 1, 2, 3]
        for partition, offsets in rows.items():
            assert offsets == list(range(100, 300)), (partition, offsets[:5], len(offsets))
        assert "start position pinned" not in p.nodes[2].log_text()
    finally:
        p.stop_all()


def test_a_recreated_topic_stops_the_node_loudly(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("recreated")
    create_topic(kafka.bootstrap, topic, 2)
    produce(kafka.bootstrap, topic, [b"x"] * 100)
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=str(tmp_path / "out"), zk=None,
                              pipeline=topic, log_dir=tmp_path / "logs", extra=FAST_TOPOLOGY)
    try:
        wait_for_node(node, lambda: bool(rows_of(str(tmp_path / "out"), topic)), 60)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.delete_topics([topic])[topic].result(30)

        def recreated() -> bool:  # the deletion may take a moment to settle before the name can be reused
            try:
                create_topic(kafka.bootstrap, topic, 2)
                return True
            except Exception:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS while the deletion completes
                return False

        wait_until(recreated, 30, f"topic {topic} re-created", interval=0.5)
        assert node.wait(60) != 0
        # re-created (a new topic id) or, if the gap outlasted 3 reads, deleted: both stop the node
        assert "was deleted" in node.log_text(), node.log_text()[-3000:]
    finally:
        node.stop()


def test_embedded_node_lands_partitions_added_while_it_runs(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """One embedded node (no ZooKeeper): partitions added under load land exactly once too."""
    topic = unique("grow-embedded")
    create_topic(kafka.bootstrap, topic, 3)
    producer = ContinuousProducer(kafka.bootstrap, topic, 1000, 3).start()
    output = str(tmp_path / "out")
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None,
                              pipeline=topic, log_dir=tmp_path / "logs", extra=FAST_TOPOLOGY)
    try:
        wait_for_node(node, lambda: bool(rows_of(output, topic)), 60)
        add_partitions(kafka.bootstrap, topic, 5)
        producer.partitions = 5
        wait_for_node(node, lambda: len(rows_of(output, topic)) == 5, 60)
        producer.stop()
        assert producer.failed == 0
        report = wait_caught_up(kafka.bootstrap, topic, output, 60)
        assert report.ok and report.missing == 0 and report.duplicated == 0, report.table()
        assert len(report.partitions) == 5 and all(p.expected > 0 for p in report.partitions), report.table()
    finally:
        producer.stop()
        node.stop()


def test_a_pattern_that_matches_nothing_yet_lands_topics_created_later(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Nodes started before any matching topic exists: they join, ack empty epochs, and land the
    first matching topic from its first offset once it appears."""
    prefix = unique("empty")
    topic = f"{prefix}.a"
    p = Pipeline(bootstrap=kafka.bootstrap, zk=zookeeper.hosts, topic=f"re:{prefix}\\..*", pipeline=prefix, base=tmp_path)
    try:
        for node_id in (1, 2):
            p.launch(node_id, *FAST_TOPOLOGY)
        p.wait_until(lambda: "start position pinned for 0 partition(s)" in p.nodes[1].log_text()
                     + p.nodes[2].log_text(), 60, "an empty start pinned")
        create_topic(kafka.bootstrap, topic, 3)
        produce(kafka.bootstrap, topic, [b"r-%d" % i for i in range(600)])
        p.wait_until(lambda: sum(map(len, rows_of(p.output, topic).values())) >= 600, 90, "the new topic landed")
        assert_exact(wait_caught_up(kafka.bootstrap, topic, p.output, 60), p)
    finally:
        p.stop_all()
