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
from laminar_kafka.errors import ConfigurationError
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
    way (the caller judges it), after passing each one to ``progress``. A keyed table (upsert mode)
    holds only the last change of each key: its report counts an offset present once the table's
    epoch record moved past it (:func:`~laminar_kafka.cluster.ops.verify_upsert.applied_report`)."""
    from laminar_kafka.cluster.ops.verify_upsert import applied_report

    last: list[VerifyReport] = []
    keyed = lake is not None and lake.iceberg is not None and bool(lake.iceberg.upsert_keys)

    def caught_up() -> bool:
        report = applied_report(bootstrap, topic, lake) if keyed and lake else audit_output(bootstrap, topic, output, lake)
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


@dataclass
class _DemoPipeline:
    """The demo's pipeline on a running dev stack: its topic (8 partitions), output and lake, the
    flags every node gets, and the node processes launched so far (stopped by :meth:`stop_nodes`)."""

    stack: DevStack
    kafka: KafkaTarget
    base: Path
    lake: LakeTarget
    node_flags: list[str]
    topic: str = "demo-orders"
    nodes: list[NodeProcess] = field(default_factory=list)

    @classmethod
    def on(cls, stack: DevStack, kafka: KafkaTarget, base: Path, table_format: TableFormat,
           secure: bool) -> _DemoPipeline:
        """The pipeline ``demo`` landing under ``base/output`` in ``table_format`` (Iceberg: an
        embedded SQLite catalog); ``secure``: the nodes read the stack's ``client.toml``."""
        pipeline = "demo"
        iceberg = None if table_format is TableFormat.PARQUET else IcebergSettings(namespace=table_name_of(pipeline))
        flags = ["--checkpoint-interval-ms", "1000", "--session-timeout-ms", "4000",
                 "--table-format", table_format.value]
        if secure:
            flags += ["--config", str(stack.client_config_path)]
        return cls(stack, kafka, base, LakeTarget(str(base / "output"), table_format, pipeline, iceberg), flags)

    @property
    def bootstrap(self) -> str:
        return client_config(self.kafka).bootstrap

    def launch(self, node_id: int) -> NodeProcess:
        """Start node ``node_id`` (returns at once; the node is stopped by :meth:`stop_nodes`)."""
        node = NodeProcess.launch(node_id, bootstrap=self.bootstrap, topic=self.topic, output=self.lake.output,
                                  zk=self.stack.zk_hosts, pipeline=self.lake.pipeline, log_dir=self.base / "logs",
                                  extra=self.node_flags)
        self.nodes.append(node)
        return node

    def owners(self) -> dict[int, int]:
        """Partitions per live node, as ``laminar-kafka status`` reads them ({} while it cannot)."""
        from laminar_kafka.cluster.ops.status import collect_status

        try:
            status = collect_status(bootstrap=self.kafka, topics=[self.topic], zk=self.stack.zk_hosts, state_dir=None,
                                    pipeline=self.lake.pipeline, source_identity="kafka")
        except (ClusterError, ConfigurationError):
            return {}
        return {n.node_id: len(n.partitions) for n in status.nodes if n.live}

    def audit(self) -> VerifyReport:
        return audit_output(self.kafka, self.topic, self.lake.output, self.lake)

    def stop_nodes(self) -> None:
        for node in self.nodes:
            node.stop()


@dataclass(frozen=True)
class _Disruptions:
    """What the demo's scenario measured: the recovery after the SIGKILL, the planned leave's exit code."""

    recovery_s: float
    leave_exit_code: int


def _start_stack(base: Path, secure: bool, progress: _Progress) -> tuple[DevStack, KafkaTarget]:
    """One Kafka (KRaft) broker and one ZooKeeper server under ``base/servers``; the Kafka target every
    client uses (SASL_SSL when ``secure``)."""
    progress.step(f"starting Kafka (KRaft) and ZooKeeper under {base} ...")
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers", secure=secure)
    kafka: KafkaTarget = stack.sasl_ssl_client() if secure else stack.bootstrap
    progress.step(f"dev stack healthy in {stack.startup_seconds:.1f}s: kafka {client_config(kafka).bootstrap}"
                  f"{' (SASL_SSL, SCRAM-SHA-512)' if secure else ''}, zookeeper {stack.zk_hosts}")
    return stack, kafka


def _rebalance_kill_and_leave(demo: _DemoPipeline, progress: _Progress) -> _Disruptions:
    """The scenario while production runs: three nodes share the 8 partitions, a fourth joins (a live
    rebalance), the second is SIGKILLed (its partitions move without a drain), the third is SIGTERMed
    (a planned leave). Each step waits (bounded, :class:`WaitTimeout`) for the cluster to settle."""
    for node_id in (1, 2, 3):
        demo.launch(node_id)
    wait_until(lambda: sorted(demo.owners().values()) == [2, 3, 3], 60, "3 nodes sharing 8 partitions")
    progress.step(f"3 nodes running: partitions per node {demo.owners()}")
    time.sleep(3)
    demo.launch(4)
    took = wait_until(lambda: sorted(demo.owners().values()) == [2, 2, 2, 2], 60, "node 4 joining")
    progress.step(f"node 4 joined by a live rebalance in {took:.1f}s: {demo.owners()}")
    time.sleep(3)
    victim = demo.nodes[1]
    killed_at = time.monotonic()
    victim.kill()
    progress.step(f"SIGKILLed node {victim.node_id}; waiting for its partitions to move ...")
    wait_until(lambda: victim.node_id not in demo.owners() and sum(demo.owners().values()) == 8, 60,
               "recovery after the kill")
    before = demo.audit()
    recovery = time.monotonic() - killed_at
    progress.step(f"recovered in {recovery:.1f}s: {demo.owners()} ({before.missing} records still to land)")
    time.sleep(2)
    leaver = demo.nodes[2]
    leaver.terminate()
    code = leaver.wait(90)
    progress.step(f"SIGTERMed node {leaver.node_id}: planned leave finished with exit code {code}; {demo.owners()}")
    return _Disruptions(recovery_s=recovery, leave_exit_code=code)


