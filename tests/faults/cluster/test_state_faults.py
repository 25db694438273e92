"""State faults: the control state lost or old, the lake rolled back (docs/settings.md). The lake is
the durable truth: every node reconciles its control state with it before it joins, so each fault
ends exact (or, with ``on-lake-behind=fail``, with a one-line refusal and an untouched lake).

Before this, two nodes started again after their ZooKeeper subtree was deleted landed every record a
second time (50,051 of 50,051 duplicated), silently."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.cluster.lake.record import RECORDS_DIR
from laminar_kafka.devstack.producers import produce
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import Pipeline, assert_exact, make_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]


@contextmanager
def zookeeper(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def subtree(p: Pipeline) -> str:
    return f"/laminar/{p.pipeline}"


def land_and_stop(p: Pipeline, nodes: tuple[int, ...] = (1, 2), *more: str) -> None:
    """Produce, let ``nodes`` land what was produced, stop producing, stop them cleanly (exit 0)."""
    p.produce(rate=1000)
    for node_id in nodes:
        p.launch(node_id, *more)
    fs, root = open_output(p.output)
    p.wait_until(lambda: len(list_published(fs, root)) >= 2, 60, "rows published")
    assert p.finish().ok
    for node_id in nodes:
        p.nodes[node_id].terminate()
    for node_id in nodes:
        assert p.nodes[node_id].wait(60) == 0, p.tail_logs()


def restart(p: Pipeline, nodes: tuple[int, ...] = (1, 2), *more: str) -> None:
    """Produce records the restarted ``nodes`` must land (``finish`` waits for them), then start them."""
    produce(p.bootstrap, p.topic, [b"after-%d" % i for i in range(2000)])
    p.producer = None
    for node_id in nodes:
        p.launch(node_id, *more)


def records(p: Pipeline) -> list[dict[str, object]]:
    directory = Path(p.output) / RECORDS_DIR
    return [json.loads(f.read_text()) for f in sorted(directory.glob("epoch-*.json"))]


def logs(p: Pipeline) -> str:
    return "\n".join(node.log_text() for node in p.nodes.values())


def test_zookeeper_subtree_lost_while_stopped_resumes_from_the_lake(pipeline: Pipeline) -> None:
    land_and_stop(pipeline)
    with zookeeper(str(pipeline.zk)) as zk:
        zk.delete(subtree(pipeline), recursive=True)
    restart(pipeline)
    assert_exact(pipeline.finish(), pipeline)
    assert f"no control state for pipeline '{pipeline.pipeline}': resuming from the lake at epoch " in logs(pipeline)


def test_zookeeper_subtree_lost_and_a_drifted_node_is_refused_by_the_lakes_pins(pipeline: Pipeline) -> None:
    """The coordinator's pins are lost with its subtree; the first node to start again would pin its
    own values. One whose configuration drifted meanwhile is refused by the pins the lake keeps, in
    one line, having pinned nothing; the right configuration then resumes from the lake, exact, and
    the tree holds one layout (without the lake's copy nothing refused it: the coordinator's pins were
    gone, and it would have pinned its own)."""
    drift = ("--partition-by", "hour")  # every kept setting is compared alike (tests/unit/cluster/lake/test_lake_pins.py)
    land_and_stop(pipeline)
    with zookeeper(str(pipeline.zk)) as zk:
        zk.delete(subtree(pipeline), recursive=True)
    drifted = subprocess.run(
        [sys.executable, "-m", "laminar_kafka.cli.main", "run", "--bootstrap", pipeline.bootstrap, "--topic",
         pipeline.topic, "--zk", str(pipeline.zk), "--pipeline", pipeline.pipeline, "--output", pipeline.output,
         "--node-id", "3", *drift, "--log-level", "warning"], capture_output=True, text=True, timeout=120)
    assert drifted.returncode == 2, drifted.stderr[-3000:]
    setting, value = drift[0].removeprefix("--"), drift[1]
    pinned = "day"
    assert [line for line in drifted.stderr.splitlines() if line.strip()] == [
        f"error: setting {setting} is {value} here, but pipeline {pipeline.pipeline} was created with {pinned} "
        f"(kept in its lake); start this node with --{setting} {pinned}"], drifted.stderr
    with zookeeper(str(pipeline.zk)) as zk:  # refused before it pinned anything
        assert not zk.exists(f"{subtree(pipeline)}/settings") or not zk.get_children(f"{subtree(pipeline)}/settings")
    restart(pipeline)
    assert_exact(pipeline.finish(), pipeline)
    directories = {Path(f).parent.name for f in list_published(*open_output(pipeline.output))
                   if "/_" not in f.removeprefix(pipeline.output)}
    assert directories and all(d.startswith("dt=") for d in directories), directories


def test_zookeeper_subtree_lost_under_running_nodes_stops_them_and_a_restart_ends_exact(
    pipeline: Pipeline,
) -> None:
    pipeline.produce(rate=1000)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    fs, root = open_output(pipeline.output)
    pipeline.wait_until(lambda: len(list_published(fs, root)) >= 2, 60, "rows published")
    with zookeeper(str(pipeline.zk)) as zk:
        zk.delete(subtree(pipeline), recursive=True)
    for node_id in (1, 2):  # neither goes on from an empty control state
        assert pipeline.nodes[node_id].wait(60) == 1, pipeline.tail_logs()
        text = pipeline.nodes[node_id].log_text()
        assert "Traceback" not in text
        assert "start the node again: it reconciles with the lake" in text
    restart(pipeline)  # the supervisor's restart
    assert_exact(pipeline.finish(), pipeline)


def test_zookeeper_restored_from_an_old_copy_advances_to_the_lake(pipeline: Pipeline) -> None:
    """The subtree's persistent records copied some epochs before the nodes stopped, then restored."""
    pipeline.produce(rate=1000)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    fs, root = open_output(pipeline.output)
    pipeline.wait_until(lambda: len(records(pipeline)) >= 3, 60, "three epochs recorded")
    with zookeeper(str(pipeline.zk)) as zk:
        backup = copy_persistent(zk, subtree(pipeline))
    copied_at = max(int(r["epoch"]) for r in records(pipeline))  # type: ignore[call-overload]
    pipeline.wait_until(lambda: max(int(r["epoch"]) for r in records(pipeline)) >= copied_at + 4, 60,  # type: ignore[call-overload]
                        "four more epochs")
    assert pipeline.finish().ok
    for node_id in (1, 2):
        pipeline.nodes[node_id].terminate()
    for node_id in (1, 2):
        assert pipeline.nodes[node_id].wait(60) == 0
    with zookeeper(str(pipeline.zk)) as zk:
        zk.delete(subtree(pipeline), recursive=True)
        for path, data in backup:
            zk.create(path, data, makepath=True)
    restart(pipeline)
    assert_exact(pipeline.finish(), pipeline)
    assert "is behind the lake" in logs(pipeline), pipeline.tail_logs()


