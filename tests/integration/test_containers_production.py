"""docker/compose.production.yaml for real, under faults: nodes that share nothing but Kafka,
ZooKeeper, the object store and the Iceberg catalog.

One project: a 3-server ZooKeeper ensemble, 3 KRaft brokers (3 replicas, min ISR 2), SeaweedFS, Iceberg's
REST catalog, the init and 3 replicas of the `node` service (`--node-id auto`, each with its own
anonymous volume only, landing into Iceberg on S3). A producer on the host writes into the brokers'
published listeners through each phase, while the test applies, in sequence:

1. SIGKILL of one node container: the survivors own every vnode; started again, it takes its old id back
   (the token in its state-dir);
2. one broker stopped (the lake keeps advancing without it), then started again (its replicas back in sync);
3. the catalog container restarted while epochs commit (the lake advances past it, no node restarts);
4. one node container cut off its network past the ZooKeeper session timeout (the others own every
   vnode), then connected again (it rejoins with its id);
5. the node service scaled 3 -> 5 -> 2 (five ids; three planned leaves).

Each phase ends with the producer paused and the lake caught up, checked twice and independently: the
table read with pyiceberg through the REST catalog from the host (every acknowledged record once: row
count and unique (partition, offset) per partition equal to the high watermarks), and `laminar-kafka
verify` (0 missing, 0 duplicated, its expected count equal to the producer's acknowledgements). Every
wait is on an event: the pipeline's status (`laminar-kafka status --json` in a node container), the
nodes' /metrics (at their container IPs), the table's snapshots, the brokers' ISRs. `down -v` leaves
no container, network or volume behind, anonymous volumes included.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from laminar_kafka.devstack.containers.compose import (
    PRODUCTION_COMPOSE_FILE,
    ComposeProject,
    HealthcheckDriver,
    anonymous_volumes,
    health,
)
from laminar_kafka.devstack.containers.engine import ContainerError
from laminar_kafka.devstack.containers.images import ImageBuilder
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.objectstore.access import DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import container_engine

pytestmark = [pytest.mark.integration, pytest.mark.containers, pytest.mark.timeout(1200)]

PARTITIONS = 8
VNODES = 256
TOPIC = PIPELINE = "orders"
OUTPUT = "s3://lake/orders"
TABLE = ("orders", "orders")
RATE = 300  # records per second from the host
INSIDE_BOOTSTRAP = "kafka1:9092,kafka2:9092,kafka3:9092"
INSIDE_ZK = "zk1:2181,zk2:2181,zk3:2181"
SESSION_TIMEOUT_S = 6.0  # the nodes' session-timeout-ms default
_METRIC = re.compile(r'^(laminar_[a-z_]+)\{node="(\d+)"(?:,state="([A-Z_]+)")?\}\s+([0-9.e+-]+)$', re.MULTILINE)


@dataclass(frozen=True)
class NodeView:
    """What a node container's /metrics says: its id, partitions read and session state."""

    node_id: int
    owned: int
    connected: bool


