"""Side-by-side benchmark (prints JSON): our node and Kafka Connect with Apache Iceberg's sink, landing
the same topic into two Iceberg tables of the same REST catalog, in one run.

    .venv/bin/python bench/bench_connect.py [--records 2000000] [--rates 500,2000] [--trickle-seconds 40]
                                            [--freshness-target-ms 2000] [--kill-rate 2000] [--kill-seconds 30]
                                            [--node-mode zk|embedded]

Servers on loopback: one Kafka broker, one ZooKeeper (the node's coordination in ``zk`` mode), Apache
Iceberg's REST catalog server (local-file warehouse; both tables' files on the local disk, Snappy
Parquet). The Connect side is one distributed worker (``devstack/jvm/connect.py``: Kafka Connect 4.1.1,
Iceberg's sink 1.10.1, the JVM options of ``connect-distributed.sh``), one task, commit interval
``--commit-interval-ms`` (default 2000: our epoch interval). The node side is ``laminar-kafka run
--table-format iceberg --catalog-uri <REST> --partition-by none`` (epochs every 2 s). Both land raw
values with ``_topic``, ``_partition``, ``_offset``, ``_timestamp`` (see ``connect_config.py``).

One topic of 8 partitions, pre-filled with ``--records`` records of 100 random bytes. Phases:

1. backlog, each side alone (the node first, then stopped; then the worker): from process start,
   the time to the first committed row, the time until every record is visible, the process's CPU
   (``/proc/<pid>/stat``) per record over the whole run (with start-up) and between the first commit
   and the last (steady state: null when the first commit holds more than half the backlog, as the
   node's does at 2M records: its first 2 s epoch lands most of them; the with-start-up figure then
   bounds its steady state from above), its RSS and peak RSS.
2. trickle, all running, once per rate of ``--rates``: that many records/s for ``--trickle-warmup`` +
   ``--trickle-seconds``; per side the CPU ms per second over the last ``--trickle-seconds`` and the
   end-to-end latency over the whole phase, record produced (its Kafka timestamp) -> its row visible
   in the table (the table polled every 0.2 s through the REST catalog), p50/p99; for the nodes also
   the breakdown their metrics give (epochs, mean barrier and publish seconds, mean visibility).
   With ``--freshness-target-ms`` (default 2000; 0: off) a third side, ``node-target``, is a second
   node (its own pipeline and table, same topic) run with that freshness target, started after the
   backlog phase (it lands the backlog first); ``node`` keeps the epoch clock.
3. kill, both running: ``--kill-rate`` records/s for ``--kill-seconds``; at a third of it the worker
   is SIGKILLed and started again, at two thirds the node (the schedule does not wait for the
   recoveries). Once both tables hold as many rows as the topic holds records (or after
   ``--settle-timeout``), each table's (partition, offset) pairs are audited against the whole
   topic: missing, duplicated. Also the time from the kill to the first commit after it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connect_figures import audit_coordinates, breakdown_delta, cpu_seconds, metric_means, percentile, status_kib

from laminar_kafka.cluster.lake.iceberg.tables import quiet_pyiceberg
from laminar_kafka.cluster.lake.settings import table_name_of
from laminar_kafka.devstack.jvm.connect import (
    ConnectWorker,
    create_sink_table,
    new_connect_worker,
    pinned_connect_versions,
    start_iceberg_sink,
)
from laminar_kafka.devstack.jvm.connect_config import IcebergSinkSettings
from laminar_kafka.devstack.jvm.rest_catalog import new_rest_catalog
from laminar_kafka.devstack.processes import NodeProcess, free_port, node_command
from laminar_kafka.devstack.producers import ContinuousProducer, produce
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_consumer
from laminar_kafka.kafka_source.read import positions

PARTITIONS = 8
VALUE_BYTES = 100
POLL_S = 0.2
TICKS = os.sysconf("SC_CLK_TCK")
CONNECTOR = "iceberg-sink"


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        return cpu_seconds(stat.read(), TICKS)


def process_kib(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return status_kib(status.read(), name)


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = make_consumer(KafkaClientConfig(bootstrap), f"bench-ends-{uuid.uuid4().hex[:6]}")
    try:
        wanted = [(topic, p) for p in range(PARTITIONS)]
        return {p: high for (_t, p), high in positions.high_watermarks(consumer, wanted, 10.0).items()}
    finally:
        consumer.close()


class TableWatch:
    """One table, polled: its committed row count, and the ``_timestamp`` of the rows each new
    snapshot added (read from the data files it added) with the moment the poll saw it."""

    def __init__(self, catalog: RestCatalog, identifier: tuple[str, str]) -> None:
        self.catalog, self.identifier = catalog, identifier
        self.seen: set[int] = set()
        self.latencies_ms: list[float] = []
        self.last_snapshot: int | None = None

    def table(self) -> Table | None:
        try:
            return self.catalog.load_table(self.identifier)
        except Exception:  # noqa: BLE001 - not created yet (the node creates its table at start)
            return None

    def rows(self) -> int:
        table = self.table()
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None or snapshot.summary is None:
            return 0
        return int(snapshot.summary.additional_properties.get("total-records", 0))

    def snapshot_id(self) -> int | None:
        table = self.table()
        snapshot = table.current_snapshot() if table is not None else None
        return None if snapshot is None else snapshot.snapshot_id

    def mark_seen(self) -> None:
        """Every snapshot committed so far counts as seen (latencies only for later ones)."""
        table = self.table()
        if table is not None:
            self.seen.update(snapshot.snapshot_id for snapshot in table.snapshots())

    def poll_latencies(self) -> None:
        """Record the latency of every row of every snapshot not seen before."""
        table = self.table()
        if table is None:
            return
        now_ms = time.time() * 1000
        for snapshot in table.snapshots():
            if snapshot.snapshot_id in self.seen:
                continue
            self.seen.add(snapshot.snapshot_id)
            for manifest in snapshot.manifests(table.io):
                if manifest.added_snapshot_id != snapshot.snapshot_id:
                    continue
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    if entry.status is not ManifestEntryStatus.ADDED:
                        continue
                    path = entry.data_file.file_path.removeprefix("file:")
                    stamps = pq.read_table(path, columns=["_timestamp"]).column("_timestamp")
                    millis = pc.cast(pc.cast(stamps, pa.timestamp("ms")), pa.int64()).to_pylist()
                    self.latencies_ms.extend(now_ms - stamp for stamp in millis if stamp is not None)

    def coordinates(self) -> list[tuple[int, int]]:
        # The node's data files store ``_topic`` in their Arrow schema as dictionary<string> (the
        # Parquet column is dictionary-encoded; the table's type is string): pyiceberg's scan logs
        # "Iceberg does not have a dictionary type" for each such file it reads (78 lines on stderr).
        # The node drops that line with this filter; the bench, reading the table itself, does too.
        quiet_pyiceberg()
        table = self.table()
        assert table is not None
        rows = table.scan(selected_fields=("_partition", "_offset")).to_arrow()
        return list(zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(), strict=True))


@dataclass
class Side:
    """One landing process (the worker or the node) and its table."""

    name: str
    launch: Callable[[], int]  # start the process, return its pid (returns at once)
    ready: Callable[[], None]  # block until it has what it needs to land (the connector created...)
    kill: Callable[[], None]
    watch: TableWatch
    figures: dict[str, object] = field(default_factory=dict)
    pid: int = 0
    #: a node's metrics port (0: none)
    metrics_port: int = 0

    def start(self) -> float:
        started = time.monotonic()
        self.pid = self.launch()
        self.ready()
        return started


def backlog(side: Side, records: int, timeout: float) -> None:
    """Phase 1 for one side (see the module doc)."""
    started = side.start()
    wait_until(lambda: side.watch.rows() > 0, timeout, f"{side.name}: a first committed row", interval=0.05)
    first_at = time.monotonic()
    first_rows, first_cpu = side.watch.rows(), process_cpu(side.pid)
    wait_until(lambda: side.watch.rows() >= records, timeout, f"{side.name}: {records} rows visible", interval=0.1)
    done_at = time.monotonic()
    total_cpu = process_cpu(side.pid)
    # steady state: after the first commit, when that leaves at least half the backlog (else the
    # window is one or two epochs' remainder and says nothing: null)
    steady_rows = records - first_rows if first_rows <= records // 2 else 0
    side.figures["backlog"] = {
        "seconds_to_first_committed_row": round(first_at - started, 2),
        "seconds_to_all_rows": round(done_at - started, 2),
        "records_per_s_with_startup": round(records / (done_at - started)),
        "records_per_s_steady": round(steady_rows / (done_at - first_at)) if steady_rows > 0 else None,
        "rows_in_first_commit": first_rows,
        "cpu_s_total": round(total_cpu, 2),
        "cpu_us_per_record_with_startup": round(total_cpu / records * 1e6, 2),
        "cpu_us_per_record_steady": round((total_cpu - first_cpu) / steady_rows * 1e6, 2) if steady_rows > 0 else None,
        "cpu_s_until_first_commit": round(first_cpu, 2),
        "rss_mb": round(process_kib(side.pid, "VmRSS") / 1024, 1),
        "peak_rss_mb": round(process_kib(side.pid, "VmHWM") / 1024, 1),
    }


def node_breakdown(side: Side) -> dict[str, dict[str, float]]:
    """A node's epochs and its mean barrier, publish and visibility seconds so far (its metrics)."""
    if not side.metrics_port:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{side.metrics_port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return metric_means(text, ("laminar_checkpoint_seconds", "laminar_publish_seconds", "laminar_visibility_seconds"))


def trickle(sides: list[Side], bootstrap: str, topic: str, rate: int, seconds: float, warmup: float) -> None:
    """Phase 2 at ``rate`` (see the module doc): latencies over the whole phase, CPU over its last
    ``seconds`` (after ``warmup`` seconds at the rate)."""
    before = {side.name: node_breakdown(side) for side in sides}
    for side in sides:
        side.watch.mark_seen()
        side.watch.latencies_ms = []
    started = time.monotonic()
    producer = ContinuousProducer(bootstrap, topic, rate, PARTITIONS).start()
    cpu_before: dict[str, float] = {}
    window_started = started + warmup
    try:
        while time.monotonic() - started < warmup + seconds:
            if not cpu_before and time.monotonic() - started >= warmup:
                cpu_before = {side.name: process_cpu(side.pid) for side in sides}
                window_started = time.monotonic()
            for side in sides:
                side.watch.poll_latencies()
            time.sleep(POLL_S)
        window = time.monotonic() - window_started
        cpu_after = {side.name: process_cpu(side.pid) for side in sides}
    finally:
        producer.stop()
    deadline = time.monotonic() + 30
    # the records of the window's last seconds: wait until each table shows them, then poll once more
    while time.monotonic() < deadline and any(len(s.watch.latencies_ms) < producer.acked for s in sides):
        for side in sides:
            side.watch.poll_latencies()
        time.sleep(POLL_S)
    for side in sides:
        latencies = side.watch.latencies_ms
        cpu = cpu_after[side.name] - cpu_before[side.name]
        side.figures[f"trickle_{rate}"] = {
            "rate_per_s": rate, "warmup_s": warmup, "cpu_window_s": round(window, 1), "records": producer.acked,
            "rows_seen": len(latencies),
            "cpu_ms_per_s": round(cpu / window * 1000, 1),
            "cpu_us_per_record": round(cpu / (rate * window) * 1e6, 1),
            "latency_ms_p50": _rounded(percentile(latencies, 0.5)),
            "latency_ms_p99": _rounded(percentile(latencies, 0.99)),
            "latency_ms_max": _rounded(max(latencies) if latencies else None),
            "rss_mb": round(process_kib(side.pid, "VmRSS") / 1024, 1),
            "peak_rss_mb": round(process_kib(side.pid, "VmHWM") / 1024, 1),
            "breakdown": breakdown_delta(before[side.name], node_breakdown(side)),
        }


def landed(side: Side, rows: int) -> bool:
    """Whether ``side``'s table holds at least ``rows`` rows."""
    return side.watch.rows() >= rows


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value)


