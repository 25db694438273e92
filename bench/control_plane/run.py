"""One run of the control-plane bench: ``nodes`` simulated nodes on one ZooKeeper, a measured window, then
a join, kills, a leader kill and a ZooKeeper restart, each timed, and the lake checked exactly once.

Recovery times are from the fault to every partition's records up to the high watermark at the fault
landed in the in-memory lake (visible again). A kill ends the session on the server at once, so the
times leave out failure detection (the session timeout, ``session_timeout_s`` in the result: a real
SIGKILLed node is detected that much later).
"""
from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kazoo.client import KazooClient

from control_plane.model import MemoryLake, SyntheticLogs, cursors_to_array, quantile, share_of
from control_plane.node import RETRIED, SOURCE, TOPIC, SimNode
from laminar_kafka.coordinator.base import CoordinatorConfig, Manifest, initial_manifest
from laminar_kafka.coordinator.vnodes.routing import partitions_by_vnode, vnode_loads
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator


@dataclass(frozen=True)
class RunConfig:
    nodes: int
    partitions: int
    duration_s: float
    rate: float = 10_000.0
    epoch_s: float = 2.0
    session_timeout_s: float = 6.0
    #: nodes killed at once (0: none); the leader kill and the ZooKeeper restart are separate switches
    kill_count: int = 1
    kill_leader: bool = False
    restart_zk: bool = False
    #: the simulated nodes share one cache of decoded manifests (see :meth:`ControlPlaneRun.share_manifests`)
    share_manifests: bool = False


def mntr(host: str, port: int) -> dict[str, str]:
    """ZooKeeper's ``mntr`` four-letter word, as key -> value."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"mntr")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return dict(re.findall(r"(zk_\w+)\s+(\S+)", data.decode()))


def thread_cpu_s(native_ids: set[int]) -> float:
    """User + system CPU seconds of this process's threads ``native_ids`` (ended threads count 0)."""
    total = 0
    for tid in native_ids:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / 100.0  # clock ticks: SC_CLK_TCK is 100 on Linux


def write_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> float:
    """Seconds until ``check()`` holds; TimeoutError after ``timeout``."""
    begun = time.monotonic()
    while not check():
        if time.monotonic() - begun > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - begun


