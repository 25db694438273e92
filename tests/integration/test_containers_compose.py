"""docker/compose.yaml for real: ZooKeeper, Kafka, the topic init and three node containers.

Records flow from the host into the compose Kafka while one node container is SIGKILLed; the
survivors take its partitions over, and `laminar-kafka verify` (run inside a node container, on
the shared output volume) finds 0 missing and 0 duplicated. `down` leaves no container, volume or
network behind. The healthchecks are driven (podman has no systemd timers): `up` returns only once
Kafka and ZooKeeper are healthy (the nodes depend on `service_healthy`), and the surviving nodes
report healthy too.
"""
from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.request
from collections.abc import Callable

import pytest

from laminar_kafka.devstack.containers.compose import ComposeProject, HealthcheckDriver, health
from laminar_kafka.devstack.containers.images import ImageBuilder
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import container_engine

pytestmark = [pytest.mark.integration, pytest.mark.containers, pytest.mark.timeout(600)]

PARTITIONS = 8
_OWNED = re.compile(r'^laminar_owned_partitions\{[^}]*\}\s+([0-9.]+)', re.MULTILINE)


def owned_partitions(port: int) -> int | None:
    """Partitions a node reports it reads (its /metrics), or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            match = _OWNED.search(response.read().decode())
    except OSError:
        return None
    return int(float(match.group(1))) if match else 0


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, project: ComposeProject) -> float:
    """`laminar_kafka.devstack.waiting.wait_until` every 0.5 s, failing with the compose project's logs."""
    try:
        return wait_until(predicate, timeout, what, interval=0.5)
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}; logs:\n{project.logs()}") from exc


def verify(project: ComposeProject) -> tuple[int, dict]:
    result = project.exec("node1", "laminar-kafka", "verify", "--output", "/data/orders",
                          "--bootstrap", "kafka:9092", "--topic", "orders", "--json")
    try:
        return result.returncode, json.loads(result.stdout)
    except ValueError:
        return result.returncode, {"error": (result.stdout + result.stderr)[-500:]}


def test_compose_cluster_survives_a_node_kill_exactly_once(unique: Callable[[str], str]) -> None:
    client = container_engine(compose=True)
    ImageBuilder(client, log=lambda line: None).build(["kafka", "zookeeper", "node"])
    kafka_port = free_port()
    metrics = {n: free_port() for n in (1, 2, 3)}
    project = ComposeProject(
        name=unique("laminar-compose").lower().replace(".", "-"),
        env={"LAMINAR_KAFKA_HOST_PORT": str(kafka_port),
             **{f"LAMINAR_NODE{n}_METRICS_PORT": str(port) for n, port in metrics.items()}},
    )
    started = time.monotonic()
    try:
        with HealthcheckDriver(client, project) as driver:
            project.up()
            # `up` returns once the nodes are created, which waits for healthy servers (service_healthy)
            services = {c.labels.get("com.docker.compose.service"): c for c in project.containers(client)}
            assert health(services["kafka"]) == "healthy" and health(services["zookeeper"]) == "healthy"
            wait_for(lambda: all((owned_partitions(p) or 0) > 0 for p in metrics.values()), 180,
                     "three nodes each reading partitions", project)
            producer = ContinuousProducer(f"127.0.0.1:{kafka_port}", "orders", 400, PARTITIONS).start()
            try:
                wait_for(lambda: producer.acked > 2_000, 60, "2000 records produced", project)
                project.kill("node2")  # SIGKILL: no planned leave, its partitions restart from the manifest
                takeover = wait_for(lambda: owned_partitions(metrics[1]) is not None and owned_partitions(metrics[3]) is not None
                         and owned_partitions(metrics[1]) + owned_partitions(metrics[3]) == PARTITIONS,  # type: ignore[operator]
                         90, "the survivors owning every partition", project)
                time.sleep(3)
            finally:
                producer.stop()
            assert producer.failed == 0 and producer.acked > 2_000

            outcome: dict[str, tuple[int, dict]] = {}

            def verified() -> bool:
                outcome["last"] = verify(project)
                assert outcome["last"][1].get("duplicated", 0) == 0, outcome["last"][1]
                return outcome["last"][0] == 0

            with contextlib.suppress(WaitTimeout):
                wait_until(verified, 120, "verify passing", interval=2)
            code, report = outcome["last"]
            assert code == 0, f"{report}\n{project.logs()}"
            assert report["missing"] == 0 and report["duplicated"] == 0
            assert sum(p["expected"] for p in report["partitions"]) == producer.acked
            print(f"compose test: {producer.acked} records, node2 SIGKILLed, survivors owned its partitions "
                  f"after {takeover:.1f} s, verify: 0 missing, 0 duplicated")

            if driver.podman:  # the healthchecks were driven (`up` itself waited for healthy servers)
                wait_for(lambda: driver.runs > 0, 30, "healthchecks run", project)
            services = {c.labels.get("com.docker.compose.service"): c for c in project.containers(client)}
            assert health(services["kafka"]) == "healthy" and health(services["zookeeper"]) == "healthy"
            wait_for(lambda: health(services["node1"]) == health(services["node3"]) == "healthy", 60,
                     "the surviving nodes healthy (/metrics answers, ZooKeeper session CONNECTED)", project)
            assert services["topic-init"].attrs["State"]["ExitCode"] == 0
    finally:
        project.down()
        print(f"compose test: up to down in {time.monotonic() - started:.1f} s")
    assert project.leftovers(client) == []
