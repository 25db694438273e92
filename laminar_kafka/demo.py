"""`laminar-kafka demo`, and the audit helpers it shares with the end-to-end tests.

The demo, from nothing: a dev stack (Kafka KRaft + ZooKeeper as local processes), an 8-partition
topic, a continuous producer, three nodes as separate processes; then a fourth node joins (a live
rebalance), one node is SIGKILLed (its vnodes move without a drain, from the last manifest), another
is SIGTERMed (a planned leave); production stops, the cluster catches up, and the verify report is
printed with the handoff pauses, the recovery time and the throughput.

:func:`audit_output` and :func:`wait_caught_up` are used by ``tests/integration/cluster``,
``bench/bench_cluster.py`` and the chaos campaign too.
"""
from __future__ import annotations

import contextlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from laminar_kafka.cluster.errors import ClusterError
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.cluster.ops.verify import VerifyReport, audit, read_topic
from laminar_kafka.cluster.ops.verify_lake import read_lake_output, rows_per_partition
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.producers import ContinuousProducer
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from laminar_kafka.kafka_source.clients import KafkaTarget, client_config

__all__ = ["audit_output", "handoff_pauses", "run_demo", "wait_caught_up"]

_HANDOFF_RE = re.compile(r"handoff partition=(\S+) pause_ms=([0-9.]+)")


def audit_output(bootstrap: KafkaTarget, topic: str, output: str, lake: LakeTarget | None = None) -> VerifyReport:
    """The exactly-once audit of `output` (a Parquet tree, or ``lake``) against `topic`
    (read_committed, up to the high watermarks)."""
    fs, root = open_output(output)
    expected, highs, lows = read_topic(bootstrap, topic)
    target = lake or LakeTarget(output, TableFormat.PARQUET, "", None)
    return audit(topic, expected, highs, read_lake_output(target, fs, root, topic), lows)


def wait_caught_up(
    bootstrap: KafkaTarget, topic: str, output: str, timeout: float,
    progress: Callable[[VerifyReport], None] | None = None, lake: LakeTarget | None = None,
) -> VerifyReport:
    """Audit every second until nothing is missing (or ``timeout``); returns the last report either
    way (the caller judges it), after passing each one to ``progress``."""
    last: list[VerifyReport] = []

    def caught_up() -> bool:
        report = audit_output(bootstrap, topic, output, lake)
        last[:] = [report]
        if progress is not None:
            progress(report)
        return report.missing == 0

    with contextlib.suppress(WaitTimeout):
        wait_until(caught_up, timeout, "catch-up", interval=1.0)
    return last[0]


def handoff_pauses(nodes: Sequence[NodeProcess]) -> list[float]:
    """Handoff pauses (seconds) the nodes logged, in the order found."""
    return [float(m.group(2)) / 1000.0 for node in nodes for m in _HANDOFF_RE.finditer(node.log_text())]


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@dataclass
class _Progress:
    started: float = field(default_factory=time.monotonic)

    def step(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)


