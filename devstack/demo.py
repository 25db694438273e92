"""`laminar-kafka demo`, and the pieces it shares with the end-to-end tests.

The demo, from nothing: a dev stack (Kafka KRaft + ZooKeeper as local processes), an 8-partition
topic, a continuous producer, three nodes as separate processes; then a fourth node joins (a live
rebalance), one node is SIGKILLed (its vnodes move without a drain, from the last manifest), another
is SIGTERMed (a planned leave); production stops, the cluster catches up, and the verify report is
printed with the handoff pauses, the recovery time and the throughput.

:class:`NodeProcess`, :class:`ContinuousProducer` and :func:`wait_caught_up` are used by
``tests/integration/cluster`` and ``bench/bench_cluster.py`` too.
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster.errors import ClusterError
from cluster.sink import open_output
from cluster.verify import VerifyReport, audit, read_output, read_topic

logger = logging.getLogger(__name__)

__all__ = ["ContinuousProducer", "NodeProcess", "create_topic", "handoff_pauses", "run_demo", "wait_caught_up"]

_HANDOFF_RE = re.compile(r"handoff partition=(\S+) pause_ms=([0-9.]+)")


@dataclass
class NodeProcess:
    """One `laminar-kafka run` process; its output goes to ``log``."""

    node_id: int
    args: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    @classmethod
    def launch(
        cls,
        node_id: int,
        *,
        bootstrap: str,
        topic: str,
        output: str,
        zk: str | None,
        pipeline: str,
        log_dir: Path,
        extra: Sequence[str] = (),
    ) -> NodeProcess:
        args = [
            sys.executable, "-m", "cluster.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
            "--output", output, "--pipeline", pipeline, "--node-id", str(node_id), *extra,
        ]
        if zk:
            args += ["--zk", zk]
        node = cls(node_id, args, log_dir / f"node-{node_id}.log")
        node.start()
        return node

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.log, "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAMINAR_")}
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.process = subprocess.Popen(self.args, stdout=handle, stderr=subprocess.STDOUT, env=env)
        handle.close()
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM: a planned leave."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Best effort for test teardown: SIGTERM, then SIGKILL after 15 s."""
        if not self.alive():
            return
        self.terminate()
        try:
            self.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


