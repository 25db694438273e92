"""Control-plane benchmark: many simulated nodes on one machine against one real ZooKeeper (prints JSON).

    .venv/bin/python bench/bench_control_plane.py --nodes 32 --partitions 20000 --duration 20 --json
    .venv/bin/python bench/bench_control_plane.py --nodes 100 --partitions 100000 --kill-count 10 \\
        --kill-leader --restart-zk --json
    .venv/bin/python bench/bench_control_plane.py --plot grid.jsonl docs/control_plane.png

What is real: each node is the real :class:`~laminar_kafka.coordinator.zk.coordinator.ZooKeeperCoordinator`
(its own kazoo session, member entry, election candidate, watches, leader loop, placement, drain rounds,
acks, chunked and delta-encoded manifests, garbage collection) on a real ZooKeeper server (devstack's,
one server). What is simulated: the node runtime around it is the smallest faithful part of
``cluster.runtime`` (:mod:`control_plane.node`: sources per owned vnode, drains, acks of the cursors that
moved, staged output published on commit); the sources are synthetic logs (``--rate`` records/s over the
partitions, no Kafka) and the lake is in memory, checked exactly once at the end (no files). All nodes
run in this one process, one worker thread each plus the coordinator's and kazoo's threads.

What it does not measure: fetching, decoding and writing records (the data plane: ``bench_scale.py``),
Kafka's group-free assignment of real consumers, network latency between hosts (everything is on
loopback), and failure detection (a kill ends the session at once: add the session timeout). On a
2-core machine the nodes share the cores with ZooKeeper and each other, so latencies include CPU
queueing a real deployment (one node per host) does not have; ``process_cores`` says how busy it was.

The result: ``epoch_commit_p50_s``/``p99_s`` (the leader's EpochOpened to EpochCommitted over the
window), ``rebalance_s`` (a node joins: until it owns its vnodes and its first records landed),
``kill_recovery_s`` (``--kill-count`` nodes killed at once: until every partition's records up to the
kill are visible), ``leader_kill_recovery_s``, ``zk_restart_recovery_s``, ``zk_write_bytes_per_s`` (the
server's disk writes, ``/proc/<pid>/io``), ``zk_znodes`` (``mntr``), ``leader_cpu_ms_per_s`` and
``node_cpu_ms_per_s`` (the threads of the leader's coordinator and of an average other node), ``exact``.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from control_plane.run import ControlPlaneRun, RunConfig

from laminar_kafka.devstack.stack import DevStack


def run_point(config: RunConfig) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-control-plane-") as base:
        with DevStack.create(base_dir=Path(base), kafka_brokers=0, zookeeper_servers=1) as stack:
            assert stack.zookeeper is not None
            ensemble = stack.zookeeper

            def zk_pid() -> int:
                pid = ensemble.members[0].pid
                assert pid is not None
                return pid

            return ControlPlaneRun(config, stack.zk_hosts, zk_pid, lambda: ensemble.restart(0)).run()


def plot(points: list[dict[str, object]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in points if "error" not in p]
    panels = (("epoch_commit_p99_s", "epoch commit p99 (s)", 1.0),
              ("zk_write_bytes_per_s", "ZooKeeper writes (KiB/s)", 1024.0),
              ("leader_cpu_ms_per_s", "leader CPU (ms/s)", 500.0),
              ("rebalance_s", "join: owns its share, records flow (s)", 10.0))
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for axis, (key, title, goal) in zip(axes, panels, strict=True):
        for nodes in sorted({int(str(p["nodes"])) for p in points}):
            line = sorted((int(str(p["partitions"])), float(str(p[key]))) for p in points
                          if p["nodes"] == nodes and p.get(key) is not None)
            scale = 1024.0 if key == "zk_write_bytes_per_s" else 1.0
            axis.plot([x for x, _ in line], [y / scale for _, y in line], marker="o", label=f"{nodes} nodes")
        axis.axhline(goal, color="grey", linestyle=":", label="goal at 100 x 100k")
        axis.set_xscale("log")
        axis.set_xlabel("partitions")
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=8)
    figure.suptitle("control plane, simulated nodes on one ZooKeeper (2-core machine, 2 s epochs)", fontsize=10)
    figure.tight_layout()
    figure.savefig(png, dpi=100)


COLUMNS = (("nodes", "nodes"), ("partitions", "partitions"), ("epochs_in_window", "epochs"),
           ("epoch_commit_p50_s", "commit p50 s"), ("epoch_commit_p99_s", "commit p99 s"),
           ("zk_write_bytes_per_s", "ZK bytes/s"), ("zk_requests_per_s", "ZK requests/s"), ("zk_znodes", "znodes"),
           ("leader_cpu_ms_per_s", "leader ms/s"), ("node_cpu_ms_per_s", "node ms/s"),
           ("process_cores", "cores busy"), ("rebalance_s", "join s"), ("kill_recovery_s", "kill s"),
           ("exact", "exact"))


def table(points: list[dict[str, object]]) -> str:
    """The grid as a Markdown table (a failed point shows its error)."""
    lines = ["| " + " | ".join(title for _, title in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for point in sorted(points, key=lambda p: (int(str(p["nodes"])), int(str(p["partitions"])))):
        if "error" in point:
            lines.append(f"| {point['nodes']} | {point['partitions']} | error: {point['error']} |")
            continue
        cells = [f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
                 for v in (point.get(key) for key, _ in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=20.0, help="the measured window (seconds)")
    parser.add_argument("--rate", type=float, default=10_000.0, help="records/s over all partitions")
    parser.add_argument("--epoch", type=float, default=2.0, help="the checkpoint interval (seconds)")
    parser.add_argument("--session-timeout", type=float, default=6.0)
    parser.add_argument("--kill-count", type=int, default=1, help="nodes killed at once after the join (0: none)")
    parser.add_argument("--kill-leader", action="store_true")
    parser.add_argument("--restart-zk", action="store_true", help="restart the (1-server) ZooKeeper")
    parser.add_argument("--share-manifests", action="store_true",
                        help="the simulated nodes decode each committed manifest once between them")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout (else indented)")
    parser.add_argument("--plot", nargs=2, metavar=("POINTS_JSONL", "PNG"), help="plot a grid's JSON lines")
    parser.add_argument("--table", metavar="POINTS_JSONL", help="print a grid's JSON lines as a Markdown table")
    args = parser.parse_args()
    # kazoo reports each dropped connection of the kills and the restart: the figures say what happened
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if args.plot or args.table:
        lines = Path(args.plot[0] if args.plot else args.table).read_text().splitlines()
        points = [json.loads(line) for line in lines if line.strip()]
        if args.plot:
            plot(points, Path(args.plot[1]))
        else:
            print(table(points))
        return
    config = RunConfig(args.nodes, args.partitions, args.duration, args.rate, args.epoch, args.session_timeout,
                       args.kill_count, args.kill_leader, args.restart_zk, args.share_manifests)
    result = run_point(config)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