def run_demo(workdir: str | None = None, rate: int = 5000, as_json: bool = False, secure: bool = False,
             table_format: TableFormat = TableFormat.PARQUET) -> int:
    """Run the whole demo; returns 0 when the final audit finds nothing missing or duplicated.
    ``secure``: every client (producer, nodes, status, audit) talks SASL_SSL (SCRAM-SHA-512) to a
    secured broker, the nodes through the stack's ``client.toml``. ``table_format`` iceberg: the
    nodes land into an Iceberg table (embedded SQLite catalog), audited and queried at the end."""
    from laminar_kafka.cluster.ops.status import collect_status

    progress = _Progress()
    base = Path(workdir or tempfile.mkdtemp(prefix="laminar-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    progress.step(f"starting Kafka (KRaft) and ZooKeeper under {base} ...")
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers", secure=secure)
    kafka: KafkaTarget = stack.sasl_ssl_client() if secure else stack.bootstrap
    bootstrap = client_config(kafka).bootstrap
    progress.step(f"dev stack healthy in {stack.startup_seconds:.1f}s: kafka {bootstrap}"
                  f"{' (SASL_SSL, SCRAM-SHA-512)' if secure else ''}, zookeeper {stack.zk_hosts}")
    nodes: list[NodeProcess] = []
    producer: ContinuousProducer | None = None
    topic, pipeline, output = "demo-orders", "demo", str(base / "output")
    try:
        create_topic(kafka, topic, 8)
        producer = ContinuousProducer(kafka, topic, rate, 8).start()
        producing_since = time.monotonic()
        progress.step(f"topic {topic} (8 partitions) created; producing {rate} records/s")
        extra = ["--checkpoint-interval-ms", "1000", "--session-timeout-ms", "4000",
                 "--table-format", table_format.value]
        lake = LakeTarget(output, table_format, pipeline, None if table_format is TableFormat.PARQUET
                          else IcebergSettings(namespace=table_name_of(pipeline)))
        if secure:
            extra += ["--config", str(stack.client_config_path)]

        def launch(node_id: int) -> NodeProcess:
            node = NodeProcess.launch(node_id, bootstrap=bootstrap, topic=topic, output=output, zk=stack.zk_hosts,
                                      pipeline=pipeline, log_dir=base / "logs", extra=extra)
            nodes.append(node)
            return node

        def status() -> object:
            return collect_status(bootstrap=kafka, topics=[topic], zk=stack.zk_hosts, state_dir=None,
                                  pipeline=pipeline, source_identity="kafka")

        def owners() -> dict[int, int]:
            try:
                return {n.node_id: len(n.partitions) for n in status().nodes if n.live}  # type: ignore[attr-defined]
            except ClusterError:
                return {}

        for node_id in (1, 2, 3):
            launch(node_id)
        wait_until(lambda: sorted(owners().values()) == [2, 3, 3], 60, "3 nodes sharing 8 partitions")
        progress.step(f"3 nodes running: partitions per node {owners()}")
        time.sleep(3)
        launch(4)
        took = wait_until(lambda: sorted(owners().values()) == [2, 2, 2, 2], 60, "node 4 joining")
        progress.step(f"node 4 joined by a live rebalance in {took:.1f}s: {owners()}")
        time.sleep(3)
        victim = nodes[1]
        killed_at = time.monotonic()
        victim.kill()
        progress.step(f"SIGKILLed node {victim.node_id}; waiting for its partitions to move ...")
        wait_until(lambda: victim.node_id not in owners() and sum(owners().values()) == 8, 60, "recovery after the kill")
        before = audit_output(kafka, topic, output, lake)
        recovery = time.monotonic() - killed_at
        progress.step(f"recovered in {recovery:.1f}s: {owners()} ({before.missing} records still to land)")
        time.sleep(2)
        leaver = nodes[2]
        leaver.terminate()
        code = leaver.wait(90)
        progress.step(f"SIGTERMed node {leaver.node_id}: planned leave finished with exit code {code}; {owners()}")
        producer.stop()
        progress.step(f"producer stopped after {producer.acked} acknowledged records; waiting to catch up ...")
        caught_started = time.monotonic()
        report = wait_caught_up(kafka, topic, output, 90,
                                lambda r: progress.step(f"  {r.missing} missing, {r.duplicated} duplicated"), lake)
        elapsed = time.monotonic() - progress.started
        landed_in = time.monotonic() - producing_since
        pauses = handoff_pauses(nodes)
        summary = {
            "ok": report.ok,
            "records": sum(p.expected for p in report.partitions),
            "missing": report.missing,
            "duplicated": report.duplicated,
            "handoff_pause_s": {"count": len(pauses), "p50": round(_percentile(pauses, 0.5), 3),
                                "p99": round(_percentile(pauses, 0.99), 3), "max": round(max(pauses, default=0.0), 3)},
            "recovery_after_sigkill_s": round(recovery, 2),
            "catch_up_s": round(time.monotonic() - caught_started, 2),
            "planned_leave_exit_code": code,
            "produce_rate_per_s": rate,
            # records landed exactly once per second, from the first record produced to caught up
            # (bounded by the produce rate: bench/bench_cluster.py measures the peak)
            "throughput_records_per_s": round(sum(p.expected for p in report.partitions) / landed_in, 1),
            "elapsed_s": round(elapsed, 1),
        }
        print()
        print(report.table())
        if table_format is TableFormat.ICEBERG:
            print(f"\nthe Iceberg table {lake.iceberg.namespace}.{lake.table_of(topic)}, queried "  # type: ignore[union-attr]
                  "(SELECT _partition, count(*) ... GROUP BY _partition):")
            counts = rows_per_partition(lake, topic)
            print("\n".join(f"  partition {p}: {n} rows" for p, n in sorted(counts.items())))
            summary["iceberg_rows"] = sum(counts.values())
        print()
        print(json.dumps(summary, indent=2) if as_json else "\n".join(f"{k}: {v}" for k, v in summary.items()))
        return 0 if report.ok and code == 0 else 1
    finally:
        if producer is not None:
            producer.stop()
        for node in nodes:
            node.stop()
        stack.stop(clean=workdir is None)