@dataclass
class Production:
    """The running project and the host's ways into it."""

    client: Any
    project: ComposeProject
    kafka_ports: tuple[int, int, int]
    s3_port: int
    catalog_port: int
    #: anonymous volumes any node container had (all gone after `down -v`)
    volumes: set[str] = field(default_factory=set)
    #: records acknowledged by the phases' producers
    acked: int = 0
    #: node containers cut off the network now (not asked for status, not scraped)
    cut_off: set[str] = field(default_factory=set)
    timeline: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_ports)

    def s3_env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}", "AWS_ACCESS_KEY_ID": DEV_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": DEV_SECRET_ACCESS_KEY, "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def note(self, line: str) -> None:
        self.timeline.append(line)
        print(f"production test: {line}", flush=True)

    def wait(self, predicate: Callable[[], object], timeout: float, what: str, interval: float = 1.0) -> float:
        """`wait_until`, failing with the project's recent logs."""
        try:
            return wait_until(predicate, timeout, what, interval=interval)
        except WaitTimeout as exc:
            raise AssertionError(f"{exc}; logs:\n{self.project.logs(tail=40)}") from exc

    # ---- the nodes ----

    def nodes(self) -> list[Any]:
        """The running node containers, by replica number; their anonymous volumes are remembered."""
        running = [c for c in self.project.service_containers(self.client, "node") if c.status == "running"]
        for container in running:
            self.volumes.update(anonymous_volumes(container))
        return running

    def address(self, container: Any) -> str | None:
        container.reload()
        network = container.attrs["NetworkSettings"]["Networks"].get(f"{self.project.name}_default") or {}
        return network.get("IPAddress") or None

    def view(self, container: Any) -> NodeView | None:
        """The node's /metrics at its container IP (None: no answer, or no id yet)."""
        address = self.address(container)
        if address is None:
            return None
        try:
            with urllib.request.urlopen(f"http://{address}:9100/metrics", timeout=3) as response:
                text = response.read().decode()
        except OSError:
            return None
        values = {(name, state): float(value) for name, _node, state, value in _METRIC.findall(text)}
        ids = {int(node) for _name, node, _state, _value in _METRIC.findall(text)}
        if len(ids) != 1:
            return None
        return NodeView(ids.pop(), int(values.get(("laminar_owned_partitions", ""), 0)),
                        values.get(("laminar_session_state", "CONNECTED"), 0) == 1)

    def status(self) -> dict | None:
        """`laminar-kafka status --json` run in a connected node container (None: none answered)."""
        for container in self.nodes():
            if container.id in self.cut_off:
                continue
            number = container.labels["com.docker.compose.container-number"]
            result = self.project.run("exec", "-T", "--index", number, "node", "laminar-kafka", "status",
                                      "--bootstrap", INSIDE_BOOTSTRAP, "--zk", INSIDE_ZK, "--topic", TOPIC,
                                      "--pipeline", PIPELINE, "--json", timeout=60, check=False)
            with contextlib.suppress(ValueError):
                return json.loads(result.stdout)
        return None

    def settled(self, count: int) -> dict[int, str] | None:
        """When the pipeline runs `count` live members, each holding vnodes, every vnode assigned, no round
        running, and they are exactly the ids the `count` connected node containers report: {node id:
        container id}. Otherwise None."""
        status = self.status()
        if status is None or status.get("round"):
            return None
        members = [n for n in status["nodes"] if n["live"] and not n["leaving"]]
        if len(status["nodes"]) != count or len(members) != count or sum(n["vnodes"] for n in members) != VNODES \
                or any(n["vnodes"] == 0 for n in members):
            return None
        by_id: dict[int, str] = {}
        for container in self.nodes():
            if container.id in self.cut_off:
                continue
            view = self.view(container)
            if view is None or not view.connected:
                return None
            by_id[view.node_id] = container.id
        if set(by_id) != {n["node_id"] for n in members} or len(by_id) != count:
            return None
        return by_id

    def wait_settled(self, count: int, timeout: float, what: str) -> dict[int, str]:
        found: dict[str, dict[int, str]] = {}

        def check() -> bool:
            members = self.settled(count)
            if members is not None:
                found["members"] = members
            return members is not None

        self.wait(check, timeout, what, interval=2.0)
        return found["members"]

    # ---- the data ----

    @contextlib.contextmanager
    def producing(self) -> Iterator[ContinuousProducer]:
        """A producer on the host for one phase; on exit it delivers what it queued (none may fail)."""
        producer = ContinuousProducer(self.bootstrap, TOPIC, RATE, PARTITIONS).start()
        try:
            yield producer
        finally:
            producer.stop()
            self.acked += producer.acked
        assert producer.failed == 0, f"{producer.failed} records failed to produce"

    def catalog(self) -> Any:
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog("independent", uri=f"http://127.0.0.1:{self.catalog_port}", **{
            "s3.endpoint": f"http://127.0.0.1:{self.s3_port}", "s3.region": "us-east-1",
            "s3.access-key-id": DEV_ACCESS_KEY_ID, "s3.secret-access-key": DEV_SECRET_ACCESS_KEY})

    def committed_epoch(self) -> int | None:
        """The newest epoch the table's snapshots record (None: the catalog does not answer)."""
        try:
            snapshot = self.catalog().load_table(TABLE).current_snapshot()
        except Exception:  # noqa: BLE001 - restarting, or the table is not created yet
            return None
        return int((snapshot.summary or {}).get("laminar.epoch", 0)) if snapshot is not None else 0

    def high_watermarks(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "production-test-audit"})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                    for p in range(PARTITIONS)}
        finally:
            consumer.close()

    def total_records(self) -> int | None:
        try:
            snapshot = self.catalog().load_table(TABLE).current_snapshot()
        except Exception:  # noqa: BLE001 - the catalog restarting
            return None
        return int(snapshot.summary["total-records"]) if snapshot is not None and snapshot.summary else 0

    def audit(self, phase: str, timeout: float = 240.0) -> None:
        """With the producer paused: wait until the table holds every record in Kafka, then read it
        whole through the REST catalog (pyiceberg) and run `laminar-kafka verify`: each record once."""
        started = time.monotonic()
        watermarks = self.high_watermarks()
        expected = sum(watermarks.values())
        assert expected == self.acked, f"Kafka holds {expected} records, the producers had {self.acked} acknowledged"

        def landed() -> bool:
            total = self.total_records()
            assert total is None or total <= expected, f"the table has {total} rows, Kafka {expected}: duplicates"
            return total == expected

        self.wait(landed, timeout, f"{phase}: the table's total-records reaching {expected}")
        rows = self.catalog().load_table(TABLE).scan(selected_fields=("_partition", "_offset")).to_arrow()
        keys = pc.add(pc.multiply(rows.column("_partition").cast(pa.int64()), 1 << 40), rows.column("_offset"))
        assert rows.num_rows == expected and len(pc.unique(keys)) == expected, (rows.num_rows, len(pc.unique(keys)))
        per_partition = rows.group_by("_partition").aggregate([("_offset", "count"), ("_offset", "max")]).to_pylist()
        assert {r["_partition"]: (r["_offset_count"], r["_offset_max"] + 1) for r in per_partition} == \
            {p: (hw, hw) for p, hw in watermarks.items() if hw}
        result = subprocess.run(
            [sys.executable, "-m", "laminar_kafka.cli.main", "verify", "--output", OUTPUT, "--bootstrap", self.bootstrap,
             "--topic", TOPIC, "--table-format", "iceberg", "--pipeline", PIPELINE,
             "--catalog-uri", f"http://127.0.0.1:{self.catalog_port}", "--json"],
            capture_output=True, text=True, timeout=180, env={**os.environ, **self.s3_env()})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        report = json.loads(result.stdout)
        assert report["missing"] == 0 and report["duplicated"] == 0, report
        assert sum(p["expected"] for p in report["partitions"]) == expected
        self.note(f"{phase}: {expected} records, each once in the table (pyiceberg) and by verify, "
                  f"audited in {time.monotonic() - started:.1f} s")


