"""The ZooKeeper leader's I/O: reading its view, and executing a step as one fenced transaction.

:class:`LeaderStore` is used by :class:`coordinator.zk.ZooKeeperCoordinator` while it leads (see that
module for the layout and the fencing rules). It keeps the watch-invalidated cache of member, election
candidate, ack and load data, so a leader pass costs about three round trips.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from coordinator.base import (
    MANIFEST_CHUNK_BYTES,
    CoordinatorConfig,
    CoordinatorMetrics,
    EpochAck,
    Member,
    RoundOutcome,
)
from coordinator.errors import CoordinatorError, FencedError
from coordinator.model import ControlState, Step, View, epoch_name, parse_ack_name
from coordinator.rounds import round_id
from coordinator.zk_store import ChunkPending, ManifestStore, descendants, read_value, write_chunks

logger = logging.getLogger(__name__)

__all__ = ["Leadership", "LeaderStore", "CANDIDATE_PREFIX"]

#: Election nodes are ``leader/candidate-<seq>``.
CANDIDATE_PREFIX = "candidate-"
#: Ops per garbage-collection transaction.
_GC_BATCH = 64


@dataclass(frozen=True)
class Leadership:
    """This node's term as leader: its fencing token and election node (absolute path)."""

    token: int
    candidate: str


def _now_ms() -> int:
    return int(time.time() * 1000)


