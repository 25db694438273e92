"""A node's /readyz and /healthz through `laminar-kafka run` on real Kafka and ZooKeeper: not ready
while it starts, then ready; not ready from its planned leave (SIGTERM) until it exits.

The ZooKeeper partition (a node cut from ZooKeeper turns unhealthy, then healthy again) is a fault
test: tests/faults/cluster/test_probes_zookeeper_cut.py."""
from __future__ import annotations

import logging
import socket

import pytest

from tests.integration.cluster.harness import Pipeline, scrape
from tests.integration.cluster.probes import ProbeLog, ask

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

logger = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records_in(body: str) -> float:
    """``laminar_records_in_total`` of a /metrics page (0 when absent)."""
    for line in body.splitlines():
        if line.startswith("laminar_records_in_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_readyz_is_503_while_starting_200_once_reading_and_503_from_the_planned_leave(
    pipeline: Pipeline,
) -> None:
    pipeline.produce()
    pipeline.launch(1)
    port = free_port()
    node = pipeline.launch(2, "--metrics-port", str(port))
    ready = ProbeLog(node, "127.0.0.1", port, "/readyz")
    first = ready.poll_until_answered(60, interval=0.02)  # the server is up before the node joined
    assert first.status == 503 and first.body.startswith(("starting", "joined", "assignment version")), first
    ready.poll_until(200, 60)
    assert ready.answers[-1].body.startswith("ready: assignment version"), ready.summary()
    assert ask("127.0.0.1", port, "/healthz") == (200, "ok")
    pipeline.wait_spread(2)
    ready.poll_until(200, 30)  # after the round that gave node 2 its share
    pipeline.wait_until(lambda: records_in(scrape(port)) > 0, 30, "node 2 reading")  # so its leave drains rows

    node.terminate()  # a planned leave: its vnodes drain to node 1, then it exits 0
    leaving = ready.poll_until(503, 30, interval=0.02)
    assert leaving.alive, "the node exited before /readyz said it was leaving"
    assert leaving.body.startswith(("leaving", "left the pipeline", "stopping")), leaving
    assert node.wait(60) == 0
    logger.info("node 2's /readyz answers, in order: %s", ready.summary())
    assert "planned leave complete" in node.log_text()
    assert "GET /" not in node.log_text()  # quiet: no line per request