def _summary(report: VerifyReport, disruptions: _Disruptions, pauses: Sequence[float], rate: int,
             catch_up_s: float, landed_in_s: float, elapsed_s: float) -> dict[str, object]:
    """The demo's figures (printed as ``key: value`` lines, or as JSON)."""
    records = sum(p.expected for p in report.partitions)
    return {
        "ok": report.ok,
        "records": records,
        "missing": report.missing,
        "duplicated": report.duplicated,
        "handoff_pause_s": {"count": len(pauses), "p50": round(_percentile(pauses, 0.5), 3),
                            "p99": round(_percentile(pauses, 0.99), 3), "max": round(max(pauses, default=0.0), 3)},
        "recovery_after_sigkill_s": round(disruptions.recovery_s, 2),
        "catch_up_s": round(catch_up_s, 2),
        "planned_leave_exit_code": disruptions.leave_exit_code,
        "produce_rate_per_s": rate,
        # records landed exactly once per second, from the first record produced to caught up
        # (bounded by the produce rate: bench/bench_cluster.py measures the peak)
        "throughput_records_per_s": round(records / landed_in_s, 1),
        "elapsed_s": round(elapsed_s, 1),
    }


def _print_results(report: VerifyReport, summary: dict[str, object], demo: _DemoPipeline, as_json: bool) -> None:
    """The audit's table, for Iceberg the table queried per partition (its total added to ``summary``
    as ``iceberg_rows``), then the summary."""
    print()
    print(report.table())
    iceberg = demo.lake.iceberg
    if iceberg is not None:
        print(f"\nthe Iceberg table {iceberg.namespace}.{demo.lake.table_of(demo.topic)}, queried "
              "(SELECT _partition, count(*) ... GROUP BY _partition):")
        counts = rows_per_partition(demo.lake, demo.topic)
        print("\n".join(f"  partition {p}: {n} rows" for p, n in sorted(counts.items())))
        summary["iceberg_rows"] = sum(counts.values())
    print()
    print(json.dumps(summary, indent=2) if as_json else "\n".join(f"{k}: {v}" for k, v in summary.items()))


def run_demo(workdir: str | None = None, rate: int = 5000, as_json: bool = False, secure: bool = False,
             table_format: TableFormat = TableFormat.PARQUET) -> int:
    """Run the whole demo; returns 0 when the final audit finds nothing missing or duplicated.
    ``secure``: every client (producer, nodes, status, audit) talks SASL_SSL (SCRAM-SHA-512) to a
    secured broker, the nodes through the stack's ``client.toml``. ``table_format`` iceberg: the
    nodes land into an Iceberg table (embedded SQLite catalog), audited and queried at the end.
    The stack, the producer and every node are stopped on the way out (the stack's directory is
    removed unless ``workdir`` was given)."""
    progress = _Progress()
    base = Path(workdir or tempfile.mkdtemp(prefix="laminar-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    stack, kafka = _start_stack(base, secure, progress)
    demo: _DemoPipeline | None = None
    producer: ContinuousProducer | None = None
    try:
        demo = _DemoPipeline.on(stack, kafka, base, table_format, secure)
        create_topic(kafka, demo.topic, 8)
        producer = ContinuousProducer(kafka, demo.topic, rate, 8).start()
        producing_since = time.monotonic()
        progress.step(f"topic {demo.topic} (8 partitions) created; producing {rate} records/s")
        disruptions = _rebalance_kill_and_leave(demo, progress)
        producer.stop()
        progress.step(f"producer stopped after {producer.acked} acknowledged records; waiting to catch up ...")
        caught_started = time.monotonic()
        report = wait_caught_up(kafka, demo.topic, demo.lake.output, 90,
                                lambda r: progress.step(f"  {r.missing} missing, {r.duplicated} duplicated"), demo.lake)
        elapsed = time.monotonic() - progress.started
        landed_in = time.monotonic() - producing_since
        pauses = handoff_pauses(demo.nodes)
        summary = _summary(report, disruptions, pauses, rate, catch_up_s=time.monotonic() - caught_started,
                           landed_in_s=landed_in, elapsed_s=elapsed)
        _print_results(report, summary, demo, as_json)
        return 0 if report.ok and disruptions.leave_exit_code == 0 else 1
    finally:
        if producer is not None:
            producer.stop()
        if demo is not None:
            demo.stop_nodes()
        stack.stop(clean=workdir is None)
