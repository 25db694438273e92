"""A node cut from ZooKeeper turns /healthz 503 once its session has been away for the session
timeout, and 200 again after the network healed and it rejoined (`laminar-kafka run` in a network
namespace of its own, cut by the relay of laminar_kafka.devstack.netfaults, as the chaos campaign's
`net-zk` fault does; Kafka stays reachable).

Needs root and network namespaces: where they are missing this FAILS with the reason (CI must prove
the probes), unless LAMINAR_ALLOW_NO_NETNS=1 is set, which turns that into a skip.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator

import pytest

from laminar_kafka.devstack.netfaults.faults import Endpoints, NodeNetwork, network_faults_available, unused_index
from laminar_kafka.devstack.processes import NodeProcess, node_command
from tests.integration.cluster.harness import Pipeline
from tests.integration.cluster.probes import ProbeLog

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

logger = logging.getLogger(__name__)
PREFIX = "lkp-"  # this module's own namespaces
SESSION_TIMEOUT_S = 4.0
METRICS_PORT = 9466  # inside the node's own namespace: no other process binds there


@pytest.fixture
def network(pipeline: Pipeline) -> Iterator[NodeNetwork]:
    available, reason = network_faults_available()
    if not available:
        if os.environ.get("LAMINAR_ALLOW_NO_NETNS") == "1":
            pytest.skip(f"network faults unavailable (LAMINAR_ALLOW_NO_NETNS=1): {reason}")
        pytest.fail(f"network faults unavailable: {reason} (set LAMINAR_ALLOW_NO_NETNS=1 to allow skipping)")
    try:
        endpoints = Endpoints.from_hosts(pipeline.bootstrap, str(pipeline.zk))
    except ValueError as exc:
        pytest.skip(f"the relay needs servers on 127.0.0.1: {exc}")
    net = NodeNetwork(f"pr{os.getpid()}", endpoints, unused_index(200), prefix=PREFIX)
    net.start()
    try:
        yield net
    finally:
        for node in pipeline.nodes.values():  # before its network goes
            node.stop()
        net.close()


def test_a_node_cut_from_zookeeper_turns_unhealthy_within_the_timeout_and_healthy_after_the_heal(
    pipeline: Pipeline, network: NodeNetwork,
) -> None:
    pipeline.produce()
    flags = ["--bootstrap", pipeline.bootstrap, "--topic", pipeline.topic, "--output", pipeline.output,
             "--pipeline", pipeline.pipeline, "--node-id", "1", "--zk", str(pipeline.zk),
             "--checkpoint-interval-ms", "500", "--session-timeout-ms", str(int(SESSION_TIMEOUT_S * 1000)),
             "--metrics-port", str(METRICS_PORT)]
    node = NodeProcess(1, network.wrap(node_command(flags)), pipeline.base / "logs" / "node-1.log")
    node.start()
    pipeline.nodes[1] = node
    health = ProbeLog(node, network.node_address, METRICS_PORT, "/healthz")
    ready = ProbeLog(node, network.node_address, METRICS_PORT, "/readyz")
    ready.poll_until(200, 90)
    assert health.poll().status == 200

    cut_at = time.monotonic()
    network.cut("zookeeper")  # blackhole: the session hears nothing and expires on the server
    unhealthy = health.poll_until(503, 2 * SESSION_TIMEOUT_S + 3)
    to_unhealthy = unhealthy.at - cut_at
    # the client notices the silence after 1/3 to 2/3 of the timeout; then a whole timeout away
    assert SESSION_TIMEOUT_S <= to_unhealthy, (to_unhealthy, health.summary())
    assert unhealthy.body.startswith("zookeeper session suspended for"), unhealthy
    assert f"(timeout {SESSION_TIMEOUT_S:g} s)" in unhealthy.body
    not_ready = ready.poll()
    assert not_ready.status == 503 and not_ready.body.startswith("not healthy: zookeeper session"), not_ready
    assert all(a.status == 200 for a in health.answers if a.at < cut_at + SESSION_TIMEOUT_S), health.summary()

    healed_at = time.monotonic()
    network.heal("zookeeper")  # the session expired meanwhile: LOST, then the node rejoins
    healthy = health.poll_until(200, 30)
    ready.poll_until(200, 60)
    logger.info("zookeeper cut: /healthz 503 %.1f s after the cut (session timeout %.0f s); 200 %.1f s after "
                "the heal", to_unhealthy, SESSION_TIMEOUT_S, healthy.at - healed_at)
    assert node.alive()
    assert "rejoin" in node.log_text()  # it came back on a new session
