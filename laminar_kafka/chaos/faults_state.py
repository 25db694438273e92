"""Chaos faults on state (issue 21): the control state lost, replaced or old, the lake
behind the control state, and a node that disagrees with the pipeline's pinned settings.

- ``zk-subtree-lost``: ``/laminar/<pipeline>`` deleted recursively while the nodes run (each must
  stop in one line and, restarted by the supervisor, reconcile with the lake) or while every node is
  stopped (SIGTERM, wait for the exits, delete, start them all again);
- ``zk-ensemble-replaced``: every ZooKeeper server killed, its data directory wiped (``myid`` kept),
  started again on the same port, while the nodes run;
- ``zk-rollback``: a copy of ZooKeeper's data directory (the servers stopped for the copy), the
  pipeline runs some epochs, then every node is stopped, ZooKeeper stopped, the copy restored,
  ZooKeeper and the nodes started again (the control state is behind the lake: advance);
- ``lake-rollback``: while every node is stopped, the published files of the last epoch(s) with
  files are deleted from the Parquet tree, and in half the events their records too (Iceberg: every
  table rolled back to the snapshot before its last epoch commit(s)); the lake is behind the control
  state: rewind, the rows land again;
- ``misconfigured-node``: a node with a new id and one pipeline-defining setting changed must exit 2
  within :data:`MISCONFIGURED_BOUND_S` with exactly one line on stderr naming the setting (it runs
  with ``--log-level warning``, so a log line below WARNING is not counted; a warning or a
  traceback is), while the other nodes keep running; anything else fails the run.

Exits the faults cause by design (a running node exiting 1 with "... it reconciles with the lake")
are declared to the supervisor (:meth:`laminar_kafka.chaos.nodes.NodeSet.expect_exits`) and reported as
explained; every other exit stays unexplained. For the kinds that stop the nodes, the fault hits (and
its recovery is measured from) the moment the nodes start again on the lost, old or rolled-back
state, with the high watermarks of that moment as targets.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

from laminar_kafka.chaos.fault_api import Fault, FaultContext, Injection
from laminar_kafka.chaos.lake import RunLake
from laminar_kafka.chaos.plan import FaultEvent
from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.devstack.jvm.servers import JvmServer, ZooKeeperEnsemble
from laminar_kafka.devstack.processes import node_environment

logger = logging.getLogger(__name__)

__all__ = [
    "EXPLAINED_MARKER", "LakeRollback", "MISCONFIGURED_BOUND_S", "MisconfiguredNode", "ZooKeeperReplaced",
    "ZooKeeperRollback", "ZooKeeperSubtreeLost", "delete_subtree", "misconfigured_value", "rollback_epochs",
    "with_setting",
]

#: the end of the one line a node stops with when its control state vanished or went back
EXPLAINED_MARKER = "it reconciles with the lake"
#: how long after a fault a node's exit with that line is explained by it
EXPLAINED_WINDOW_S = 90.0
#: a misconfigured node must have exited within this many seconds
MISCONFIGURED_BOUND_S = 60.0
#: how long the nodes may take to stop on SIGTERM (a planned leave drains)
STOP_TIMEOUT_S = 60.0
ZK_START_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------------
# Shared steps


def _stop_nodes(ctx: FaultContext) -> dict[int, int | None]:
    """SIGTERM every running node, wait for the exits; node id -> exit code."""
    codes = ctx.nodes.stop_running(STOP_TIMEOUT_S)
    if not codes:
        raise ChaosError("no running node to stop")
    ctx.note(f"stopped nodes {sorted(codes)} (exit codes {codes})")
    return codes


def _start_nodes(ctx: FaultContext, node_ids: list[int]) -> None:
    for node_id in sorted(node_ids):
        ctx.nodes.start(node_id)
    ctx.note(f"nodes {sorted(node_ids)} started again")


def _last_epoch(ctx: FaultContext) -> int | None:
    control = ctx.probe.control()
    return control.last_epoch if control is not None else None


def _ensemble(ctx: FaultContext) -> ZooKeeperEnsemble:
    if ctx.stack.zookeeper is None:
        raise ChaosError("the run has no ZooKeeper of its own")
    return ctx.stack.zookeeper


def _data(server: JvmServer) -> Path:
    """A server's transaction logs and snapshots (``myid``, beside them, stays)."""
    return server.workdir / "data" / "version-2"


