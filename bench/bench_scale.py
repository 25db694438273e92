"""Scale benchmark (prints JSON): what nodes cost over nodes x partitions, at a trickle and at load.

    .venv/bin/python bench/bench_scale.py point --nodes 1 --partitions 1000 --rate 2000
    .venv/bin/python bench/bench_scale.py grid [--nodes 1,2,4,8,16] [--partitions 8,256,1000,4000] \
        [--rates 2000,20000] [--out bench/scale.json]
    .venv/bin/python bench/bench_scale.py plot bench/scale.json docs/scale.png

One point: a topic of ``--partitions`` partitions, ZooKeeper-mode nodes (the node's defaults: 2 s
epochs, 10 s once three move nothing) landing Parquet locally, a producer in this process at
``--rate`` records/s (100 B). Once every partition is owned, spread evenly, and ``--warmup`` seconds passed, the window
of ``--window`` seconds is measured from ``/proc``:

- per node: CPU ms per second (user + system), by thread name (the reader, librdkafka's threads,
  the event loop = ``MainThread``), and RSS;
- ZooKeeper: CPU ms/s, bytes written to disk per second (``/proc/<pid>/io``), and requests per
  second (``mntr``'s ``zk_packets_received``), each also per epoch committed in the window;
- epoch commit (``laminar_checkpoint_seconds``) p50/p99 from the nodes' metrics over the window;
- the join-round pause p99 (the ``laminar_handoff_pause_seconds`` histogram's buckets) over the whole run.

``burst_after_idle_s`` (``--rate 0``): after the window, 100 records produced at once and their
latency to the lake (the quiet interval holds then; a node asks for the epoch that lands them).

``kill`` (with ``--kill``): after the window, one node is SIGKILLed; the time until every
partition's durable cursor passes the high watermark it had at the kill.

The figures are the counters; the sleeps only set the window.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from process_probes import (
    buckets,
    counter,
    cpu_seconds,
    quantile,
    rss_mib,
    scrape,
    thread_cpu,
    written_bytes,
    zk_packets_received,
)

from laminar_kafka.cluster.ops.status import collect_status
from laminar_kafka.devstack.processes import NodeProcess, free_port
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

# -- the lake as its readers see it --------------------------------------------------------------

class LakeWatcher:
    """Polls the published Parquet tree of one topic (``<output>/<topic>/**/*.parquet``) every
    ``interval_s``: when the first row became visible, and each visible row's latency (first seen
    minus its ``_timestamp``: the topic keeps the broker's append time) for rows produced after :meth:`measure_from`."""

    def __init__(self, root: Path, interval_s: float = 0.1) -> None:
        self.root, self.interval_s = root, interval_s
        self.first_visible_at: float | None = None
        self.latencies_s: list[float] = []
        self._seen: set[Path] = set()
        self._from_ms = float("inf")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lake-watcher", daemon=True)

    def start(self) -> LakeWatcher:
        self._thread.start()
        return self

    def measure_from(self, wall_s: float) -> None:
        self.latencies_s.clear()
        self._from_ms = wall_s * 1000

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        import pyarrow.parquet as pq

        while not self._stop.wait(self.interval_s):
            now = time.time()
            for path in sorted(self.root.glob("**/*.parquet")):
                if path in self._seen:
                    continue
                self._seen.add(path)
                try:
                    stamps = pq.read_table(path, columns=["_timestamp"]).column(0)
                except (OSError, ValueError):
                    continue  # read again at the next look: not a data file of this lake
                if self.first_visible_at is None and len(stamps):
                    self.first_visible_at = time.monotonic()
                millis = stamps.cast("int64").to_pylist()  # timestamp[ms] -> epoch milliseconds
                self.latencies_s.extend(now - ms / 1000 for ms in millis if ms is not None and ms >= self._from_ms)


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None, "rows": 0}
    ordered = sorted(values)
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))], 3)
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": pick(1.0), "rows": len(ordered)}


# -- one point ------------------------------------------------------------------------------------

@dataclass
class Point:
    nodes: int
    partitions: int
    rate: int
    warmup_s: float
    window_s: float
    kill: bool = False
    #: more flags for every node
    node_args: tuple[str, ...] = ()
    #: where to write a py-spy profile of the first node over the window (raw, folded stacks)
    profile: Path | None = None