def copy_persistent(zk: KazooClient, root: str) -> list[tuple[str, bytes]]:
    """Every persistent node under ``root`` (parents first), as a backup of ZooKeeper's data holds them."""
    out: list[tuple[str, bytes]] = []
    stack = [root]
    while stack:
        path = stack.pop()
        data, stat = zk.get(path)
        if stat.ephemeralOwner:
            continue
        out.append((path, data))
        stack.extend(f"{path}/{child}" for child in sorted(zk.get_children(path), reverse=True))
    return out


def test_embedded_state_dir_lost_while_stopped_resumes_from_the_lake(embedded: Pipeline) -> None:
    state = str(embedded.base / "state")
    land_and_stop(embedded, (1,), "--state-dir", state)
    shutil.rmtree(state)
    restart(embedded, (1,), "--state-dir", state)
    assert_exact(embedded.finish(), embedded)
    assert "no control state for pipeline" in logs(embedded)


@pytest.mark.parametrize("drop_records", [False, True], ids=["files", "files-and-records"])
def test_parquet_files_of_the_last_epochs_removed_are_landed_again(pipeline: Pipeline,
                                                                    drop_records: bool) -> None:
    land_and_stop(pipeline)
    with_rows = [r for r in records(pipeline) if r["files"]]
    victim = with_rows[-1]
    for relative in victim["files"]:  # type: ignore[attr-defined]
        (Path(pipeline.output) / relative).unlink()
    if drop_records:
        for f in (Path(pipeline.output) / RECORDS_DIR).glob("epoch-*.json"):
            if json.loads(f.read_text())["epoch"] >= victim["epoch"]:
                f.unlink()
    restart(pipeline)
    assert_exact(pipeline.finish(), pipeline)
    assert "the lake is behind the control state" in logs(pipeline) and "rewinding" in logs(pipeline)