def _start_servers(ctx: FaultContext, servers: list[JvmServer]) -> None:
    for server in servers:
        server.start()
    for server in servers:
        server.wait_healthy(ZK_START_TIMEOUT_S)
    ctx.probe.reconnect()  # a server behind what the probe saw refuses its session


def delete_subtree(zk_hosts: str, path: str, attempts: int = 50) -> bool:
    """``deleteall path`` (kazoo); retried while running nodes create children under it. True when
    it existed."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError, NotEmptyError

    quiet = logging.getLogger(f"{__name__}.kazoo")
    quiet.setLevel(logging.CRITICAL)
    client = KazooClient(hosts=zk_hosts, timeout=10.0, logger=quiet)
    client.start(timeout=30)
    try:
        existed = client.exists(path) is not None
        for _ in range(attempts):
            try:
                client.delete(path, recursive=True)
            except NoNodeError:
                pass
            except NotEmptyError:
                continue
            if client.exists(path) is None:
                return existed
        raise ChaosError(f"{path} still exists after {attempts} recursive deletes")
    finally:
        client.stop()
        client.close()


# --------------------------------------------------------------------------------------------------
# Control state


class ZooKeeperSubtreeLost(Fault):
    """The pipeline's subtree deleted while the nodes run (``while=running``) or are stopped."""

    kind, role = "zk-subtree-lost", "control state"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        mode = str(event.param("while", "running"))
        details: dict[str, object] = {"while": mode, "last_epoch": _last_epoch(ctx)}
        if mode == "running":
            details["nodes"] = ctx.nodes.running()
            ctx.nodes.expect_exits(self.kind, 1, EXPLAINED_MARKER, EXPLAINED_WINDOW_S)
            targets = ctx.highs()
            delete_subtree(ctx.zk_hosts, ctx.probe.base)
            at = time.monotonic()
            ctx.note(f"deleted {ctx.probe.base} under running nodes {details['nodes']} "
                     f"(epoch {details['last_epoch']} committed)")
            return Injection(at, targets, details)
        codes = _stop_nodes(ctx)
        details["stop_codes"] = codes
        details["last_epoch"] = _last_epoch(ctx)
        delete_subtree(ctx.zk_hosts, ctx.probe.base)
        ctx.note(f"deleted {ctx.probe.base} while every node is stopped (epoch {details['last_epoch']} committed)")
        targets = ctx.highs()
        at = time.monotonic()
        _start_nodes(ctx, list(codes))
        return Injection(at, targets, details)


class ZooKeeperReplaced(Fault):
    """Every ZooKeeper server killed, its data wiped, started again empty at the same address after
    ``down_s``, while the nodes run."""

    kind, role = "zk-ensemble-replaced", "zookeeper"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        servers = list(_ensemble(ctx).servers)
        details: dict[str, object] = {"servers": len(servers), "last_epoch": _last_epoch(ctx),
                                      "nodes": ctx.nodes.running()}
        ctx.nodes.expect_exits(self.kind, 1, EXPLAINED_MARKER, EXPLAINED_WINDOW_S)
        targets = ctx.highs()
        for server in servers:
            server.kill()
        at = time.monotonic()
        for server in servers:
            shutil.rmtree(_data(server), ignore_errors=True)
        time.sleep(event.number("down_s", 1.0))
        _start_servers(ctx, servers)
        details["down_s"] = round(time.monotonic() - at, 1)
        ctx.note(f"ZooKeeper replaced by an empty one (down {details['down_s']}s, epoch {details['last_epoch']} "
                 f"was committed) under running nodes {details['nodes']}")
        return Injection(at, targets, details)