class ContinuousProducer:
    """Produces small records round-robin over partitions at ``rate`` per second from a thread.

    ``partitions`` may be raised while it runs (after partitions were added to the topic).
    """

    def __init__(self, bootstrap: str, topic: str, rate: int, partitions: int) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                                   "acks": "all", "topic.metadata.refresh.interval.ms": 1000})
        self._topic = topic
        self._rate = rate
        self.partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self.produced = 0
        self.acked = 0
        self.failed = 0

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def _delivered(self, err: object, _msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while self.produced < due and not self._stop.is_set():
                try:
                    self._producer.produce(
                        self._topic, value=b"record-%012d" % self.produced, partition=self.produced % self.partitions,
                        on_delivery=self._delivered,
                    )
                    self.produced += 1
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:  # a partition just added: wait for the metadata refresh
                    if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                        raise
                    self._producer.poll(0.05)
            self._producer.poll(0.01)

    def stop(self) -> None:
        """Stop producing, deliver what is queued, and release the client (no reconnect noise
        once the servers stop). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)
        del self._producer


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 30.0,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create `topic` and return once every partition has a leader visible in metadata.

    Raises ClusterError when that does not happen within `timeout` seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=dict(config or {}))
    admin.create_topics([new_topic], operation_timeout=timeout)[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = admin.list_topics(topic, timeout=5).topics.get(topic)
        if info is not None and info.error is None and len(info.partitions) == partitions and all(
            p.leader >= 0 for p in info.partitions.values()
        ):
            return
        time.sleep(0.1)
    raise ClusterError(f"topic {topic} has no leader for every partition after {timeout:.0f}s")


def audit_output(bootstrap: str, topic: str, output: str) -> VerifyReport:
    fs, root = open_output(output)
    expected, highs, lows = read_topic(bootstrap, topic)
    return audit(topic, expected, highs, read_output(fs, root, topic), lows)


def wait_caught_up(
    bootstrap: str, topic: str, output: str, timeout: float, progress: Callable[[VerifyReport], None] | None = None
) -> VerifyReport:
    """Poll the audit until nothing is missing (or ``timeout``); returns the last report."""
    deadline = time.monotonic() + timeout
    while True:
        report = audit_output(bootstrap, topic, output)
        if progress is not None:
            progress(report)
        if report.missing == 0 or time.monotonic() > deadline:
            return report
        time.sleep(1.0)


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


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise ClusterError(f"demo: {what} did not happen within {timeout:.0f}s")
        time.sleep(0.2)
    return time.monotonic() - started


def run_demo(workdir: str | None = None, rate: int = 5000, as_json: bool = False) -> int:
    """Run the whole demo; returns 0 when the final audit finds nothing missing or duplicated."""
    from cluster import devstack
    from cluster.status import collect_status

    progress = _Progress()
    base = Path(workdir or tempfile.mkdtemp(prefix="laminar-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    progress.step(f"starting Kafka (KRaft) and ZooKeeper under {base} ...")
    stack = devstack.DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers")
    progress.step(f"dev stack healthy in {stack.startup_seconds:.1f}s: kafka {stack.bootstrap}, zookeeper {stack.zk_hosts}")
    nodes: list[NodeProcess] = []
    producer: ContinuousProducer | None = None
    topic, pipeline, output = "demo-orders", "demo", str(base / "output")
    try:
        create_topic(stack.bootstrap, topic, 8)
        producer = ContinuousProducer(stack.bootstrap, topic, rate, 8).start()
        producing_since = time.monotonic()
        progress.step(f"topic {topic} (8 partitions) created; producing {rate} records/s")
        extra = ["--checkpoint-interval-ms", "1000", "--session-timeout-ms", "4000"]

        def launch(node_id: int) -> NodeProcess:
            node = NodeProcess.launch(node_id, bootstrap=stack.bootstrap, topic=topic, output=output, zk=stack.zk_hosts,
                                      pipeline=pipeline, log_dir=base / "logs", extra=extra)
            nodes.append(node)
            return node

        def status() -> object:
            return collect_status(bootstrap=stack.bootstrap, topics=[topic], zk=stack.zk_hosts, state_dir=None,
                                  pipeline=pipeline, source_identity="kafka")

        def owners() -> dict[int, int]:
            try:
                return {n.node_id: len(n.partitions) for n in status().nodes if n.live}  # type: ignore[attr-defined]
            except ClusterError:
                return {}

        for node_id in (1, 2, 3):
            launch(node_id)
        _wait_until(lambda: sorted(owners().values()) == [2, 3, 3], 60, "3 nodes sharing 8 partitions")
        progress.step(f"3 nodes running: partitions per node {owners()}")
        time.sleep(3)
        launch(4)
        took = _wait_until(lambda: sorted(owners().values()) == [2, 2, 2, 2], 60, "node 4 joining")
        progress.step(f"node 4 joined by a live rebalance in {took:.1f}s: {owners()}")
        time.sleep(3)
        victim = nodes[1]
        killed_at = time.monotonic()
        victim.kill()
        progress.step(f"SIGKILLed node {victim.node_id}; waiting for its partitions to move ...")
        _wait_until(lambda: victim.node_id not in owners() and sum(owners().values()) == 8, 60, "recovery after the kill")
        before = audit_output(stack.bootstrap, topic, output)
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
        report = wait_caught_up(stack.bootstrap, topic, output, 90,
                                lambda r: progress.step(f"  {r.missing} missing, {r.duplicated} duplicated"))
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
        print()
        print(json.dumps(summary, indent=2) if as_json else "\n".join(f"{k}: {v}" for k, v in summary.items()))
        return 0 if report.ok and code == 0 else 1
    finally:
        if producer is not None:
            producer.stop()
        for node in nodes:
            node.stop()
        stack.stop(clean=workdir is None)