class ScaleBench:
    def __init__(self, stack: DevStack, base: Path) -> None:
        self.stack, self.base = stack, base
        self.counter = 0

    def zk_pid_and_port(self) -> tuple[int, int]:
        assert self.stack.zookeeper is not None
        server = self.stack.zookeeper.servers[0]
        assert server.pid is not None
        return server.pid, server.port

    def owners(self, name: str) -> tuple[dict[int, int], dict[str, tuple[int | None, int]]]:
        """Live node -> partitions owned, and partition -> (durable cursor, high watermark)."""
        try:
            status = collect_status(bootstrap=self.stack.bootstrap, topics=[name], zk=self.stack.zk_hosts,
                                    state_dir=None, pipeline=name, source_identity="kafka")
        except Exception:  # noqa: BLE001 - not created yet
            return {}, {}
        owned = {n.node_id: len(n.partitions) for n in status.nodes if n.live}
        return owned, {p.partition: (p.durable_cursor, p.high_watermark) for p in status.partitions}

    def run(self, point: Point) -> dict[str, object]:
        self.counter += 1
        name = f"scale-{point.nodes}n-{point.partitions}p-{point.rate}r-{int(time.time())}-{self.counter}"
        # _timestamp is the broker's append time: the latency measured is from the record in Kafka
        # to the record in the lake, without the bench producer's own queueing
        create_topic(self.stack.bootstrap, name, point.partitions, config={"message.timestamp.type": "LogAppendTime"})
        ports = {node_id: free_port() for node_id in range(1, point.nodes + 1)}
        producer = ContinuousProducer(self.stack.bootstrap, name, point.rate, point.partitions).start()
        nodes: list[NodeProcess] = []
        started = time.monotonic()
        watcher = LakeWatcher(self.base / name / name).start()
        try:
            for node_id, port in ports.items():
                nodes.append(NodeProcess.launch(
                    node_id, bootstrap=self.stack.bootstrap, topic=name, output=str(self.base / name),
                    zk=self.stack.zk_hosts, pipeline=name, log_dir=self.base / name / "_logs",
                    extra=["--metrics-port", str(port), *point.node_args]))
            self.wait_spread(name, point)
            spread_s = time.monotonic() - started
            time.sleep(point.warmup_s)  # only sets where the window starts
            watcher.measure_from(time.time())
            result = self.window(point, nodes, ports)
            result["spread_s"] = round(spread_s, 1)
            result["first_row_visible_s"] = (None if watcher.first_visible_at is None
                                             else round(watcher.first_visible_at - started, 2))
            result["end_to_end_s"] = percentiles(list(watcher.latencies_s))
            if point.rate == 0:
                result["burst_after_idle_s"] = self.burst_after_idle(name, watcher)
            if point.kill and point.nodes > 1:
                result["kill_to_durable_s"] = self.kill_to_durable(name, nodes[-1])
            return result
        finally:
            watcher.stop()
            producer.stop()
            for node in nodes:
                node.stop()

    def wait_spread(self, name: str, point: Point) -> None:
        """Until every node is a live member, every partition is owned, and the owner counts held
        still for 5 s. Not that every node owns a partition: two partitions may route to one vnode
        (8 partitions over 256 vnodes collide about one time in nine), and a vnode is never split, so
        8 nodes on 8 partitions can rightly leave one with none."""
        settled: list[object] = [None, 0.0]

        def spread() -> bool:
            owned = self.owners(name)[0]
            counts = sorted(owned.values())
            if len(counts) != point.nodes or sum(counts) != point.partitions:
                settled[0] = None
                return False
            if counts != settled[0]:
                settled[0], settled[1] = counts, time.monotonic()
            return time.monotonic() - float(str(settled[1])) >= 5.0

        wait_until(spread, 300 + 10 * point.nodes, f"{point.nodes} node(s) owning {point.partitions} partitions",
                   interval=1.0)

    def window(self, point: Point, nodes: list[NodeProcess], ports: dict[int, int]) -> dict[str, object]:
        zk_pid, zk_port = self.zk_pid_and_port()
        pids = [n.pid for n in nodes]
        texts_before = [scrape(port) for port in ports.values()]
        threads_before = [thread_cpu(pid) for pid in pids]
        zk_cpu, zk_written, zk_packets = cpu_seconds(zk_pid), written_bytes(zk_pid), zk_packets_received("127.0.0.1", zk_port)
        spy = None
        if point.profile is not None:
            spy = subprocess.Popen(
                [str(Path(sys.executable).with_name("py-spy")), "record", "--format", "raw", "--threads", "--gil",
                 "--nonblocking", "--rate", "200", "--duration", str(int(point.window_s)), "--pid", str(pids[0]),
                 "--output", str(point.profile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        begun = time.monotonic()
        time.sleep(point.window_s)  # the window; the figures are the counters read around it
        seconds = time.monotonic() - begun
        if spy is not None:
            spy.wait(timeout=60)
        threads_after = [thread_cpu(pid) for pid in pids]
        zk_cpu = cpu_seconds(zk_pid) - zk_cpu
        zk_written = written_bytes(zk_pid) - zk_written
        zk_packets = zk_packets_received("127.0.0.1", zk_port) - zk_packets
        texts_after = [scrape(port) for port in ports.values()]
        rss = [rss_mib(pid) for pid in pids]
        per_node = []
        by_thread: dict[str, float] = {}
        for before, after in zip(threads_before, threads_after, strict=True):
            node_ms = 0.0
            for thread, cpu in after.items():
                spent = (cpu - before.get(thread, 0.0)) * 1000 / seconds
                node_ms += spent
                by_thread[thread] = by_thread.get(thread, 0.0) + spent
            per_node.append(round(node_ms, 1))
        # epochs committed in the window (every node counts each; quiet epochs are 10 s apart)
        epochs = max(1.0, max(a - b for a, b in zip(counter(texts_after, "laminar_epochs_committed_total"),
                                                   counter(texts_before, "laminar_epochs_committed_total"), strict=True)))
        commit_before = buckets(texts_before, "laminar_checkpoint_seconds")
        commit_after = buckets(texts_after, "laminar_checkpoint_seconds")
        pauses = buckets(texts_after, "laminar_handoff_pause_seconds")
        return {
            "nodes": point.nodes, "partitions": point.partitions, "rate_per_s": point.rate,
            "window_s": round(seconds, 1),
            "node_cpu_ms_per_s_summed": round(sum(per_node), 1),
            "node_cpu_ms_per_s": per_node,
            "node_cpu_ms_per_s_by_thread": {k: round(v, 1) for k, v in sorted(by_thread.items(), key=lambda kv: -kv[1])},
            "node_rss_mib": [round(r, 1) for r in rss],
            "cpu_us_per_record": round(sum(per_node) * 1000 / max(point.rate, 1), 1),
            "zk_cpu_ms_per_s": round(zk_cpu * 1000 / seconds, 1),
            "zk_written_bytes_per_s": round(zk_written / seconds),
            "zk_written_bytes_per_epoch": round(zk_written / epochs),
            "zk_requests_per_s": round(zk_packets / seconds, 1),
            "zk_requests_per_epoch": round(zk_packets / epochs, 1),
            "epoch_commit_s_p50": quantile(0.5, commit_before, commit_after),
            "epoch_commit_s_p99": quantile(0.99, commit_before, commit_after),
            "join_pause_s_p99": quantile(0.99, {}, pauses),
            "epochs_committed": round(epochs),
            "batches_per_s": round((sum(counter(texts_after, "laminar_batches_total"))
                                    - sum(counter(texts_before, "laminar_batches_total"))) / seconds, 1),
        }

    def burst_after_idle(self, name: str, watcher: LakeWatcher, records: int = 100) -> dict[str, object]:
        """After an idle window (epochs at the quiet interval): ``records`` produced at once, and
        their latency to the lake (the node asks for an epoch once it holds them)."""
        from confluent_kafka import Producer

        watcher.measure_from(time.time())
        producer = Producer({"bootstrap.servers": self.stack.bootstrap, "linger.ms": 0})
        for i in range(records):
            producer.produce(name, value=b"x" * 100, key=str(i).encode())
        producer.flush(30)
        wait_until(lambda: len(watcher.latencies_s) >= records, 60, f"{records} records of a burst in the lake",
                   interval=0.2)
        return percentiles(list(watcher.latencies_s))

    def kill_to_durable(self, name: str, victim: NodeProcess) -> float | None:
        killed = time.monotonic()
        victim.kill()
        marks = {partition: high for partition, (_, high) in self.owners(name)[1].items()}

        def durable() -> bool:
            cursors = self.owners(name)[1]
            return all((cursors.get(p, (None, 0))[0] or -1) >= mark for p, mark in marks.items())

        try:
            wait_until(durable, 180, "every partition durable past the kill", interval=0.5)
        except TimeoutError:
            return None
        return round(time.monotonic() - killed, 1)


# -- the grid and its plot --------------------------------------------------------------------------

def plot(results: list[dict[str, object]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in results if "error" not in r]
    rates = sorted({int(str(r["rate_per_s"])) for r in results})
    figure, axes = plt.subplots(1, len(rates) + 1, figsize=(6 * (len(rates) + 1), 4.5))
    for axis, rate in zip(axes, rates, strict=False):
        for partitions in sorted({int(str(r["partitions"])) for r in results}):
            line = sorted((int(str(r["nodes"])), float(str(r["node_cpu_ms_per_s_summed"]))) for r in results
                          if r["rate_per_s"] == rate and r["partitions"] == partitions)
            axis.plot([n for n, _ in line], [c for _, c in line], marker="o", label=f"{partitions} partitions")
        axis.set_title(f"node CPU, summed, at {rate:,} records/s" if rate else "node CPU, summed, idle")
        axis.set_xlabel("nodes")
        axis.set_ylabel("CPU ms per second")
        axis.set_xscale("log", base=2)
        axis.legend()
    node_counts = sorted({int(str(r["nodes"])) for r in results})
    for axis in axes[:-1]:
        axis.set_xticks(node_counts, [str(n) for n in node_counts])
    zk_axis = axes[-1]
    for rate, style in zip(rates, ("-", "--", ":", "-."), strict=False):
        for partitions in sorted({int(str(r["partitions"])) for r in results}):
            line = sorted((int(str(r["nodes"])), float(str(r["zk_written_bytes_per_s"]))) for r in results
                          if r["rate_per_s"] == rate and r["partitions"] == partitions)
            zk_axis.plot([n for n, _ in line], [b / 1024 for _, b in line], style, marker="o",
                         label=f"{partitions} partitions, {rate:,} records/s")
    zk_axis.set_xscale("log", base=2)
    zk_axis.set_xticks(node_counts, [str(n) for n in node_counts])
    zk_axis.set_title("ZooKeeper KiB written per second (epochs are 10 s apart when idle)")
    zk_axis.set_xlabel("nodes")
    zk_axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def summarize(folded: Path, top: int = 25) -> dict[str, object]:
    """A py-spy raw profile's samples by thread, and its functions by inclusive share of the samples."""
    threads: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        threads[frames[0]] = threads.get(frames[0], 0) + count
        for frame in set(frames[1:]):
            inclusive[frame] = inclusive.get(frame, 0) + count
    ranked = sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]
    return {"samples": total, "threads": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
            "inclusive_share": {frame: round(n / max(total, 1), 3) for frame, n in ranked}}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("point", "grid", "plot", "profile-summary"))
    parser.add_argument("files", nargs="*", help="plot: the grid's JSON and the PNG to write")
    parser.add_argument("--nodes", default="1")
    parser.add_argument("--partitions", default="1000")
    parser.add_argument("--rate", "--rates", dest="rates", default="2000")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--kill", action="store_true", help="after the window, SIGKILL a node: time to durable again")
    parser.add_argument("--out", type=Path, help="grid: also write the JSON here")
    parser.add_argument("--node-args", default="", help="more flags for every node, as one string")
    parser.add_argument("--profile", type=Path, help="point: a py-spy profile of node 1 over the window (folded)")
    args = parser.parse_args()
    if args.what == "profile-summary":
        print(json.dumps(summarize(Path(args.files[0])), indent=2))
        return
    if args.what == "plot":
        plot(json.loads(Path(args.files[0]).read_text())["points"], Path(args.files[1]))
        return
    base = Path(tempfile.mkdtemp(prefix="laminar-bench-scale-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers")
    try:
        bench = ScaleBench(stack, base)
        points = [Point(n, p, r, args.warmup, args.window, args.kill, tuple(args.node_args.split()), args.profile)
                  for r in ints(args.rates) for p in ints(args.partitions) for n in ints(args.nodes)]
        results = []
        for point in points:
            try:
                results.append(bench.run(point))
            except Exception as exc:  # noqa: BLE001 - one point failing keeps the others
                results.append({"nodes": point.nodes, "partitions": point.partitions, "rate_per_s": point.rate,
                                "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        document = {"points": results}
        if args.out:
            args.out.write_text(json.dumps(document, indent=2))
        print(json.dumps(document if args.what == "grid" else results[0], indent=2))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
