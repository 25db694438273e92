"""The cluster runtime over Redis Streams: three `laminar-kafka redis run` nodes on a real ZooKeeper
and a real redis-server land four streams into a Parquet tree while entries keep coming; one node is
SIGKILLed and later comes back (its partitions move to the survivors, then some drain back to it); and
`laminar-kafka redis verify` finds every entry exactly once."""
from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.redis_server import RedisServer
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import ZooKeeperHandle
from tests.integration.redis_source.harness import (
    PARTITIONS,
    Appender,
    audit_lake,
    entries,
    landed,
    last_epoch,
    partitions_published,
    start_node,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NODES = (1, 2, 3)
#: a node's log line when an assignment gives it partitions
OWNS = re.compile(r"version \d+: [1-9]\d* partition\(s\) owned")


def recent_owners(output: Path, stream: str, epochs: int = 3) -> dict[int, set[int]]:
    """Each node's partitions in the files of the last ``epochs`` epochs published."""
    latest = max(last_epoch(output, stream, n) for n in NODES)
    return {n: partitions_published(output, stream, {n}, after_epoch=latest - epochs) for n in NODES}


@pytest.fixture
def nodes() -> Iterator[dict[int, NodeProcess]]:
    started: dict[int, NodeProcess] = {}
    yield started
    for process in started.values():
        process.stop()


def test_three_nodes_land_redis_streams_exactly_once_through_a_node_kill_and_its_return(
    redis_server: RedisServer, zookeeper: ZooKeeperHandle, unique: Callable[[str], str], tmp_path: Path,
    nodes: dict[int, NodeProcess],
) -> None:
    stream, pipeline = unique("orders"), unique("redis-pipeline")
    output, logs = tmp_path / "lake", tmp_path / "logs"
    appender = Appender(redis_server.url, stream).start()
    try:
        for node_id in NODES:
            nodes[node_id] = start_node(node_id, redis_server.url, stream, zookeeper.hosts, pipeline, output, logs)
        wait_until(lambda: landed(output, stream) >= 900, 90, "the first 900 entries landed (the first rounds long done)")
        # 4 partitions on 16 vnodes: a node may own none. The victim is one that owns partitions now:
        # what a node owns shows in the last epochs' files (every owned partition has rows in each)
        owners = recent_owners(output, stream)
        victim = next(n for n in NODES if owners[n])
        survivors = set(NODES) - {victim}
        nodes[victim].kill()  # a crash: its partitions go to the survivors once its session expires
        orphaned, killed_at = owners[victim], last_epoch(output, stream, victim)
        wait_until(lambda: orphaned <= partitions_published(output, stream, survivors, after_epoch=killed_at), 90,
                   f"the survivors publishing node {victim}'s partitions {sorted(orphaned)}")
        assert all(nodes[n].alive() for n in survivors)
        restarted_at = len(nodes[victim].log_text())
        nodes[victim].start()  # it comes back: a round gives it partitions again, drained from the survivors
        wait_until(lambda: OWNS.search(nodes[victim].log_text()[restarted_at:]), 90,
                   f"node {victim} back in the pipeline, owning partitions")
        back = landed(output, stream)
        wait_until(lambda: landed(output, stream) >= back + 600, 90, f"600 more entries landed with node {victim} back")
    finally:
        appender.stop()
    total = entries(redis_server.url, stream)
    wait_until(lambda: landed(output, stream) >= total, 60, f"all {total} entries landed")

    report = audit_lake(redis_server.url, stream, output)
    assert report.ok and report.missing == 0 and report.duplicated == 0, report.table()
    assert all(nodes[n].alive() for n in NODES), {n: nodes[n].log_text()[-2000:] for n in NODES if not nodes[n].alive()}

    verify = subprocess.run(
        [sys.executable, "-m", "laminar_kafka.cli.main", "redis", "verify", "--redis-url", redis_server.url,
         "--stream", stream, "--partitions", str(PARTITIONS), "--output", str(output)],
        capture_output=True, text=True, timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{total:>10} {total:>10}" in verify.stdout  # the total line: expected == present