def test_on_lake_behind_fail_refuses_in_one_line_and_touches_nothing(pipeline: Pipeline) -> None:
    land_and_stop(pipeline)
    victim = [r for r in records(pipeline) if r["files"]][-1]
    for relative in victim["files"]:  # type: ignore[attr-defined]
        (Path(pipeline.output) / relative).unlink()
    before = sorted(str(p) for p in Path(pipeline.output).rglob("*"))
    result = subprocess.run(
        [sys.executable, "-m", "laminar_kafka.cli.main", "run", "--bootstrap", pipeline.bootstrap, "--zk", str(pipeline.zk),
         "--topic", pipeline.topic, "--output", pipeline.output, "--pipeline", pipeline.pipeline, "--node-id", "1",
         "--on-lake-behind", "fail", "--log-level", "warning", *pipeline.extra],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[3])
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the lake is behind the control state"), lines
    assert "on-lake-behind=fail" in lines[0]
    assert sorted(str(p) for p in Path(pipeline.output).rglob("*")) == before


def test_iceberg_table_rolled_back_is_landed_again(iceberg_pipeline: Pipeline) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    land_and_stop(iceberg_pipeline)
    catalog = SqlCatalog("laminar", uri=f"sqlite:///{iceberg_pipeline.output}/_catalog/catalog.db",
                         warehouse=f"file://{iceberg_pipeline.output}")
    table = catalog.load_table((iceberg_pipeline.pipeline.replace("-", "_"), iceberg_pipeline.topic.replace("-", "_")))
    snapshots = [s for s in table.snapshots() if s.summary and s.summary.get("laminar.epoch")]
    assert len(snapshots) >= 2, "two epochs with rows"
    table.manage_snapshots().rollback_to_snapshot(snapshots[0].snapshot_id).commit()
    restart(iceberg_pipeline)
    assert_exact(iceberg_pipeline.finish(), iceberg_pipeline)
    assert "the lake is behind the control state" in logs(iceberg_pipeline)


def test_zookeeper_replaced_by_an_empty_one_under_running_nodes(
    kafka: KafkaHandle, zookeeper_restartable: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    """The server refuses a client that saw newer data, for ever: the nodes stop presenting the last
    zxid after 3 session timeouts suspended, get 'session expired', stop in one line and, restarted,
    resume from the lake (they stayed suspended for ever before)."""
    p = make_pipeline(kafka.bootstrap, zookeeper_restartable.hosts, unique("zk-replaced"), tmp_path)
    try:
        p.produce(rate=1000)
        for node_id in (1, 2):
            p.launch(node_id)
        fs, root = open_output(p.output)
        p.wait_until(lambda: len(list_published(fs, root)) >= 2, 60, "rows published")
        ensemble = zookeeper_restartable.ensemble
        assert ensemble is not None
        for server in ensemble.servers:
            server.kill()
            shutil.rmtree(server.workdir / "data" / "version-2", ignore_errors=True)
            server.start()
        for node_id in (1, 2):
            assert p.nodes[node_id].wait(120) == 1, p.tail_logs()
            text = p.nodes[node_id].log_text()
            assert "has not taken the session back" in text and "Traceback" not in text
            assert "start the node again: it reconciles with the lake" in text
        restart(p)
        assert_exact(p.finish(), p)
        assert "no control state for pipeline" in logs(p)
    finally:
        p.stop_all()