class ZooKeeperRollback(Fault):
    """ZooKeeper's data copied (servers stopped for the copy), ``epochs`` more epochs committed, then
    every node stopped, ZooKeeper restored from the copy, everything started again."""

    kind, role = "zk-rollback", "zookeeper"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        if ctx.run_dir is None:
            raise ChaosError(f"{self.kind} needs the run's directory for its copy")
        servers = list(_ensemble(ctx).servers)
        copy = ctx.run_dir / f"zk-copy-{int(time.monotonic() * 1000)}"
        copied_epoch = _last_epoch(ctx) or 0
        paused = time.monotonic()
        for server in servers:
            server.stop()
        for index, server in enumerate(servers):
            shutil.copytree(_data(server), copy / f"server-{index + 1}")
        _start_servers(ctx, servers)
        details: dict[str, object] = {"copied_at_epoch": copied_epoch,
                                      "copy_pause_s": round(time.monotonic() - paused, 1)}
        ctx.note(f"copied ZooKeeper's data at epoch {copied_epoch} (servers down {details['copy_pause_s']}s)")
        epochs = int(event.number("epochs", 3))

        def aged() -> bool:
            last = _last_epoch(ctx)
            return last is not None and last >= copied_epoch + epochs
        ctx.wait_until(aged, 60.0 + 5.0 * epochs, f"{epochs} epochs after the copy")
        codes = _stop_nodes(ctx)
        details.update(stop_codes=codes, rolled_back_from_epoch=_last_epoch(ctx))
        for server in servers:
            server.stop()
        for index, server in enumerate(servers):
            shutil.rmtree(_data(server), ignore_errors=True)
            shutil.copytree(copy / f"server-{index + 1}", _data(server))
        _start_servers(ctx, servers)
        details["control_epoch_after_restore"] = _last_epoch(ctx)
        ctx.note(f"ZooKeeper restored to its copy of epoch {copied_epoch} (it was at epoch "
                 f"{details['rolled_back_from_epoch']}; the register now says {details['control_epoch_after_restore']})")
        targets = ctx.highs()
        at = time.monotonic()
        _start_nodes(ctx, list(codes))
        return Injection(at, targets, details)


# --------------------------------------------------------------------------------------------------
# Lake


def _records(output: Path) -> list[tuple[int, Path]]:
    from laminar_kafka.cluster.lake.record import RECORDS_DIR, parse_record_name

    found = []
    for path in (output / RECORDS_DIR).glob("epoch-*.json"):
        epoch = parse_record_name(path.name)
        if epoch is not None:
            found.append((epoch, path))
    return sorted(found)


def rollback_epochs(files: dict[int, list[str]], wanted: int) -> list[int]:
    """The epochs a lake rollback removes: from the newest record down to the ``wanted``-th newest
    epoch that has files (so what stays is a prefix of the lake, never a hole); [] when none has."""
    chosen: list[int] = []
    with_files = 0
    for epoch in sorted(files, reverse=True):
        if with_files == wanted:
            break
        chosen.append(epoch)
        with_files += bool(files[epoch])
    return sorted(chosen) if with_files else []