def kill_phase(sides: list[Side], bootstrap: str, topic: str, rate: int, seconds: float, settle_timeout: float) -> None:
    """Phase 3 (see the module doc). The kills follow the schedule whatever the recoveries take; the
    producer stops at ``seconds``; the recoveries are awaited after that (bounded by ``settle_timeout``)."""
    producer = ContinuousProducer(bootstrap, topic, rate, PARTITIONS).start()
    started = time.monotonic()
    killed: dict[str, tuple[float, int | None]] = {}  # side -> (killed at, its snapshot then)
    recovery: dict[str, float] = {}

    def note_recoveries() -> bool:
        for side in sides:
            if side.name in killed and side.name not in recovery and side.watch.snapshot_id() != killed[side.name][1]:
                recovery[side.name] = round(time.monotonic() - killed[side.name][0], 2)
        return len(recovery) == len(sides)

    try:
        for index, side in enumerate(sides):
            due = started + seconds * (index + 1) / (len(sides) + 1)
            while time.monotonic() < due:
                note_recoveries()
                time.sleep(0.1)
            killed[side.name] = (time.monotonic(), side.watch.snapshot_id())
            side.kill()
            side.start()
        while time.monotonic() < started + seconds:
            note_recoveries()
            time.sleep(0.1)
    finally:
        producer.stop()
    try:
        wait_until(note_recoveries, settle_timeout, "a commit after each kill", interval=0.1)
    except TimeoutError:
        pass  # reported as null below
    ends = topic_ends(bootstrap, topic)
    total = sum(ends.values())
    for side in sides:
        settled = True
        try:
            wait_until(lambda side=side: side.watch.rows() >= total, settle_timeout, f"{side.name}: {total} rows", interval=0.5)
            time.sleep(5)  # a few more commit intervals: a late duplicate would show in the audit below
        except TimeoutError:
            settled = False
        audit = audit_coordinates(side.watch.coordinates(), ends)
        side.figures["kill"] = {
            "records_in_topic": total, "rows_in_table": audit.rows, "missing": audit.missing,
            "duplicated": audit.duplicated, "foreign": audit.foreign, "exact": audit.exact,
            "settled_within_timeout": settled, "seconds_kill_to_next_commit": recovery.get(side.name),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--rates", default="500,2000", help="trickle rates (records/s), one trickle phase each")
    parser.add_argument("--freshness-target-ms", type=int, default=2_000, help="the node-target side's (0: no such side)")
    parser.add_argument("--trickle-seconds", type=float, default=40.0)
    parser.add_argument("--trickle-warmup", type=float, default=10.0)
    parser.add_argument("--kill-rate", type=int, default=2_000)
    parser.add_argument("--kill-seconds", type=float, default=30.0)
    parser.add_argument("--settle-timeout", type=float, default=180.0)
    parser.add_argument("--commit-interval-ms", type=int, default=2_000)
    parser.add_argument("--node-mode", choices=("zk", "embedded"), default="zk")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="laminar-bench-connect-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1 if args.node_mode == "zk" else 0,
                            base_dir=base / "servers")
    catalog_server = new_rest_catalog(base)
    worker: ConnectWorker | None = None
    nodes: list[NodeProcess] = []
    try:
        catalog_server.start(timeout=180.0)
        catalog = RestCatalog("bench", uri=catalog_server.uri)
        topic = f"side-by-side-{uuid.uuid4().hex[:6]}"
        create_topic(stack.bootstrap, topic, PARTITIONS)
        produce(stack.bootstrap, topic, [os.urandom(VALUE_BYTES) for _ in range(args.records)], timeout=300)

        def node_side(name: str, extra: list[str]) -> Side:
            """A node into <base>/<name>-lake/<topic> through the REST catalog (its own pipeline)."""
            pipeline, port = f"{name}-{topic}", free_port()
            flags = ["--table-format", "iceberg", "--catalog-uri", catalog_server.uri, "--partition-by", "none"]
            if args.node_mode == "embedded":
                flags += ["--state-dir", str(base / f"{name}-state")]
            flags += ["--bootstrap", stack.bootstrap, "--topic", topic, "--output", str(base / f"{name}-lake"),
                      "--pipeline", pipeline, "--node-id", "1", "--metrics-port", str(port), *extra]
            if args.node_mode == "zk":
                flags += ["--zk", stack.zk_hosts]
            process = NodeProcess(1, node_command(flags), base / "node-logs" / f"{name}.log")
            nodes.append(process)

            def launch() -> int:
                process.start()
                return process.pid

            return Side(name, launch, lambda: None, process.kill,
                        TableWatch(catalog, (table_name_of(pipeline), table_name_of(topic))), metrics_port=port)

        clock_side = node_side("node", [])
        node_process = nodes[0]

        # the worker: Iceberg's sink into connect.<topic> at <base>/connect-lake
        table = f"connect.{table_name_of(topic)}"
        create_sink_table(catalog_server.uri, table, (base / "connect-lake").as_uri())
        worker = new_connect_worker(base, stack.bootstrap, group_id=f"connect-{topic}")
        connect_worker = worker
        sink = IcebergSinkSettings(topic=topic, table=table, catalog_uri=catalog_server.uri,
                                   control_topic=f"{topic}-control", commit_interval_ms=args.commit_interval_ms)
        created: list[bool] = []

        def worker_launch() -> int:
            connect_worker.server.start()
            assert connect_worker.pid is not None
            return connect_worker.pid

        def worker_ready() -> None:
            connect_worker.server.wait_healthy(120)
            if not created:
                start_iceberg_sink(connect_worker, CONNECTOR, sink)
                created.append(True)

        connect_side = Side("connect", worker_launch, worker_ready, connect_worker.kill,
                            TableWatch(catalog, ("connect", table_name_of(topic))))

        backlog(clock_side, args.records, 600)
        node_process.stop()
        backlog(connect_side, args.records, 600)
        clock_side.start()
        sides = [connect_side, clock_side]
        if args.freshness_target_ms:
            target_side = node_side("node-target", ["--freshness-target-ms", str(args.freshness_target_ms)])
            target_side.start()
            landed: Callable[[], bool] = lambda: target_side.watch.rows() >= args.records
            wait_until(landed, 600, "node-target: the backlog", interval=0.5)
            sides.append(target_side)
        for rate in (int(r) for r in args.rates.split(",")):
            trickle(sides, stack.bootstrap, topic, rate, args.trickle_seconds, args.trickle_warmup)
        if args.kill_seconds > 0:
            kill_phase(sides, stack.bootstrap, topic, args.kill_rate, args.kill_seconds, args.settle_timeout)
        kafka_version, iceberg_version = pinned_connect_versions()
        print(json.dumps({
            "records": args.records, "value_bytes": VALUE_BYTES, "partitions": PARTITIONS,
            "node_mode": args.node_mode, "commit_interval_ms": args.commit_interval_ms,
            "freshness_target_ms": args.freshness_target_ms,
            "kafka_connect": kafka_version, "iceberg_sink": iceberg_version, "cpus": os.cpu_count(),
            **{side.name: side.figures for side in sides},
        }, indent=2))
    finally:
        if worker is not None:
            worker.stop()
        for process in nodes:
            process.stop()
        catalog_server.stop()
        stack.stop()
    shutil.rmtree(base, ignore_errors=True)  # kept after a failure: the servers' and processes' logs


if __name__ == "__main__":
    main()