def node_restarts(production: Production) -> dict[str, int]:
    return {c.name: int(c.attrs.get("RestartCount", 0)) for c in production.nodes()}


@pytest.fixture
def production(unique: Callable[[str], str], tmp_path: Path) -> Iterator[Production]:
    client = container_engine(compose=True)
    ImageBuilder(client, log=lambda line: None).build(["kafka", "zookeeper", "node", "seaweedfs", "rest-catalog"])
    kafka_ports = (free_port(), free_port(), free_port())
    s3_port, catalog_port = free_port(), free_port()
    env = {**{f"LAMINAR_KAFKA{n}_HOST_PORT": str(port) for n, port in enumerate(kafka_ports, 1)},
           "LAMINAR_S3_HOST_PORT": str(s3_port), "LAMINAR_CATALOG_HOST_PORT": str(catalog_port)}
    project = ComposeProject(unique("laminar-prod").lower().replace(".", "-"), env, PRODUCTION_COMPOSE_FILE)
    cluster = Production(client, project, kafka_ports, s3_port, catalog_port)
    started = time.monotonic()
    try:
        with HealthcheckDriver(client, project):
            try:
                project.up(timeout=600)
            except ContainerError as exc:
                raise AssertionError(f"{exc}\n{project.logs(tail=40)}") from exc
            cluster.note(f"up in {time.monotonic() - started:.1f} s")
            yield cluster
    finally:
        cluster.nodes()
        (tmp_path / "compose.log").write_text(project.logs(tail=100_000))  # kept by pytest for a failure's inquest
        project.down()
        cluster.note(f"up to down in {time.monotonic() - started:.1f} s")
    left = project.leftovers(client)
    volumes = {v.name for v in client.volumes.list()}
    assert left == [] and not cluster.volumes & volumes, (left, cluster.volumes & volumes)