class LeaderStore:
    """The leader's reads and fenced writes on one pipeline subtree. Thread-safe."""

    def __init__(self, client: KazooClient, config: CoordinatorConfig, metrics: CoordinatorMetrics,
                 manifests: ManifestStore, kick: threading.Event) -> None:
        self._client = client
        self.config = config
        self._base = config.base_path
        self._metrics = metrics
        self._manifests = manifests
        self._kick = kick
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[bytes, int]] = {}  # path -> (data, data version)
        self._assembled: dict[str, tuple[bytes, bytes]] = {}  # chunked ack path -> (header, value)

    def _path(self, relative: str) -> str:
        return f"{self._base}/{relative}" if relative else self._base

    def _kick_watch(self, _event: WatchedEvent) -> None:
        self._kick.set()

    def clear_cache(self) -> None:
        """Forget every cached read (watches may have been missed while disconnected)."""
        with self._lock:
            self._cache.clear()
            self._assembled.clear()

    def read_view(self) -> tuple[View, int]:
        """One consistent-enough look for the leader: the register (its version is what the step's
        transaction checks), members and the checks that fence them, vnode load, acks and rejection
        markers of the open epoch, drain receipts, and the latest (or initial) manifest.

        Reads are issued in parallel; member, candidate, ack and load data come from a cache that
        watches invalidate (cleared on any session state change), so a pass costs about three round
        trips.
        """
        register = self._client.get_async(self._path("assignment"), watch=self._kick_watch)
        names_async = self._client.get_children_async(self._path("members"), watch=self._kick_watch)
        candidates_async = self._client.get_children_async(self._path("leader"))
        load_path = self._path("vnode_load")
        try:
            data, stat = register.get(timeout=self.config.session_timeout)
            control: ControlState | None = ControlState.from_json(data)
            version = stat.version
        except NoNodeError:
            self._client.exists(self._path("assignment"), watch=self._kick_watch)
            control, version = None, -1
        acks_async = ready_async = rejected_async = None
        if control is not None and control.open_epoch:
            epoch_path = self._path(f"epochs/{epoch_name(control.open_epoch)}")
            acks_async = self._client.get_children_async(f"{epoch_path}/acks", watch=self._kick_watch)
            rejected_async = self._client.get_children_async(f"{epoch_path}/rejected")
        if control is not None and control.round is not None:
            ready_path = self._path(f"rounds/{round_id(control.round.drain_id.target_version)}/ready")
            ready_async = self._client.get_children_async(ready_path, watch=self._kick_watch)
        timeout = self.config.session_timeout
        names = [n for n in names_async.get(timeout=timeout) if n.isdigit()]
        candidates = [c for c in candidates_async.get(timeout=timeout) if c.startswith(CANDIDATE_PREFIX)]
        member_paths = {int(n): self._path(f"members/{n}") for n in names}
        candidate_paths = [self._path(f"leader/{c}") for c in candidates]
        ack_paths: list[str] = []
        if acks_async is not None:
            ack_paths = [f"{epoch_path}/acks/{n}" for n in acks_async.get(timeout=timeout)]
        found = self._cached_reads(list(member_paths.values()) + candidate_paths + [load_path] + ack_paths)
        members = {n: Member.from_json(n, found[p][0]) for n, p in member_paths.items() if p in found}
        versions = {n: found[p][1] for n, p in member_paths.items() if p in found}
        elected = {c: found[p][0] for c, p in zip(candidates, candidate_paths) if p in found}
        member_checks = self._member_checks(members, versions, elected)
        load = {int(v): int(c) for v, c in json.loads(found[load_path][0]).items()} if load_path in found else {}
        acks: list[EpochAck] = []
        for path in ack_paths:
            value = self._ack_value(path, found[path][0]) if path in found else None
            if value is None:
                continue
            try:
                acks.append(EpochAck.from_json(value))
            except CoordinatorError:
                logger.warning("ignoring malformed ack %s", path)
        ready: set[tuple[int, str]] = set()
        if ready_async is not None:
            for name in ready_async.get(timeout=timeout):
                try:
                    ready.add(parse_ack_name(name))
                except CoordinatorError:
                    continue
        rejections: frozenset[str] = frozenset()
        if rejected_async is not None:
            try:
                rejections = frozenset(rejected_async.get(timeout=timeout))
            except NoNodeError:
                pass
        if control is not None and control.last_epoch:
            latest = self._manifests.read(control.last_epoch)
        else:
            latest = self._manifests.find(0)  # the pinned initial manifest, if any
        with self._lock:  # acks of closed epochs are never read again
            for path in [p for p in self._cache if "/epochs/" in p and p not in ack_paths]:
                del self._cache[path]
            for path in [p for p in self._assembled if p not in ack_paths]:
                del self._assembled[path]
        view = View(control, members, _now_ms(), tuple(acks), frozenset(ready), load, latest,
                    member_checks, rejections)
        return view, version

    def _member_checks(
        self, members: Mapping[int, Member], versions: Mapping[int, int], candidates: Mapping[str, bytes]
    ) -> dict[int, tuple[tuple[str, int], ...]]:
        """Per member: its member node at the data version read, and the election node of its boot.

        A member re-created by a new session may have the same data version, but the old session's
        election node is gone, so the pair fences exactly the membership read. A member whose election
        node is not there yet (between its two creates) has no entry: a commit waits for it.
        """
        by_boot: dict[tuple[int, str], str] = {}
        for name, raw in candidates.items():
            try:
                data = json.loads(raw)
                by_boot[(int(data["node_id"]), str(data["boot_id"]))] = name
            except (ValueError, KeyError, TypeError):
                continue
        result: dict[int, tuple[tuple[str, int], ...]] = {}
        for node, member in members.items():
            candidate = by_boot.get((node, member.boot_id))
            if candidate is not None:
                result[node] = ((f"members/{node}", versions[node]), (f"leader/{candidate}", 0))
        return result

    def _cached_reads(self, paths: list[str]) -> dict[str, tuple[bytes, int]]:
        """``(data, data version)`` of ``paths`` (missing ones omitted), from the watch-invalidated
        cache or one parallel batch of reads that re-arm the watches."""
        with self._lock:
            result = {p: self._cache[p] for p in paths if p in self._cache}
        pending = {p: self._client.get_async(p, watch=self._invalidate) for p in paths if p not in result}
        for path, async_result in pending.items():
            try:
                data, stat = async_result.get(timeout=self.config.session_timeout)
            except NoNodeError:
                continue
            result[path] = (data, stat.version)
            with self._lock:
                self._cache[path] = result[path]
        return result

    def _invalidate(self, event: WatchedEvent) -> None:
        """A watched member, ack, candidate or load node changed: forget its cached value, wake the leader."""
        with self._lock:
            self._cache.pop(event.path, None)
        self._kick.set()

    def _ack_value(self, path: str, raw: bytes) -> bytes | None:
        """An ack's bytes (reassembled when chunked; None while it is being written)."""
        try:
            cached = self._assembled.get(path)
            if cached is not None and cached[0] == raw:
                return cached[1]
            value = read_value(self._client, path, raw, self.config.session_timeout)
        except ChunkPending:
            return None  # the header's publication fires the data watch: read again then
        except CoordinatorError:
            logger.warning("ignoring ack %s with a malformed chunk header", path)
            return None
        if value is not raw:
            with self._lock:
                self._assembled[path] = (raw, value)
        return value

    def execute(self, lead: Leadership, step: Step, expected_version: int) -> None:
        """Apply ``step`` as one fenced transaction (plus, for a large manifest, fenced chunk writes).

        The transaction checks the election node, replaces the register at ``expected_version``,
        checks ``step.checks`` (path, version), publishes the headers of chunked nodes and creates the
        rest. Raises FencedError (counted) when ZooKeeper rejects it: the election node is gone, the
        register moved past ``expected_version``, a checked node is gone or at another version, or a
        create-once node already exists.
        """
        creates: list[tuple[str, bytes]] = []
        headers: list[tuple[str, bytes]] = []
        for relative, data in step.creates:
            if len(data) > MANIFEST_CHUNK_BYTES:
                path = self._path(relative)
                headers.append((path, self._write_chunked(lead, expected_version, path, data)))
            else:
                creates.append((self._path(relative), data))
        txn = self._client.transaction()
        txn.check(lead.candidate, 0)
        if expected_version < 0:
            txn.create(self._path("assignment"), step.control.to_json())
        else:
            txn.set_data(self._path("assignment"), step.control.to_json(), version=expected_version)
        for relative, version in step.checks:
            txn.check(self._path(relative), version)
        for path, header in headers:
            txn.set_data(path, header, version=0)
        for path, data in creates:
            txn.create(path, data)
        self._commit(txn, f"{step.kind} v{step.control.version}")
        if step.manifest is not None:
            self._manifests.remember(step.manifest)
        self._account(step)
        if step.kind == "commit_epoch":
            self._collect_garbage(lead, step.control)

    def _commit(self, txn: Any, what: str) -> None:
        self._metrics.bump("zk_transactions")
        self._metrics.bump("zk_write_ops", len(txn.operations))
        try:
            results = txn.commit()
        except SessionExpiredError as exc:  # our session (and so our election node) is gone
            self._metrics.fenced_writes_rejected += 1
            raise FencedError(f"leader write rejected ({what}): session expired", cause=exc) from exc
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            self._metrics.fenced_writes_rejected += 1
            cause = next((f for f in failures if type(f).__name__ != "RolledBackError"), failures[0])
            raise FencedError(f"leader write rejected ({what}): {type(cause).__name__}", cause=cause)

    def _fence(self, lead: Leadership, expected_version: int) -> Any:
        txn = self._client.transaction()
        txn.check(lead.candidate, 0)
        if expected_version >= 0:
            txn.check(self._path("assignment"), expected_version)
        return txn

    def _write_chunked(self, lead: Leadership, expected_version: int, path: str, data: bytes) -> bytes:
        """Write a large node (a manifest) PENDING + chunks, one fenced transaction per chunk, after
        clearing the debris of a leader that died mid-write; return the header the step publishes."""
        debris = descendants(self._client, path)
        if debris:
            txn = self._fence(lead, expected_version)
            for doomed in debris:
                txn.delete(doomed)
            self._commit(txn, f"clear {path}")
        return write_chunks(self._client, path, data, MANIFEST_CHUNK_BYTES,
                            lambda: self._fence(lead, expected_version), self._commit)

    def _account(self, step: Step) -> None:
        m = self._metrics
        if step.kind == "commit_epoch":
            m.epochs_committed += 1
        if step.decision is not None:
            if step.decision.outcome is RoundOutcome.COMMIT:
                m.rounds_committed += 1
            else:
                m.rounds_aborted += 1
            logger.info("round %s decided %s", step.decision.drain_id, step.decision.outcome.value)
        if step.shed:
            m.nodes_shed += len(step.shed)
            logger.info("shed dead nodes %s at version %d", list(step.shed), step.control.version)
        for ack, reason in step.rejected_acks:
            m.stale_acks_rejected += 1
            logger.warning("rejected ack of node %d boot %s for epoch %d: %s",
                           ack.node_id, ack.boot_id, ack.epoch, reason)
        if step.reported:
            m.bump("ack_rejections_recorded", len(step.reported))

    def _collect_garbage(self, lead: Leadership, control: ControlState) -> None:
        """Delete manifests, epochs and decided rounds beyond the last K (fenced, best effort).

        The pinned initial manifest (checkpoint 0) is never deleted: it is the start position of the
        pipeline (every later manifest carries its cursors forward anyway, so it is only kept as the
        record of what was pinned, and so that `pin_start` stays create-once for the pipeline's life).
        """
        keep = self.config.manifests_to_keep
        if control.last_epoch % max(1, keep // 2) != 0:
            return
        doomed: list[str] = []
        for folder, limit in (("checkpoints", control.last_epoch - keep), ("epochs", control.last_epoch - keep),
                              ("rounds", control.version - keep)):
            for name in self._client.get_children(self._path(folder)):
                if name.isdigit() and 0 < int(name) <= limit:
                    doomed.append(self._path(f"{folder}/{name}"))
        if not doomed:
            return
        try:
            ops = [op for path in doomed for op in descendants(self._client, path)]
            for start in range(0, len(ops), _GC_BATCH):
                txn = self._fence(lead, -1)
                for path in ops[start:start + _GC_BATCH]:
                    txn.delete(path)
                self._commit(txn, "garbage collection")
        except (KazooException, FencedError) as exc:
            logger.info("garbage collection deferred: %r", exc)
