"""What the Redis pipeline tests share: an appender thread, `redis run` node processes, and reads of
the Parquet tree they land (rows, who published what, at which epoch)."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import redis

from laminar_kafka.cli.redis import read_stream_offsets
from laminar_kafka.cluster.ops.verify import VerifyReport, audit, read_output
from laminar_kafka.devstack.processes import NodeProcess

PARTITIONS = 4


class Appender:
    """Appends entries round-robin to the streams ``<stream>:<n>`` from a thread (about ``rate`` a
    second) until stopped. While the server does not answer it waits and tries again; the streams,
    not a count kept here, are the truth the tests compare the lake with."""

    def __init__(self, url: str, stream: str, rate: int = 300) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.stream, self.rate = stream, rate
        self.appended = 0
        self.failures = 0
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
                n = self.appended + i
                pipe.xadd(f"{self.stream}:{n % PARTITIONS}", {"value": b"v%d" % n})
            try:
                pipe.execute()
            except redis.ConnectionError:
                self.failures += 1
                continue
            self.appended += per_tick

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def start_node(node_id: int, url: str, stream: str, zk: str, pipeline: str, output: Path, logs: Path) -> NodeProcess:
    """One `laminar-kafka redis run` process (500 ms epochs, 6 s sessions, 16 vnodes)."""
    args = [sys.executable, "-m", "laminar_kafka.cli.main", "redis", "run", "--redis-url", url, "--stream", stream,
            "--partitions", str(PARTITIONS), "--output", str(output), "--node-id", str(node_id), "--zk", zk,
            "--pipeline", pipeline, "--checkpoint-interval-ms", "500", "--session-timeout-ms", "6000",
            "--vnode-count", "16"]
    process = NodeProcess(node_id, args, logs / f"node-{node_id}.log")
    process.start()
    return process


def landed(output: Path, stream: str) -> int:
    """Rows published so far."""
    return read_output(pafs.LocalFileSystem(), str(output), stream).rows


def entries(url: str, stream: str) -> int:
    """Entries in the streams now."""
    offsets, _ends = read_stream_offsets(url, stream, PARTITIONS)
    return sum(len(o) for o in offsets.values())


def audit_lake(url: str, stream: str, output: Path) -> VerifyReport:
    """`redis verify`'s audit: every entry of the streams against the published rows."""
    expected, ends = read_stream_offsets(url, stream, PARTITIONS)
    return audit(stream, expected, ends, read_output(pafs.LocalFileSystem(), str(output), stream))


def partitions_published(output: Path, stream: str, node_ids: set[int], after_epoch: int = 0) -> set[int]:
    """The partitions of the rows that nodes ``node_ids`` published at epochs past ``after_epoch``."""
    found: set[int] = set()
    for path in (output / stream).glob("epoch-*.parquet"):
        epoch, node_part = path.name.split(".")[:2]
        if int(node_part.removeprefix("node-")) in node_ids and int(epoch.removeprefix("epoch-")) > after_epoch:
            found.update(pq.read_table(path, columns=["_partition"])["_partition"].to_pylist())
    return found


def last_epoch(output: Path, stream: str, node_id: int) -> int:
    """The last epoch at which node ``node_id`` published rows (0: none)."""
    return max((int(path.name.split(".")[0].removeprefix("epoch-"))
                for path in (output / stream).glob(f"epoch-*.node-{node_id}.*.parquet")), default=0)