def test_production_compose_lands_exactly_once_through_node_broker_catalog_and_network_faults(
    production: Production,
) -> None:
    p = production
    members = p.wait_settled(3, 240, "three nodes with --node-id auto owning every vnode")
    p.note(f"three nodes settled: ids {sorted(members)}")

    # 1. a node container SIGKILLed, then started again: its partitions move, it takes its id back
    with p.producing():
        p.wait(lambda: (p.committed_epoch() or 0) >= 2, 120, "epochs committed into the table")
        victim = p.nodes()[1]
        victim_id = next(i for i, c in members.items() if c == victim.id)
        victim.kill()  # SIGKILL: no planned leave
        p.wait(lambda: p.client.containers.get(victim.id).status != "running", 30, "the killed container exited")
        gone = p.wait_settled(2, 120, f"the survivors owning every vnode without node {victim_id}")
        assert victim_id not in gone
        victim.start()
        members = p.wait_settled(3, 180, f"node {victim_id} back in the pipeline")
        assert members.get(victim_id) == victim.id, f"the restarted container took another id: {members}"
    p.audit("node killed and restarted")

    # 2. a broker stopped while producing (the lake advances without it), then started again
    with p.producing():
        before = p.committed_epoch() or 0
        p.project.stop("kafka2", timeout=20)
        p.wait(lambda: (p.committed_epoch() or 0) >= before + 3, 180, "three epochs committed with kafka2 stopped")
        p.project.start("kafka2")
        kafka2 = p.project.service_containers(p.client, "kafka2")[0]
        p.wait(lambda: health(kafka2) == "healthy", 180, "kafka2 healthy again")
        p.wait(lambda: in_sync(p.bootstrap) == PARTITIONS * 3, 180, "every replica back in sync")
    p.audit("broker stopped and started")

    # 3. the catalog restarted mid-epoch: commits fail while it is away, none is lost or doubled
    restarts = node_restarts(p)
    with p.producing():
        before = p.committed_epoch() or 0
        p.wait(lambda: (p.committed_epoch() or 0) > before, 60, "an epoch being committed")
        restarted_at = p.committed_epoch() or 0
        p.project.restart("catalog", timeout=10)
        catalog = p.project.service_containers(p.client, "catalog")[0]
        p.wait(lambda: health(catalog) == "healthy", 120, "the catalog healthy again")
        p.wait(lambda: (p.committed_epoch() or 0) >= restarted_at + 3, 180, "three epochs committed after the restart")
    assert node_restarts(p) == restarts, "a node container restarted when the catalog did"
    waited = p.project.logs("node", tail=100_000).count("iceberg catalog unavailable while publishing")
    p.note(f"catalog restarted at epoch {restarted_at}; the nodes rode it out ({waited} publish(es) waited for it)")
    p.audit("catalog restarted")

    # 4. a node cut off its network past the session timeout, then connected again
    with p.producing():
        victim = p.nodes()[0]
        victim_id = next(i for i, c in members.items() if c == victim.id)
        address = p.project.disconnect(p.client, victim)
        p.cut_off.add(victim.id)
        cut_at = time.monotonic()
        gone = p.wait_settled(2, 120, f"the others owning every vnode without the cut-off node {victim_id}")
        away = time.monotonic() - cut_at  # its session expired (the others shed it) within this
        assert victim_id not in gone
        # the fault's length, not evidence: the partition outlasts the session timeout twice over
        time.sleep(max(0.0, 2 * SESSION_TIMEOUT_S - (time.monotonic() - cut_at)))
        p.project.connect(p.client, victim, address)  # the partition heals: same address
        p.cut_off.discard(victim.id)
        members = p.wait_settled(3, 180, f"node {victim_id} rejoining after its network came back")
        assert members.get(victim_id) == victim.id, f"the reconnected container took another id: {members}"
        p.note(f"node {victim_id} cut off for {time.monotonic() - cut_at:.1f} s (its session expired after "
               f"{away:.1f} s at most), rejoined with its id")
    p.audit("node partitioned and reconnected")

    # 5. scale 3 -> 5 -> 2
    with p.producing():
        p.project.scale(p.client, "node", 5)
        members = p.wait_settled(5, 240, "five nodes sharing the vnodes")
        p.note(f"scaled to 5: ids {sorted(members)}")
    p.audit("scaled to 5")
    with p.producing():
        removed = p.project.scale(p.client, "node", 2)
        members = p.wait_settled(2, 240, "two nodes owning every vnode after three planned leaves")
        p.note(f"scaled to 2: ids {sorted(members)}; {len(removed)} anonymous volumes of removed replicas removed")
    assert len(removed) == 3
    p.audit("scaled to 2")

    # the documented audit, inside a node container, agrees
    result = p.project.run("exec", "-T", "--index", p.nodes()[0].labels["com.docker.compose.container-number"],
                           "node", "laminar-kafka", "verify", "--output", OUTPUT, "--bootstrap", INSIDE_BOOTSTRAP,
                           "--topic", TOPIC, "--json", timeout=180, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert json.loads(result.stdout)["duplicated"] == 0
    for container in p.nodes():
        p.wait(lambda container=container: health(container) == "healthy", 60, f"{container.name} healthy")
    p.note(f"{p.acked} records in all; node restarts {node_restarts(p)}")


def in_sync(bootstrap: str) -> int:
    """In-sync replicas summed over the topic's partitions (3 per partition when every broker is in)."""
    from confluent_kafka.admin import AdminClient

    try:
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=5).topics
    except Exception:  # noqa: BLE001 - a broker still starting
        return 0
    return sum(len(partition.isrs) for partition in topics[TOPIC].partitions.values())
