"""``laminar-kafka run --node-id auto``: two processes on one pipeline choose their ids themselves and
land a topic exactly once; a restarted node keeps its id; a host name's ordinal that a live node of
another identity holds is refused in one line, a second process of one identity after the twin wait,
naming ``--node-id auto``; an embedded node is node 1. Each process gets its own host name (the test replaces
``socket.gethostname`` in it: one machine plays several hosts)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.devstack.processes import NodeProcess, node_environment
from tests.integration.cluster.harness import Pipeline, assert_exact

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: ``python -c HOST_RUN <host> <flags>``: ``laminar-kafka run <flags>`` on a host named <host>
HOST_RUN = ("import socket, sys; host = sys.argv.pop(1); socket.gethostname = lambda: host; "
            "from laminar_kafka.cli.main import main; sys.exit(main(['run', *sys.argv[1:]]))")
CHOSEN = re.compile(r"node id (\d+) \(node-id auto: (.*)\)$", re.MULTILINE)


def host_command(pipeline: Pipeline, host: str, *more: str) -> list[str]:
    flags = ["--bootstrap", pipeline.bootstrap, "--topic", pipeline.topic, "--output", pipeline.output,
             "--pipeline", pipeline.pipeline, "--zk", str(pipeline.zk), "--node-id", "auto", *pipeline.extra, *more]
    return [sys.executable, "-c", HOST_RUN, host, *flags]


def launch_on(pipeline: Pipeline, label: int, host: str, *more: str) -> NodeProcess:
    """Start a node on host ``host``; ``label`` names it in the pipeline's bookkeeping (its id is its own)."""
    node = NodeProcess(label, host_command(pipeline, host, *more), pipeline.base / "logs" / f"{host}.log")
    node.start()
    pipeline.nodes[label] = node
    return node


def chosen(pipeline: Pipeline, node: NodeProcess, starts: int = 1) -> list[tuple[int, str]]:
    """The ids the node's log says it took (one per start), once it logged ``starts`` of them."""
    pipeline.wait_until(lambda: len(CHOSEN.findall(node.log_text())) >= starts, 60, f"{starts} id choices logged")
    return [(int(n), why) for n, why in CHOSEN.findall(node.log_text())]


def test_two_auto_nodes_land_a_topic_exactly_once_and_a_restart_keeps_its_id(
    pipeline: Pipeline, tmp_path: Path,
) -> None:
    pipeline.produce(rate=1000)
    alpha = launch_on(pipeline, 1, "alpha")
    assert chosen(pipeline, alpha) == [(1, "host name alpha has no ordinal; the smallest free id, claimed for host:alpha")]
    beta_state = tmp_path / "beta-state"
    beta = launch_on(pipeline, 2, "beta", "--state-dir", str(beta_state))
    [(beta_id, why)] = chosen(pipeline, beta)
    assert beta_id == 2 and why.startswith("host name beta has no ordinal; the smallest free id, claimed for dir:")
    record = json.loads((beta_state / f"node-id-{pipeline.pipeline}.json").read_text())
    assert record["node_id"] == 2 and record["pipeline"] == pipeline.pipeline
    pipeline.wait_spread(2)
    assert sorted(n.node_id for n in pipeline.status().nodes if n.live) == [1, 2]

    beta.terminate()  # a planned leave, then the same node again (from its state directory)
    assert beta.wait(60) == 0
    beta.start()
    assert chosen(pipeline, beta, starts=2)[1] == (
        2, f"host name beta has no ordinal; the id ZooKeeper holds for {record['identity']} (state file "
           f"{beta_state / f'node-id-{pipeline.pipeline}.json'}) since an earlier start")
    pipeline.wait_spread(2)

    # a second process on host alpha, without a state-dir: the same identity, so the same id; the
    # coordinator waits out what may be a previous run's session, then refuses it, naming node-id auto
    twin = subprocess.Popen(host_command(pipeline, "alpha", "--log-level", "warning"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=node_environment())
    # a host whose ordinal gives id 1, which the live node on host alpha holds: refused at once, one line
    refused = subprocess.run(host_command(pipeline, "other-0", "--log-level", "warning"), capture_output=True,
                             text=True, timeout=90, env=node_environment())
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and lines == [
        "error: --node-id auto: host name other-0 has ordinal 0: id = ordinal + 1, but node id 1 is held by a live "
        "node of another identity (host:alpha on host alpha): stop that node; or give this node an explicit --node-id"
    ], refused.stderr[-3000:]
    _, twin_err = twin.communicate(timeout=120)
    last = [line for line in twin_err.splitlines() if line.strip()][-1]
    assert twin.returncode == 1 and last.startswith("error: cannot join the pipeline: node id 1 is held by a live "
                                                    "session"), twin_err[-3000:]
    assert last.endswith("another process runs as node 1 (chosen by --node-id auto: host name alpha has no ordinal; "
                         "the id ZooKeeper holds for host:alpha since an earlier start; two nodes on one host need a "
                         "state-dir each); stop it or choose another --node-id"), last

    assert_exact(pipeline.finish(), pipeline)
    assert alpha.alive() and beta.alive()


def test_an_embedded_auto_node_is_node_1(embedded: Pipeline) -> None:
    embedded.produce(rate=1000)
    node = NodeProcess(1, [sys.executable, "-c", HOST_RUN, "lake-5", "--bootstrap", embedded.bootstrap, "--topic",
                           embedded.topic, "--output", embedded.output, "--pipeline", embedded.pipeline, "--node-id",
                           "auto", "--checkpoint-interval-ms", "300"], embedded.base / "logs" / "lake-5.log")
    node.start()
    embedded.nodes[1] = node
    assert chosen(embedded, node) == [(1, "embedded mode has one node")]
    assert_exact(embedded.finish(), embedded)
