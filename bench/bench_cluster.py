"""Cluster benchmark (prints JSON): throughput of 1 and 3 nodes, handoff pause with ZooKeeper in the
loop, recovery time after SIGKILL. Nodes are `laminar-kafka run` processes on a local dev stack.

    .venv/bin/python bench/bench_cluster.py [--records 400000] [--session-timeout-ms 4000]

- throughput: a pre-filled 8-partition topic of ``--records`` records (100 bytes); the time from the
  nodes' start until the published output holds every record (includes the nodes' startup), and the
  nodes' CPU (user + system from ``/proc``, start-up included) per record. 3 nodes against 1 on the
  same backlog is the cluster's tax at saturating load: what coordination, epochs and rounds add
  per record (``cluster_tax``: the ratio of CPU per record).
- handoff: under continuous production, nodes join one by one (1 -> 4) and then one leaves; each
  moved partition's pause (round start to the new owner's first row) as logged by the nodes.
- recovery: SIGKILL one of 3 nodes; time until its partitions are owned by live nodes and a
  manifest newer than the kill covers them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connect_figures import cpu_seconds

from laminar_kafka.cluster.ops.status import collect_status
from laminar_kafka.demo import audit_output, handoff_pauses
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.producers import ContinuousProducer, produce
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

TICKS = os.sysconf("SC_CLK_TCK")

PARTITIONS = 8


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Bench:
    def __init__(self, stack: DevStack, base: Path, session_timeout_ms: int) -> None:
        self.stack = stack
        self.base = base
        self.extra = ["--checkpoint-interval-ms", "1000", "--session-timeout-ms", str(session_timeout_ms)]
        self.counter = 0

    def launch(self, name: str, node_id: int, topic: str) -> NodeProcess:
        return NodeProcess.launch(node_id, bootstrap=self.stack.bootstrap, topic=topic, output=str(self.base / name),
                                  zk=self.stack.zk_hosts, pipeline=name, log_dir=self.base / name / "_logs",
                                  extra=self.extra)

    def owners(self, name: str, topic: str) -> dict[int, int]:
        try:
            status = collect_status(bootstrap=self.stack.bootstrap, topics=[topic], zk=self.stack.zk_hosts,
                                    state_dir=None, pipeline=name, source_identity="kafka")
        except Exception:  # noqa: BLE001 - not created yet
            return {}
        return {n.node_id: len(n.partitions) for n in status.nodes if n.live}

    def throughput(self, nodes: int, records: int) -> dict[str, float]:
        name = f"tp{nodes}-{int(time.time())}"
        create_topic(self.stack.bootstrap, name, PARTITIONS)
        produce(self.stack.bootstrap, name, [b"x" * 100] * records, timeout=120)  # round-robin: i % PARTITIONS
        started = time.monotonic()
        procs = [self.launch(name, i + 1, name) for i in range(nodes)]
        try:
            wait_until(lambda: audit_output(self.stack.bootstrap, name, str(self.base / name)).missing == 0, 600,
                       "the throughput run's last record landing", interval=0.5)
            elapsed = time.monotonic() - started
            cpu = 0.0
            for p in procs:
                with open(f"/proc/{p.pid}/stat") as stat:
                    cpu += cpu_seconds(stat.read(), TICKS)
        finally:
            for p in procs:
                p.stop()
        return {"nodes": nodes, "records": records, "seconds": round(elapsed, 2),
                "records_per_s": round(records / elapsed, 1), "cpu_s": round(cpu, 2),
                "cpu_us_per_record": round(cpu / records * 1e6, 2)}

    def wait_spread(self, name: str, live: int, timeout: float = 90.0) -> None:
        even = sorted([PARTITIONS // live + (1 if i < PARTITIONS % live else 0) for i in range(live)])
        wait_until(lambda: sorted(self.owners(name, name).values()) == even, timeout,
                   f"{live} nodes sharing the partitions")

    def handoff(self) -> dict[str, float]:
        name = f"handoff-{int(time.time())}"
        create_topic(self.stack.bootstrap, name, PARTITIONS)
        producer = ContinuousProducer(self.stack.bootstrap, name, 3000, PARTITIONS).start()
        procs = []
        try:
            for node_id in (1, 2, 3, 4):
                procs.append(self.launch(name, node_id, name))
                self.wait_spread(name, node_id)
                time.sleep(2)
            procs[3].terminate()
            procs[3].wait(90)
            self.wait_spread(name, 3)
            time.sleep(2)
        finally:
            producer.stop()
            for p in procs:
                p.stop()
        pauses = handoff_pauses(procs)
        return {"moves": len(pauses), "p50_s": round(percentile(pauses, 0.5), 3),
                "p99_s": round(percentile(pauses, 0.99), 3), "max_s": round(max(pauses, default=0.0), 3)}

    def recovery(self) -> dict[str, float]:
        name = f"recovery-{int(time.time())}"
        create_topic(self.stack.bootstrap, name, PARTITIONS)
        producer = ContinuousProducer(self.stack.bootstrap, name, 2000, PARTITIONS).start()
        procs = []
        try:
            for node_id in (1, 2, 3):
                procs.append(self.launch(name, node_id, name))
            self.wait_spread(name, 3)
            time.sleep(3)
            killed = time.monotonic()
            procs[1].kill()
            self.wait_spread(name, 2)
            moved = time.monotonic() - killed
            # durable again: every partition's manifest cursor moves past where it was at the kill
            status = collect_status(bootstrap=self.stack.bootstrap, topics=[name], zk=self.stack.zk_hosts,
                                    state_dir=None, pipeline=name, source_identity="kafka")
            marks = {p.partition: p.high_watermark for p in status.partitions}

            def durable_past_marks() -> bool:
                now = collect_status(bootstrap=self.stack.bootstrap, topics=[name], zk=self.stack.zk_hosts,
                                     state_dir=None, pipeline=name, source_identity="kafka")
                return all((p.durable_cursor or 0) >= marks[p.partition] for p in now.partitions)

            wait_until(durable_past_marks, 120 - (time.monotonic() - killed), "durable progress after the kill")
            durable = time.monotonic() - killed
        finally:
            producer.stop()
            for p in procs:
                p.stop()
        return {"reassigned_s": round(moved, 2), "durable_again_s": round(durable, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--only-throughput", action="store_true", help="the throughput runs and the tax alone")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="laminar-bench-cluster-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers")
    try:
        bench = Bench(stack, base, args.session_timeout_ms)
        one, three = bench.throughput(1, args.records), bench.throughput(3, args.records)
        result = {
            "throughput_1_node": one,
            "throughput_3_nodes": three,
            "cluster_tax": round(three["cpu_us_per_record"] / one["cpu_us_per_record"], 2),
        }
        if not args.only_throughput:
            result["handoff_pause"] = bench.handoff()
            result["recovery_after_sigkill"] = {**bench.recovery(), "session_timeout_s": args.session_timeout_ms / 1000}
        print(json.dumps(result, indent=2))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