class ControlPlaneRun:
    """See the module docstring. ``zk_hosts``: ``host:port``; ``zk_pid`` the server's process (its
    disk writes); ``restart_zk`` restarts that server (a 1-server ensemble)."""

    def __init__(self, config: RunConfig, zk_hosts: str, zk_pid: Callable[[], int],
                 restart_zk: Callable[[], None]) -> None:
        self.config, self.zk_hosts, self.zk_pid, self._restart_zk = config, zk_hosts, zk_pid, restart_zk
        host, port = zk_hosts.split(",")[0].rsplit(":", 1)
        self.zk_address = (host, int(port))
        chroot = f"cp-{uuid.uuid4().hex[:8]}"
        root = KazooClient(hosts=zk_hosts)
        root.start(timeout=30)
        root.ensure_path("/" + chroot)
        root.stop()
        root.close()
        self.coordinator_config = CoordinatorConfig(
            pipeline="bench", hosts=f"{zk_hosts}/{chroot}", session_timeout=config.session_timeout_s,
            checkpoint_interval=config.epoch_s, manifests_to_keep=10)
        keys = [(TOPIC, p) for p in range(config.partitions)]
        vnode_count = self.coordinator_config.vnode_count
        self.vnode_of = np.zeros(config.partitions, dtype=np.int64)
        for vnode, members in partitions_by_vnode(SOURCE, keys, vnode_count).items():
            self.vnode_of[[p for _, p in members]] = vnode
        self.loads = vnode_loads(SOURCE, keys, vnode_count)
        self.logs = SyntheticLogs(config.partitions, config.rate)
        self.lake = MemoryLake(config.partitions)
        self.started_at = time.monotonic()
        self.nodes: list[SimNode] = []
        self._shared: tuple[threading.Lock, dict[int, Manifest], set[int]] = (threading.Lock(), {}, set())
        self.next_id = 1
        #: each fault: what, when (seconds since the start), the lake's gaps and duplicates once it recovered
        self.fault_log: list[dict[str, object]] = []

    # ---- nodes ----------------------------------------------------------------------------------

    def add_node(self, attempts: int = 5) -> SimNode:
        """Start the next node; a start that meets a transient error (ZooKeeper answering after the
        session timeout while many nodes start on two cores) is made again with a new coordinator of
        the same id, as a supervisor restarts a node that failed to start."""
        for attempt in range(attempts):
            coordinator = ZooKeeperCoordinator(self.coordinator_config, self.next_id)
            if self.config.share_manifests:
                self.share_manifests(coordinator)
            node = SimNode(coordinator, self.logs, self.lake, self.vnode_of, self.started_at)
            try:
                node.start()
                break
            except RETRIED:
                node.stop()
                if attempt == attempts - 1:
                    raise
        self.next_id += 1
        if not self.nodes:
            node.coordinator.pin_start(initial_manifest({SOURCE: {}}))
            node.coordinator.set_vnode_load(self.loads)
        self.nodes.append(node)
        return node

    def share_manifests(self, coordinator: ZooKeeperCoordinator) -> None:
        """Make ``coordinator`` read committed manifests through the cache the other simulated nodes
        fill (one lock, one dict): each manifest is read from ZooKeeper and decoded once per process
        instead of once per node. Real nodes, one per host, each read and decode it (the cost is
        reported apart: the codec's decode time and the manifest's bytes times the nodes); here it
        would queue every node behind ``nodes`` decodes per epoch on two cores."""
        store = coordinator._zk_store._manifests
        store._lock, store._cache, store._full_epochs = self._shared

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes if not n.dead]

    def leader(self) -> SimNode:
        return next(n for n in self.live() if n.coordinator.is_leader())

    def owners_settled(self) -> bool:
        live = self.live()
        members = set(live[0].coordinator.assignment().nodes())
        return members == {n.node_id for n in live}

    def seconds(self) -> float:
        return time.monotonic() - self.started_at

    def visible_past(self, marks: np.ndarray) -> Callable[[], bool]:
        return lambda: bool((self.lake.ends() >= marks).all())

    def recovery(self, fault: Callable[[], None], what: str) -> float:
        """Seconds from ``fault()`` to every partition visible past its high watermark at the fault."""
        marks = self.logs.high_watermarks(np.arange(self.config.partitions, dtype=np.int64), self.seconds())
        begun = time.monotonic()
        entry: dict[str, object] = {"fault": what, "at_s": round(self.seconds(), 1)}
        self.fault_log.append(entry)
        fault()
        try:
            wait_for(self.visible_past(marks), 120 + self.config.session_timeout_s * 4, what, interval=0.05)
            return round(time.monotonic() - begun, 2)
        finally:
            entry.update(gaps=self.lake.gaps, duplicates=self.lake.duplicates)

    # ---- the run --------------------------------------------------------------------------------

    def run(self) -> dict[str, object]:
        cfg = self.config
        try:
            for _ in range(cfg.nodes):
                self.add_node()
            spread_s = wait_for(self.owners_settled, 300, f"{cfg.nodes} nodes owning vnodes", interval=0.2)
            first = self.visible_past(self.logs.high_watermarks(np.arange(cfg.partitions, dtype=np.int64),
                                                                self.seconds()))
            wait_for(first, 120, "the first records visible everywhere", interval=0.1)
            result: dict[str, object] = {"nodes": cfg.nodes, "partitions": cfg.partitions, "rate_per_s": cfg.rate,
                                         "shared_manifest_cache": cfg.share_manifests,
                                         "epoch_interval_s": cfg.epoch_s, "session_timeout_s": cfg.session_timeout_s,
                                         "startup_s": round(self.seconds(), 1), "spread_s": round(spread_s, 1)}
            result.update(self.window())
            result.update(self.faults())
            result.update(self.final_check())
            return result
        finally:
            self.stop()

    def window(self) -> dict[str, object]:
        cfg = self.config
        leader = self.leader()
        others = [n for n in self.live() if n is not leader]
        pid = self.zk_pid()
        zk_before, written_before = mntr(*self.zk_address), write_bytes(pid)
        leader_before = thread_cpu_s(leader.threads)
        others_before = sum(thread_cpu_s(n.threads) for n in others)
        last_committed = max(leader.timings.committed, default=0)
        begun = time.monotonic()
        time.sleep(cfg.duration_s)  # the window; the figures are the counters read around it
        seconds = time.monotonic() - begun
        zk_after, written = mntr(*self.zk_address), write_bytes(pid) - written_before
        leader_ms = (thread_cpu_s(leader.threads) - leader_before) * 1000 / seconds
        others_ms = (sum(thread_cpu_s(n.threads) for n in others) - others_before) * 1000 / seconds
        latencies = [leader.timings.committed[e] - leader.timings.opened[e]
                     for e in leader.timings.committed if e > last_committed and e in leader.timings.opened]
        packets = int(zk_after.get("zk_packets_received", 0)) - int(zk_before.get("zk_packets_received", 0))
        p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
        return {
            "window_s": round(seconds, 1),
            "epochs_in_window": len(latencies),
            "epoch_commit_p50_s": None if p50 is None else round(p50, 3),
            "epoch_commit_p99_s": None if p99 is None else round(p99, 3),
            "epoch_commit_max_s": None if not latencies else round(max(latencies), 3),
            "zk_write_bytes_per_s": round(written / seconds),
            "zk_write_bytes_per_epoch": round(written / max(len(latencies), 1)),
            "zk_requests_per_s": round(packets / seconds, 1),
            "zk_znodes": int(zk_after.get("zk_znode_count", 0)),
            "zk_data_bytes": int(zk_after.get("zk_approximate_data_size", 0)),
            "leader_cpu_ms_per_s": round(leader_ms, 1),
            "node_cpu_ms_per_s": round(others_ms / max(len(others), 1), 1),
            "process_cores": round((leader_ms + others_ms) / 1000, 2),
        }

    def faults(self) -> dict[str, object]:
        cfg = self.config
        out: dict[str, object] = {}
        joiner: list[SimNode] = []
        share = share_of(cfg.partitions, len(self.live()) + 1)

        def join() -> None:
            joiner.append(self.add_node())

        begun = time.monotonic()
        self.fault_log.append({"fault": "join", "at_s": round(self.seconds(), 1)})
        join()
        node = joiner[0]
        owned_s = wait_for(lambda: len(node.owned) > 0 and node.landed_records > 0, 120, "a joined node's records",
                           interval=0.05)
        out["rebalance_s"] = round(time.monotonic() - begun, 2)
        out["rebalance_owned_s"] = round(owned_s, 2)
        out["rebalance_share"] = {"owned": len(node.owned), "even_share": share}
        if cfg.kill_count:
            count = min(cfg.kill_count, len(self.live()) - 1)
            victims = [n for n in self.live() if not n.coordinator.is_leader()][-count:]
            out["kill_count"] = count

            def kill_victims() -> None:
                for victim in victims:
                    victim.kill()

            out["kill_recovery_s"] = self.timed(kill_victims, f"{count} node(s) killed")
        if cfg.kill_leader:
            out["leader_kill_recovery_s"] = self.timed(lambda: self.leader().kill(), "the leader killed")
        if cfg.restart_zk:
            out["zk_restart_recovery_s"] = self.timed(self._restart_zk, "ZooKeeper restarted (1 server)")
        return out

    def timed(self, fault: Callable[[], None], what: str) -> float | str:
        """:meth:`recovery`, or the reason it did not recover in time (the run goes on)."""
        try:
            return self.recovery(fault, what)
        except (TimeoutError, StopIteration) as exc:
            return f"error: {exc}"

    def final_check(self) -> dict[str, object]:
        """Stop the logs, wait until every partition's records landed, and compare with the last manifest."""
        frozen = self.seconds()
        for node in self.nodes:
            node.freeze_at = frozen
        marks = self.logs.high_watermarks(np.arange(self.config.partitions, dtype=np.int64), frozen)
        out: dict[str, object] = {}
        try:
            wait_for(self.visible_past(marks), 120, "every record landed after the logs stopped", interval=0.1)
            witness = self.live()[0]
            last = max(witness.timings.committed, default=0)
            wait_for(lambda: max(witness.timings.committed, default=0) > last + 1, 60, "two more epochs",
                     interval=0.1)
        except TimeoutError as exc:  # reported with what did land: the run is not exact
            out["final_error"] = str(exc)
            out["partitions_not_landed"] = int(np.count_nonzero(self.lake.ends() < marks))
        manifest = self.live()[0].coordinator.latest_manifest()
        assert manifest is not None
        cursors = cursors_to_array(manifest.cursors.get(SOURCE, {}), TOPIC, self.config.partitions)
        report = self.lake.report(cursors)
        exact = report.exact and bool((cursors == marks).all()) and "final_error" not in out
        return out | {"exact": exact, "records_landed": report.records, "gaps": report.gaps,
                "duplicates": report.duplicates, "partitions_short": report.short,
                "last_epoch": manifest.epoch, "first_anomalies": list(report.first_anomalies),
                "faults": self.fault_log}

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
