"""Benchmark: the ZooKeeper coordinator on loopback with 3 members.

Prints one JSON object:
- epoch commit latency p50 / p99 / max (ms): from the leader node's EpochOpened to its
  EpochCommitted, every member acking immediately from its own worker thread;
- ZooKeeper writes per epoch (transactions and write ops: the leader's, plus one ack per owner),
  in total and per node;
- leader failover time (ms): from the leader's session being expired on the server (a second client
  attaches to its session id and closes it) to another member leading, and to the next commit.

    .venv/bin/python bench/bench_coordinator.py [--zk HOST:PORT] [--epochs 300] [--failovers 3]

Without ``--zk`` a standalone ZooKeeper is started via ``laminar_kafka.devstack.stack.DevStack``.
"""
from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kazoo.client import KazooClient

from laminar_kafka.coordinator.base import (
    CoordinatorConfig,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    RoundStarted,
)
from laminar_kafka.coordinator.vnodes.routing import owned_partitions
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from laminar_kafka.devstack.waiting import wait_until

#: the partitions the simulated members ack (routed like a real pipeline's: the leader rejects foreign ones)
BENCH_PARTITIONS = [("t", p) for p in range(64)]


class Member:
    """Acks every epoch it owns vnodes in, from a worker thread; records event times."""

    def __init__(self, coordinator: ZooKeeperCoordinator) -> None:
        self.c = coordinator
        self.opened: dict[int, float] = {}
        self.committed: dict[int, float] = {}
        self.acks = 0
        self.cond = threading.Condition()
        self.work: queue.Queue[EpochOpened | RoundStarted | None] = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()
        coordinator.subscribe(self.on_event)

    def on_event(self, event: CoordinatorEvent) -> None:
        now = time.perf_counter()
        if isinstance(event, EpochOpened):
            self.opened.setdefault(event.epoch, now)
            self.work.put(event)
        elif isinstance(event, RoundStarted):
            self.work.put(event)
        elif isinstance(event, EpochCommitted):
            with self.cond:
                self.committed.setdefault(event.manifest.epoch, now)
                self.cond.notify_all()

    def _run(self) -> None:
        while (event := self.work.get()) is not None:
            snapshot = self.c.assignment()
            if isinstance(event, RoundStarted):
                if any(o == self.c.node_id != t for o, t in zip(snapshot.owners, event.target_owners, strict=True)):
                    try:
                        self.c.report_drain_ready(event.drain_id)
                    except Exception:  # noqa: BLE001 - a superseded round
                        pass
                continue
            owned = sorted(snapshot.vnodes_of(self.c.node_id))
            if snapshot.version != event.assignment_version or not owned:
                continue
            try:
                mine = owned_partitions("bench", BENCH_PARTITIONS, snapshot, self.c.node_id)
                self.c.ack_epoch(EpochAck(self.c.node_id, self.c.boot_id, event.epoch, event.assignment_version,
                                          {"bench": {f"{t}:{p}": event.epoch for t, p in sorted(mine)}}, ()))
                self.acks += 1
            except Exception:  # noqa: BLE001 - a stale epoch during failover is expected
                pass

    def wait_committed(self, predicate, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                hits = [e for e in self.committed if predicate(e)]
                if hits:
                    return min(hits)
                if not self.cond.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() > deadline:
                    raise TimeoutError("no commit")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(hosts: str, epochs: int, failovers: int) -> dict[str, object]:
    chroot = f"bench-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=hosts)
    root.start(timeout=15)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    cfg = CoordinatorConfig(pipeline="bench", hosts=f"{hosts}/{chroot}", session_timeout=4.0,
                            checkpoint_interval=0.02, vnode_count=256, manifests_to_keep=10)
    coords = [ZooKeeperCoordinator(cfg, n) for n in (1, 2, 3)]
    members = [Member(c) for c in coords]
    for c in coords:
        c.start(timeout=20)
    try:
        leader = next(c for c in coords if c.is_leader())
        lm = members[coords.index(leader)]
        # Warm up until all three own vnodes and commit together.
        first = lm.wait_committed(lambda e: True, 30)
        wait_until(lambda: len(coords[0].assignment().nodes()) >= 3, 30, "all three members owning vnodes",
                   interval=0.05)
        start_epoch = lm.wait_committed(lambda e: e > first + 3 and coords[0].assignment().version > 0, 30)
        tx0, ops0 = leader.metrics.extra.get("zk_transactions", 0), leader.metrics.extra.get("zk_write_ops", 0)
        acks0 = sum(m.acks for m in members)
        lm.wait_committed(lambda e: e >= start_epoch + epochs, 120)
        end_epoch = max(lm.committed)
        n = end_epoch - start_epoch
        tx = leader.metrics.extra["zk_transactions"] - tx0
        ops = leader.metrics.extra["zk_write_ops"] - ops0
        acks = sum(m.acks for m in members) - acks0
        latencies = [
            (lm.committed[e] - lm.opened[e]) * 1000 for e in range(start_epoch + 1, end_epoch + 1)
            if e in lm.opened and e in lm.committed
        ]

        failover_ms: list[float] = []
        first_commit_ms: list[float] = []
        for _ in range(failovers):
            leader = next(c for c in coords if c.is_leader())
            others = [c for c in coords if c is not leader]
            watcher = members[coords.index(others[0])]
            last = max(watcher.committed)
            session_id, password = leader.client.client_id
            t0 = time.perf_counter()
            twin = KazooClient(hosts=cfg.hosts, client_id=(session_id, password))
            twin.start(timeout=15)
            twin.stop()
            twin.close()
            wait_until(lambda others=others: any(c.is_leader() for c in others), 30, "a new leader", interval=0.001)
            failover_ms.append((time.perf_counter() - t0) * 1000)
            watcher.wait_committed(lambda e, last=last: e > last + 1, 30)
            first_commit_ms.append((watcher.committed[min(e for e in watcher.committed if e > last)] - t0) * 1000)
            leader.rejoin()
            time.sleep(1.0)
        return {
            "members": 3,
            "epochs_measured": len(latencies),
            "epoch_commit_latency_ms": {
                "p50": round(statistics.median(latencies), 2),
                "p99": round(percentile(latencies, 0.99), 2),
                "max": round(max(latencies), 2),
            },
            "zk_writes_per_epoch": {
                "leader_transactions": round(tx / n, 2),
                "leader_write_ops": round(ops / n, 2),
                "acks": round(acks / n, 2),
                "total_write_ops": round((ops + acks) / n, 2),
                "per_node_write_ops": round((ops + acks) / n / 3, 2),
            },
            "leader_failover_ms": {
                "mechanism": "leader session expired on the server (twin client closes it)",
                "to_new_leader": [round(v, 1) for v in failover_ms],
                "to_next_commit": [round(v, 1) for v in first_commit_ms],
            },
        }
    finally:
        for m in members:
            m.work.put(None)
        for c in coords:
            c.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zk", default="")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    with ExitStack() as stack:
        hosts = args.zk
        if not hosts:
            from laminar_kafka.devstack.stack import DevStack

            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-coordinator-")))
            dev = stack.enter_context(DevStack.create(base_dir=base, kafka_brokers=0, zookeeper_servers=1))
            hosts = dev.zk_hosts
        print(json.dumps(run(hosts, args.epochs, args.failovers), indent=2))


if __name__ == "__main__":
    main()
