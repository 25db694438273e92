"""The cluster runtime over Redis Streams: three `laminar-kafka redis run` nodes on a real ZooKeeper
and a real redis-server land four streams into a Parquet tree while entries keep coming; one node is
SIGKILLed and later comes back (its partitions move to the survivors, then drain back to it); and
`laminar-kafka redis verify` finds every entry exactly once."""
from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import redis

from laminar_kafka.cli.redis import read_stream_offsets
from laminar_kafka.cluster.ops.verify import audit, read_output
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.redis_server import RedisServer
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import ZooKeeperHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARTITIONS = 4
NODES = (1, 2, 3)


class Appender:
    """Appends entries round-robin to the streams from a thread (about ``rate`` a second) until
    stopped; ``appended`` counts the acknowledged ones."""

    def __init__(self, url: str, stream: str, rate: int = 300) -> None:
        self.client = redis.Redis.from_url(url)
        self.stream, self.rate = stream, rate
        self.appended = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="appender", daemon=True)

    def start(self) -> Appender:
        self._thread.start()
        return self

    def _run(self) -> None:
        per_tick = max(1, self.rate // 20)
        while not self._stop.wait(0.05):
            pipe = self.client.pipeline(transaction=False)
            for i in range(per_tick):
                pipe.xadd(f"{self.stream}:{(self.appended + i) % PARTITIONS}", {"value": b"v%d" % (self.appended + i)})
            pipe.execute()
            self.appended += per_tick

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        self.client.close()
        return self.appended


def node(node_id: int, url: str, stream: str, zk: str, pipeline: str, output: Path, logs: Path) -> NodeProcess:
    args = [sys.executable, "-m", "laminar_kafka.cli.main", "redis", "run", "--redis-url", url, "--stream", stream,
            "--partitions", str(PARTITIONS), "--output", str(output), "--node-id", str(node_id), "--zk", zk,
            "--pipeline", pipeline, "--checkpoint-interval-ms", "500", "--session-timeout-ms", "6000",
            "--vnode-count", "16"]
    process = NodeProcess(node_id, args, logs / f"node-{node_id}.log")
    process.start()
    return process


def landed(output: Path, stream: str) -> int:
    scan = read_output(pafs.LocalFileSystem(), str(output), stream)
    return scan.rows


def boots_publishing(output: Path, stream: str, node_id: int) -> int:
    """How many boots of node ``node_id`` have published rows (``<stream>/epoch-E.node-N.boot-B...``)."""
    return len({path.name.split(".")[2] for path in (output / stream).glob(f"epoch-*.node-{node_id}.boot-*.parquet")})


def partitions_published(output: Path, stream: str, node_ids: set[int], after_epoch: int = 0) -> set[int]:
    """The partitions of the rows that nodes ``node_ids`` published at epochs past ``after_epoch``."""
    found: set[int] = set()
    for path in (output / stream).glob("epoch-*.parquet"):
        epoch, node_part = path.name.split(".")[:2]
        if int(node_part.removeprefix("node-")) in node_ids and int(epoch.removeprefix("epoch-")) > after_epoch:
            found.update(pq.read_table(path, columns=["_partition"])["_partition"].to_pylist())
    return found


def last_epoch(output: Path, stream: str, node_id: int) -> int:
    return max((int(path.name.split(".")[0].removeprefix("epoch-"))
                for path in (output / stream).glob(f"epoch-*.node-{node_id}.*.parquet")), default=0)


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
            nodes[node_id] = node(node_id, redis_server.url, stream, zookeeper.hosts, pipeline, output, logs)
        wait_until(lambda: landed(output, stream) >= 300 and boots_publishing(output, stream, 2) >= 1, 90,
                   "the first 300 entries landed, node 2 publishing")
        nodes[2].kill()  # a crash: its partitions go to the survivors once its session expires
        orphaned, killed_at = partitions_published(output, stream, {2}), last_epoch(output, stream, 2)
        assert orphaned, "node 2 published rows of no partition before it was killed"
        wait_until(lambda: orphaned <= partitions_published(output, stream, {1, 3}, after_epoch=killed_at), 90,
                   f"the survivors publishing node 2's partitions {sorted(orphaned)}")
        assert all(nodes[n].alive() for n in (1, 3))
        nodes[2].start()  # it comes back: a round drains partitions back to it
        wait_until(lambda: boots_publishing(output, stream, 2) >= 2, 90, "node 2's second boot publishing rows")
        back = landed(output, stream)
        wait_until(lambda: landed(output, stream) >= back + 600, 90, "600 more entries landed with node 2 back")
    finally:
        total = appender.stop()
    wait_until(lambda: landed(output, stream) >= total, 60, f"all {total} entries landed")

    expected, ends = read_stream_offsets(redis_server.url, stream, PARTITIONS)
    assert sum(len(o) for o in expected.values()) == total
    report = audit(stream, expected, ends, read_output(pafs.LocalFileSystem(), str(output), stream))
    assert report.ok and report.missing == 0 and report.duplicated == 0, report.table()
    assert all(nodes[n].alive() for n in NODES), {n: nodes[n].log_text()[-2000:] for n in NODES if not nodes[n].alive()}

    verify = subprocess.run(
        [sys.executable, "-m", "laminar_kafka.cli.main", "redis", "verify", "--redis-url", redis_server.url,
         "--stream", stream, "--partitions", str(PARTITIONS), "--output", str(output)],
        capture_output=True, text=True, timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"{total:>10} {total:>10}" in verify.stdout  # the total line: expected == present
