"""A pipeline of `laminar-kafka run` processes on the session's real Kafka and ZooKeeper."""
from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.cluster.ops.status import PipelineStatus, collect_status
from laminar_kafka.cluster.ops.verify import VerifyReport
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import KafkaHandle, ZooKeeperHandle

PARTITIONS = 8


@dataclass
class Pipeline:
    bootstrap: str
    zk: str | None
    topic: str
    pipeline: str
    base: Path
    nodes: dict[int, NodeProcess] = field(default_factory=dict)
    producer: ContinuousProducer | None = None
    extra: tuple[str, ...] = ("--checkpoint-interval-ms", "500", "--session-timeout-ms", "4000",
                              "--drain-timeout-ms", "15000")
    table_format: TableFormat = TableFormat.PARQUET
    #: an Iceberg catalog other than the embedded one (an S3 output needs one)
    catalog_uri: str | None = None

    @property
    def lake(self) -> LakeTarget:
        iceberg = IcebergSettings(namespace=table_name_of(self.pipeline), catalog_uri=self.catalog_uri)
        return LakeTarget(self.output, self.table_format, self.pipeline,
                          iceberg if self.table_format is TableFormat.ICEBERG else None)

    @property
    def output(self) -> str:
        return str(self.base / "output")

    def launch(self, node_id: int, *more: str) -> NodeProcess:
        node = NodeProcess.launch(node_id, bootstrap=self.bootstrap, topic=self.topic, output=self.output, zk=self.zk,
                                  pipeline=self.pipeline, log_dir=self.base / "logs",
                                  extra=(*self.extra, "--table-format", self.table_format.value,
                                         *(("--catalog-uri", self.catalog_uri) if self.catalog_uri else ()), *more))
        self.nodes[node_id] = node
        return node

    def produce(self, rate: int = 2000) -> ContinuousProducer:
        self.producer = ContinuousProducer(self.bootstrap, self.topic, rate, PARTITIONS).start()
        return self.producer

    def status(self) -> PipelineStatus:
        return collect_status(bootstrap=self.bootstrap, topics=[self.topic], zk=self.zk, state_dir=None,
                              pipeline=self.pipeline, source_identity="kafka")

    def partitions_per_live_node(self) -> dict[int, int]:
        try:
            return {n.node_id: len(n.partitions) for n in self.status().nodes if n.live}
        except Exception:  # noqa: BLE001 - the pipeline may not exist yet
            return {}

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        """`laminar_kafka.devstack.waiting.wait_until`, failing at once when a node exits abnormally (not 0, not
        SIGKILLed by the test), and with every node's log tail on timeout."""

        def holds() -> bool:
            for node in self.nodes.values():
                if node.process is not None and node.process.poll() not in (None, 0, -9):
                    raise AssertionError(f"node {node.node_id} exited {node.process.returncode}:\n{node.log_text()[-3000:]}")
            return predicate()

        try:
            return wait_until(holds, timeout, what)
        except WaitTimeout as exc:
            raise AssertionError(f"{exc}; logs:\n{self.tail_logs()}") from exc

    def wait_spread(self, live: int, timeout: float = 60.0) -> float:
        """Until `live` nodes own all partitions, spread as evenly as possible."""
        even = sorted([PARTITIONS // live + (1 if i < PARTITIONS % live else 0) for i in range(live)])
        return self.wait_until(lambda: sorted(self.partitions_per_live_node().values()) == even, timeout,
                               f"{live} nodes sharing {PARTITIONS} partitions")

    def finish(self, timeout: float = 90.0) -> VerifyReport:
        """Stop producing, wait until the output caught up, return the audit."""
        if self.producer is not None:
            self.producer.stop()
            assert self.producer.failed == 0
        return wait_caught_up(self.bootstrap, self.topic, self.output, timeout, lake=self.lake)

    def tail_logs(self) -> str:
        return "\n".join(f"--- node {n}\n{p.log_text()[-2000:]}" for n, p in self.nodes.items())

    def stop_all(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        for node in self.nodes.values():
            node.stop()


def make_pipeline(bootstrap: str, zk: str | None, name: str, base: Path) -> Pipeline:
    create_topic(bootstrap, name, PARTITIONS)
    return Pipeline(bootstrap=bootstrap, zk=zk, topic=name, pipeline=name, base=base)


def assert_exact(report: VerifyReport, pipeline: Pipeline) -> None:
    assert report.ok and report.missing == 0 and report.duplicated == 0, f"{report.table()}\n{pipeline.tail_logs()}"
    assert sum(p.expected for p in report.partitions) > 0


@pytest.fixture
def pipeline(kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str],
             tmp_path: Path) -> Iterator[Pipeline]:
    """A ZooKeeper-mode pipeline on a fresh 8-partition topic; every node is stopped afterwards."""
    p = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("e2e"), tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def iceberg_pipeline(kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str],
                     tmp_path: Path) -> Iterator[Pipeline]:
    """A ZooKeeper-mode pipeline landing into an Iceberg table (embedded SQLite catalog)."""
    p = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("ice"), tmp_path)
    p.table_format = TableFormat.ICEBERG
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def embedded(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> Iterator[Pipeline]:
    """An embedded (no ZooKeeper) pipeline on a fresh 8-partition topic."""
    p = make_pipeline(kafka.bootstrap, None, unique("embedded"), tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def scrape(port: int) -> str:
    """A node's ``/metrics`` page on ``port`` ('' while it does not answer)."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return ""