class LakeRollback(Fault):
    """While every node is stopped: the published files of the newest ``epochs`` epochs that have
    files deleted (with the newer epochs' records, which list none), and with ``records`` their
    records too; then the nodes start again."""

    kind, role = "lake-rollback", "output"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        import pyarrow.parquet as pq

        output = ctx.output_dir
        if ctx.table_format not in ("parquet", "iceberg") or (ctx.table_format == "parquet" and output is None):
            raise ChaosError(f"{self.kind} needs the run's output (this run lands into {ctx.table_format})")
        wanted = int(event.number("epochs", 1))
        drop_records = event.flag("records")
        codes = _stop_nodes(ctx)
        if ctx.table_format == "iceberg":
            details = _rollback_iceberg(ctx, wanted)
            ctx.note(f"iceberg tables rolled back: {details}")
            details.update(control_epoch=_last_epoch(ctx), stop_codes=codes)
            targets = ctx.highs()
            at = time.monotonic()
            _start_nodes(ctx, list(codes))
            return Injection(at, targets, details)
        assert output is not None
        records = {epoch: path for epoch, path in _records(output)}
        listed = {epoch: [str(f) for f in json.loads(path.read_text())["files"]] for epoch, path in records.items()}
        chosen = [(epoch, records[epoch], listed[epoch]) for epoch in rollback_epochs(listed, wanted)]
        if not chosen:
            _start_nodes(ctx, list(codes))
            raise ChaosError(f"no epoch record with files under {output}")
        rows = deleted = 0
        for _epoch, _path, files in chosen:
            for relative in files:
                target = output / relative
                if target.is_file():
                    rows += pq.read_metadata(target).num_rows
                    target.unlink()
                    deleted += 1
        if drop_records:
            for _epoch, path, _files in chosen:
                path.unlink()
        epochs = sorted(epoch for epoch, _, _ in chosen)
        details = {"epochs": epochs, "files": deleted, "rows": rows, "records_deleted": drop_records,
                   "control_epoch": _last_epoch(ctx), "stop_codes": codes}
        ctx.note(f"lake rolled back: epochs {epochs}: {deleted} file(s), {rows} row(s) deleted"
                 + (", and their records" if drop_records else " (records kept)"))
        targets = ctx.highs()
        at = time.monotonic()
        _start_nodes(ctx, list(codes))
        return Injection(at, targets, details)


def _rollback_iceberg(ctx: FaultContext, wanted: int) -> dict[str, object]:
    """Every table of the run rolled back to the snapshot before its ``wanted``-th newest epoch
    commit of the pipeline (at least one commit stays: Iceberg rolls back only to an ancestor),
    through the run's catalog (:meth:`laminar_kafka.chaos.lake.RunLake.catalog`: the local SQLite
    file, or the REST catalog reached directly)."""
    if ctx.lake is None:
        raise ChaosError("an iceberg lake rollback needs the run's lake")
    catalog = ctx.lake.catalog()
    namespace = ctx.lake.iceberg_settings().namespace
    rolled: dict[str, object] = {}
    for identifier in catalog.list_tables(namespace):
        table = catalog.load_table(identifier)
        commits = []  # the pipeline's epoch commits, newest first
        snapshot = table.current_snapshot()
        while snapshot is not None:
            summary = snapshot.summary
            epoch = summary.get("laminar.epoch") if summary is not None else None
            if summary is not None and summary.get("laminar.pipeline") == ctx.pipeline and epoch:
                commits.append((int(epoch), snapshot))
            parent = snapshot.parent_snapshot_id
            snapshot = table.snapshot_by_id(parent) if parent is not None else None
        count = min(wanted, len(commits) - 1)
        if count <= 0 or commits[count - 1][1].parent_snapshot_id is None:
            continue
        parent_id = commits[count - 1][1].parent_snapshot_id
        assert parent_id is not None
        table.manage_snapshots().rollback_to_snapshot(parent_id).commit()
        rows = sum(int(s.summary.get("added-records") or 0) if s.summary is not None else 0 for _, s in commits[:count])
        rolled[".".join(identifier)] = {"epochs": sorted(e for e, _ in commits[:count]), "rows": rows}
    if not rolled:
        raise ChaosError(f"no iceberg table of {ctx.pipeline} has two epoch commits to roll back")
    return {"tables": rolled}


# --------------------------------------------------------------------------------------------------
# Pinned settings


def misconfigured_value(setting: str, run_dir: Path, other_output: str | None = None, partition_by: str = "day") -> str:
    """The wrong value ``misconfigured-node`` gives ``setting`` (the run's nodes use the defaults:
    256 vnodes, raw records, source identity kafka, the run's output; and ``partition_by``);
    ``other_output``: the other output (default ``<run>/output-misconfigured``)."""
    values = {"vnode-count": "64", "format": "json", "partition-by": "day" if partition_by == "hour" else "hour",
              "source-identity": "other",
              "output": other_output or str(run_dir / "output-misconfigured")}
    if setting not in values:
        raise ChaosError(f"misconfigured-node does not know setting {setting!r}")
    return values[setting]


