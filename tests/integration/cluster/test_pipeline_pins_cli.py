"""A node started with a setting that defines the pipeline's data other than the one pinned at the
pipeline's first start exits 2 in one line naming the setting, before it reads or writes anything
(docs/settings.md). Before the pins, another vnode-count died in a traceback and another output in exit 1."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests import support
from tests.conftest import KafkaHandle
from tests.integration.cluster.harness import Pipeline, assert_exact

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "laminar_kafka.cli.main", "run", *argv], capture_output=True, text=True,
                          timeout=90, cwd=Path(__file__).resolve().parents[3])


def files_under(root: Path) -> dict[str, bytes]:
    """Every file's content, but the state directory's lock and register (a start that is then refused
    registers its membership first, as every restart does)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name not in ("lock", "state.json")}


def test_a_node_that_disagrees_with_the_pinned_settings_exits_2_in_one_line(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    topic, pipeline = unique("pins"), unique("pins")
    create_topic(kafka.bootstrap, topic, 2)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(200)])
    output, state = str(tmp_path / "out"), str(tmp_path / "state")
    common = ["--bootstrap", kafka.bootstrap, "--topic", topic, "--pipeline", pipeline, "--state-dir", state,
              "--node-id", "1"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline=pipeline,
                              log_dir=tmp_path, extra=["--state-dir", state, "--vnode-count", "64",
                                                       "--checkpoint-interval-ms", "300"])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 60).ok
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    assert "pipeline " + pipeline + ": settings pinned (" in node.log_text()
    before = files_under(tmp_path / "out") | {f"state/{k}": v for k, v in files_under(tmp_path / "state").items()}

    cases = {
        "partition-by": (["--output", output, "--vnode-count", "64", "--partition-by", "hour"],
                         "setting partition-by is hour here, but pipeline {p} was created with day (pinned at its "
                         "first start); start this node with --partition-by day"),
        "format": (["--output", output, "--vnode-count", "64", "--format", "json", "--json-schema", "id:int64"],
                   "setting format is json here, but pipeline {p} was created with raw (pinned at its first start); "
                   "start this node with --format raw"),
        "vnode-count": (["--output", output],  # the default, 256
                        "setting vnode-count is 256 here, but pipeline {p} was created with 64 (pinned at its first "
                        "start); start this node with --vnode-count 64"),
        "output": (["--output", str(tmp_path / "other"), "--vnode-count", "64"],
                   f"setting output is {tmp_path / 'other'} here, but pipeline {{p}} was created with {output} "
                   "(pinned at its first start); start this node with --output " + output),
    }
    for case, (flags, expected) in cases.items():
        result = run(*common, *flags, "--log-level", "warning")
        assert result.returncode == 2, (case, result.stderr[-3000:])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines == ["error: " + expected.format(p=pipeline)], (case, result.stderr[-3000:])
    after = files_under(tmp_path / "out") | {f"state/{k}": v for k, v in files_under(tmp_path / "state").items()}
    assert after == before  # neither the lake nor the pipeline's manifests and pins were touched
    assert not list((tmp_path / "other").rglob("*.parquet"))

    agreeing = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=f"{output}/", zk=None,
                                  pipeline=pipeline, log_dir=tmp_path / "again",
                                  extra=["--state-dir", state, "--vnode-count", "64"])
    try:  # the same settings (the output spelled with a trailing slash) start as before, and land
        # the output is already caught up: await the node's own event, its check of the pins, not the output
        wait_until(lambda: "settings agree with the pinned ones" in agreeing.log_text() or not agreeing.alive(), 60,
                   "the agreeing node's check of the pinned settings")
        assert agreeing.alive(), agreeing.log_text()[-3000:]
        support.produce(kafka.bootstrap, topic, [b"w%d" % i for i in range(100)])
        assert wait_caught_up(kafka.bootstrap, topic, output, 60).ok  # the new records, landed by this node
        agreeing.terminate()
        assert agreeing.wait(30) == 0
    finally:
        agreeing.stop()
    assert "settings agree with the pinned ones" in agreeing.log_text()


def test_zookeeper_nodes_with_another_vnode_count_or_a_live_node_id_are_refused_in_one_line(
    pipeline: Pipeline,
) -> None:
    """ZooKeeper mode: another vnode-count is refused (before the pins it died in a traceback:
    "vnode load 97: 1 is out of range"); a second process with a live node's id says once what it
    waits for and gives up in one line."""
    pipeline.produce(rate=500)
    first = pipeline.launch(1)
    fs, root = open_output(pipeline.output)
    pipeline.wait_until(lambda: bool(list_published(fs, root)), 60, "the first node published")
    common = ["--bootstrap", pipeline.bootstrap, "--zk", str(pipeline.zk), "--topic", pipeline.topic,
              "--output", pipeline.output, "--pipeline", pipeline.pipeline, *pipeline.extra]

    other = run(*common, "--node-id", "2", "--vnode-count", "64", "--log-level", "warning")
    assert other.returncode == 2, other.stderr[-3000:]
    assert [line for line in other.stderr.splitlines() if line.strip()] == [
        f"error: setting vnode-count is 64 here, but pipeline {pipeline.pipeline} was created with 256 "
        "(pinned at its first start); start this node with --vnode-count 256"
    ], other.stderr[-3000:]

    started = time.monotonic()
    twin = run(*common, "--node-id", "1", "--log-level", "warning")
    waited = time.monotonic() - started
    lines = [line for line in twin.stderr.splitlines() if line.strip()]
    assert twin.returncode == 1 and "Traceback" not in twin.stderr, twin.stderr[-3000:]
    assert len(lines) == 2, twin.stderr[-3000:]
    assert "node id 1 is held by a live session (boot " in lines[0] and "waiting up to 30s" in lines[0], lines
    assert lines[1].startswith("error: cannot join the pipeline: node id 1 is held by a live session (boot ")
    assert lines[1].endswith("after 30s: another process runs as node 1; stop it or choose another --node-id")
    assert 25 < waited < 60
    assert first.alive()
    assert_exact(pipeline.finish(), pipeline)