def with_setting(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag value`` replacing the flag's value, or appended."""
    result = list(argv)
    if flag in result:
        result[result.index(flag) + 1] = value
    else:
        result += [flag, value]
    return result


def _files_under(output: str, lake: RunLake | None) -> list[str]:
    """Up to 20 files under ``output`` (a local directory, or a prefix of the lake's object store),
    relative to it."""
    if lake is None or lake.local:
        other = Path(output)
        return sorted(str(p.relative_to(other)) for p in other.rglob("*") if p.is_file())[:20] if other.exists() else []
    import pyarrow.fs as pafs

    fs, _ = lake.filesystem()
    root = output.split("://", 1)[1].rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(root) + 1:] for i in infos if i.type == pafs.FileType.File)[:20]


class MisconfiguredNode(Fault):
    """A node with a new id and one pinned setting changed: exit 2, one stderr line naming it."""

    kind, role = "misconfigured-node", "new node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        if ctx.node_argv is None or ctx.run_dir is None:
            raise ChaosError(f"{self.kind} needs the nodes' command line and the run's directory")
        setting = str(event.param("setting", "vnode-count"))
        lake = ctx.lake
        value = misconfigured_value(setting, ctx.run_dir, lake.other_output(ctx.run_dir) if lake else None,
                                    ctx.partition_by)
        node_id = ctx.nodes.new_id()
        argv = with_setting(ctx.node_argv(node_id), f"--{setting}", value) + ["--log-level", "warning"]
        cwd = lake.prepare_node(node_id) if lake is not None else None
        env = {**node_environment(), **(lake.node_env if lake is not None else {})}
        exits_before = len(ctx.nodes.unexpected_exits())
        running_before = ctx.nodes.running()
        control = ctx.probe.control()
        targets = ctx.highs()
        at = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                                  stdin=subprocess.DEVNULL, timeout=MISCONFIGURED_BOUND_S)
            code: int | None = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:  # run() killed it
            code = None
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        took = round(time.monotonic() - at, 1)
        log = ctx.run_dir / "logs" / f"node-{node_id}-misconfigured.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"argv: {argv}\nexit code: {code} after {took}s\n--- stdout\n{stdout}--- stderr\n{stderr}")
        lines = [line for line in stderr.splitlines() if line.strip()]
        after = ctx.probe.control()
        details: dict[str, object] = {
            "node": node_id, "setting": setting, "value": value, "exit_code": code, "seconds": took,
            "stderr": lines[:5], "register_versions": [control.version if control else None,
                                                       after.version if after else None],
        }
        if setting == "output":
            details["wrote_into_its_output"] = _files_under(value, lake)
        problems = []
        if code is None:
            problems.append(f"still running after {MISCONFIGURED_BOUND_S:.0f}s (killed)")
        elif code != 2:
            problems.append(f"exit code {code}, not 2")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr line(s), not 1")
        elif f"setting {setting} " not in lines[0]:
            problems.append("its stderr line does not name the setting")
        exits = ctx.nodes.unexpected_exits()[exits_before:]
        stopped = [n for n in running_before if n not in ctx.nodes.running()]
        if exits or stopped:
            problems.append(f"other nodes disturbed: exits {exits}, no longer running {stopped}")
        ctx.note(f"misconfigured node {node_id} (--{setting} {value}): exit {code} in {took}s: {lines[-1:] or ''}"
                 + (f"; PROBLEMS: {'; '.join(problems)}" if problems else ""))
        if problems:
            raise ChaosError(f"misconfigured node {node_id} (--{setting} {value}): {'; '.join(problems)}; "
                             f"stderr {lines[:5]} (log {log})")
        return Injection(at, targets, details)
