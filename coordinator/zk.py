"""ZooKeeperCoordinator: the pipeline's control plane on a real ZooKeeper, through kazoo.

Layout under ``<root>/<pipeline>`` (all names relative to it)::

    members/<node_id>                 ephemeral Member JSON {boot_id, endpoint, leaving}
    leader/candidate-<seq>            ephemeral sequential {node_id, boot_id}; the lowest is the leader,
                                      its sequence number + 1 is the fencing token (monotonic: a later
                                      leader always holds a higher sequence than every earlier one)
    assignment                        the register (coordinator.model.ControlState JSON): version,
                                      vnode_count, owners, changed_at, boots, manifest_epoch, round,
                                      open_epoch, last_epoch, recent decisions, leader_token
    vnode_load                        {vnode: partitions} written by any node (placement input)
    rounds/<round_id>                 {predecessor, target, digest, leader_token, target_owners,
                                      participants, deadline_ms}
    rounds/<round_id>/ready/<node>.<boot>   drain receipts
    rounds/<round_id>/decision        create-once {drain_id, outcome, manifest_epoch}
    epochs/<epoch>                    {epoch, assignment_version}
    epochs/<epoch>/acks/<node>.<boot> EpochAck JSON
    checkpoints/<epoch>               Manifest JSON, or (over 512 KB) a header
                                      {"chunked": true, "chunks": n, "size": s, "xxh3": h} with
                                      children chunk-0000.. holding the bytes in order

Fencing: every leader write is one transaction that checks the leader's election node
(``check(candidate, version=0)``: it exists, so the session that created it is alive) and replaces
the register with ``set_data(assignment, version=<version read>)``; a failure of either (deposed
leader, paused leader whose session expired, or a stale view) rejects the whole write, raises
FencedError and counts ``fenced_writes_rejected``. The only leader writes outside that shape are the
chunks of a large manifest and garbage collection, which also check the election node and the
register version without replacing it; a manifest is committed only by the register's ``last_epoch``,
never by the existence of its node.

Threads: kazoo's own threads call only non-blocking callbacks here, which feed one inbox. One
dispatcher thread turns the inbox into events (reading manifests as needed) and calls subscribers
in order. One leader thread runs :func:`coordinator.model.next_step` while this node leads.
Clocks: deadlines and the checkpoint timer use the leader's wall clock (nodes' clocks are assumed
roughly synchronised; a skew only shifts when a new leader considers a deadline passed).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import xxhash
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

from coordinator.base import (
    MANIFEST_CHUNK_BYTES,
    Coordinator,
    CoordinatorConfig,
    CoordinatorEvent,
    CoordinatorMetrics,
    EpochAck,
    EventCallback,
    Subscribers,
    Manifest,
    Member,
    RoundOutcome,
    SessionState,
    SessionStateChanged,
)
from coordinator.errors import (
    ConfigurationError,
    CoordinatorError,
    FencedError,
    RoundError,
    SessionLostError,
)
from coordinator.model import (
    ControlState,
    EventTracker,
    Step,
    View,
    ack_name,
    epoch_name,
    next_step,
    next_wakeup_ms,
    parse_ack_name,
)
from coordinator.registry import AssignmentSnapshot, NodeId
from coordinator.rounds import AssignmentDrainId, round_id

logger = logging.getLogger(__name__)

__all__ = ["ZooKeeperCoordinator"]

_CANDIDATE_PREFIX = "candidate-"
#: Upper bound on steps the leader takes in one pass before re-checking its leadership.
_MAX_STEPS_PER_PASS = 64
#: Ops per garbage-collection transaction.
_GC_BATCH = 64


@dataclass(frozen=True)
class Leadership:
    """This node's term as leader: its fencing token and election node (absolute path)."""

    token: int
    candidate: str


def _now_ms() -> int:
    return int(time.time() * 1000)


class ZooKeeperCoordinator(Coordinator):
    """See the module docstring. Thread-safe; methods block on ZooKeeper (call them off the loop)."""

    def __init__(self, config: CoordinatorConfig, node_id: NodeId, endpoint: str = "") -> None:
        if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 1:
            raise ConfigurationError(f"node_id {node_id!r} must be an int >= 1")
        if not config.hosts:
            raise ConfigurationError("ZooKeeperCoordinator needs config.hosts")
        self.config = config
        self.node_id = node_id
        self._endpoint = endpoint
        self._base = config.base_path
        self._client = KazooClient(hosts=config.hosts, timeout=config.session_timeout)
        self._lock = threading.RLock()
        self._metrics = CoordinatorMetrics()
        self._subscribers = Subscribers()
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._kick = threading.Event()
        self._stopping = threading.Event()
        self._boot_id = uuid.uuid4().hex
        self._session_id: int | None = None
        self._lost = False
        self._suspended = False
        self._leaving = False
        self._started = False
        self._candidate: str | None = None
        self._leadership: Leadership | None = None
        self._tracker = EventTracker()
        self._snapshot = AssignmentSnapshot.initial(config.vnode_count)
        self._manifests: dict[int, Manifest] = {}
        self._cache: dict[str, bytes] = {}
        self._threads: list[threading.Thread] = []

    # ---- paths --------------------------------------------------------------------------------

    def _path(self, relative: str) -> str:
        return f"{self._base}/{relative}" if relative else self._base

    # ---- interface: properties --------------------------------------------------------------

    @property
    def boot_id(self) -> str:
        return self._boot_id

    @property
    def metrics(self) -> CoordinatorMetrics:
        return self._metrics

    @property
    def client(self) -> KazooClient:
        """The kazoo client (tests use its session id to expire the session on the server)."""
        return self._client

    @property
    def leadership(self) -> Leadership | None:
        """The current term if this node leads, else None."""
        return self._leadership

    def subscribe(self, callback: EventCallback) -> None:
        self._subscribers.add(callback)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        try:
            self._client.start(timeout=timeout)
        except KazooTimeoutError as exc:
            self._started = False
            raise CoordinatorError(f"ZooKeeper {self.config.hosts} unreachable in {timeout}s", cause=exc) from exc
        self._client.add_listener(self._on_session_state)
        for relative in ("members", "leader", "rounds", "epochs", "checkpoints"):
            self._client.ensure_path(self._path(relative))
        for target, name in ((self._dispatch_loop, "dispatch"), (self._leader_loop, "leader")):
            thread = threading.Thread(target=target, name=f"coordinator-{self.node_id}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._register(timeout)
        self._join_election()
        self._client.ChildrenWatch(self._path("leader"), self._on_candidates)
        self._client.DataWatch(self._path("assignment"), self._on_register)
        self._barrier(timeout)

    def stop(self) -> None:
        with self._lock:
            if not self._started or self._stopping.is_set():
                return
            self._stopping.set()
            self._leadership = None
        self._kick.set()
        for path in (self._path(f"members/{self.node_id}"), self._candidate):
            if path is None:
                continue
            try:
                data, stat = self._client.get(path)
                if stat.ephemeralOwner == self._client.client_id[0]:
                    self._client.delete(path, version=stat.version)
            except (KazooException, TypeError):
                pass
        try:
            self._client.stop()
        finally:
            self._client.close()
        self._inbox.put(("quit", None))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def rejoin(self) -> None:
        """Register again with a new boot id and stand for election (see Coordinator.rejoin)."""
        if self._stopping.is_set():
            raise CoordinatorError("coordinator is stopped")
        deadline = time.monotonic() + self.config.session_timeout * 3
        while not self._client.connected:
            if time.monotonic() > deadline:
                raise SessionLostError("no ZooKeeper connection to rejoin on")
            time.sleep(0.05)
        with self._lock:
            self._leadership = None
            old_candidate = self._candidate
            self._boot_id = uuid.uuid4().hex
        if old_candidate is not None:
            try:
                self._client.delete(old_candidate)
            except NoNodeError:
                pass
        self._register(self.config.session_timeout * 3)
        self._join_election()
        with self._lock:
            self._lost = False
            self._suspended = False
        self._metrics.session_state = SessionState.CONNECTED.value
        self._inbox.put(("session", SessionState.CONNECTED))
        self._inbox.put(("resync", None))
        self._on_candidates(self._client.get_children(self._path("leader")))
        self._barrier(self.config.session_timeout)

    def _barrier(self, timeout: float) -> None:
        """Wait until the dispatcher delivered everything queued so far."""
        done = threading.Event()
        self._inbox.put(("barrier", done))
        if not done.wait(timeout):
            raise CoordinatorError(f"event dispatch did not catch up in {timeout}s")

    def _register(self, timeout: float) -> None:
        """Create this node's ephemeral member entry; wait out a dead session's stale entry."""
        path = self._path(f"members/{self.node_id}")
        member = Member(self.node_id, self._boot_id, self._endpoint, self._leaving)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._client.create(path, member.to_json(), ephemeral=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self._client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._client.client_id[0]:
                    self._client.set(path, member.to_json(), version=stat.version)
                    break
                gone = threading.Event()
                if self._client.exists(path, watch=lambda _e: gone.set()) is None:
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not gone.wait(remaining):
                    raise CoordinatorError(
                        f"node id {self.node_id} is held by another live session in {self._base}"
                    )
        self._session_id = self._client.client_id[0]

    def _join_election(self) -> None:
        data = json.dumps({"node_id": self.node_id, "boot_id": self._boot_id}).encode()
        self._candidate = self._client.create(
            self._path(f"leader/{_CANDIDATE_PREFIX}"), data, ephemeral=True, sequence=True
        )

    # ---- kazoo callbacks (never block) ------------------------------------------------------

    def _on_session_state(self, state: str) -> None:
        with self._lock:
            self._cache.clear()  # watches may have been missed while disconnected
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._metrics.session_state = SessionState.SUSPENDED.value
            self._inbox.put(("session", SessionState.SUSPENDED))
        elif state == KazooState.LOST:
            with self._lock:
                self._lost = True
                self._leadership = None
            self._metrics.session_state = SessionState.LOST.value
            self._inbox.put(("session", SessionState.LOST))
        else:
            was_suspended = self._suspended
            self._suspended = False
            if not self._lost and was_suspended:
                self._metrics.session_state = SessionState.CONNECTED.value
                self._inbox.put(("session", SessionState.CONNECTED))
            self._kick.set()

    def _on_candidates(self, children: list[str]) -> None:
        candidates = sorted(c for c in children if c.startswith(_CANDIDATE_PREFIX))
        mine = self._candidate.rsplit("/", 1)[1] if self._candidate else None
        with self._lock:
            if mine is not None and candidates and candidates[0] == mine and not self._lost:
                if self._leadership is None or self._leadership.candidate != self._candidate:
                    token = int(mine[len(_CANDIDATE_PREFIX):]) + 1
                    assert self._candidate is not None
                    self._leadership = Leadership(token, self._candidate)
                    self._metrics.leader_elections_won += 1
                    logger.info("node %d leads pipeline %s with token %d", self.node_id, self._base, token)
            elif self._leadership is not None:
                logger.info("node %d no longer leads pipeline %s", self.node_id, self._base)
                self._leadership = None
        self._kick.set()

    def _on_register(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> None:
        if data:
            self._inbox.put(("register", data))
        self._kick.set()

    def _kick_watch(self, _event: WatchedEvent) -> None:
        self._kick.set()

    # ---- dispatcher thread --------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        while True:
            kind, payload = self._inbox.get()
            try:
                if kind == "quit":
                    return
                if kind == "barrier":
                    payload.set()
                elif kind == "session":
                    self._deliver([SessionStateChanged(payload)])
                elif kind == "register":
                    self._observe(ControlState.from_json(payload))
                elif kind == "resync":
                    self._tracker = EventTracker()
                    control = self._read_register()[0]
                    if control is not None:
                        self._observe(control)
            except Exception:  # noqa: BLE001 - the dispatcher must survive any one bad item
                logger.exception("coordinator %d failed to process %s", self.node_id, kind)

    def _observe(self, control: ControlState) -> None:
        manifests: dict[int, Manifest] = {}
        for epoch in self._tracker.committed_range(control):
            try:
                manifests[epoch] = self._read_manifest(epoch)
            except CoordinatorError:
                logger.debug("manifest %d already collected", epoch)
        events = self._tracker.advance(control, manifests)
        self._snapshot = self._tracker.control.snapshot if self._tracker.control else self._snapshot
        self._deliver(events)

    def _deliver(self, events: list[CoordinatorEvent]) -> None:
        self._subscribers.deliver(events)

    # ---- reads --------------------------------------------------------------------------------

    def _read_register(self, watch: Callable[[WatchedEvent], None] | None = None) -> tuple[ControlState | None, int]:
        try:
            data, stat = self._client.get(self._path("assignment"), watch=watch)
        except NoNodeError:
            if watch is not None:
                self._client.exists(self._path("assignment"), watch=watch)
            return None, -1
        return ControlState.from_json(data), stat.version

    def _read_members(self, watch: Callable[[WatchedEvent], None] | None = None) -> dict[int, Member]:
        names = self._client.get_children(self._path("members"), watch=watch)
        pending = {name: self._client.get_async(self._path(f"members/{name}")) for name in names if name.isdigit()}
        result: dict[int, Member] = {}
        for name, async_result in pending.items():
            try:
                data, _ = async_result.get(timeout=self.config.session_timeout)
            except NoNodeError:
                continue
            result[int(name)] = Member.from_json(int(name), data)
        return result

    def _read_manifest(self, epoch: int) -> Manifest:
        cached = self._manifests.get(epoch)
        if cached is not None:
            return cached
        path = self._path(f"checkpoints/{epoch_name(epoch)}")
        try:
            data, _ = self._client.get(path)
            header = json.loads(data)
            if isinstance(header, dict) and header.get("chunked") is True:
                pending = [
                    self._client.get_async(f"{path}/chunk-{i:04d}") for i in range(int(header["chunks"]))
                ]
                data = b"".join(p.get(timeout=self.config.session_timeout)[0] for p in pending)
                if len(data) != int(header["size"]) or xxhash.xxh3_64_intdigest(data) != int(header["xxh3"]):
                    raise CoordinatorError(f"manifest {epoch} chunks do not match their header")
        except NoNodeError as exc:
            raise CoordinatorError(f"manifest {epoch} does not exist (never committed or collected)", cause=exc) from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise CoordinatorError(f"malformed manifest header {epoch}: {exc}", cause=exc) from exc
        manifest = Manifest.from_json(data)
        if manifest.epoch != epoch:
            raise CoordinatorError(f"checkpoints/{epoch_name(epoch)} holds manifest {manifest.epoch}")
        with self._lock:
            self._manifests[epoch] = manifest
            for old in [e for e in self._manifests if e < epoch - 2 * self.config.manifests_to_keep]:
                del self._manifests[old]
        return manifest

    def _invalidate(self, event: WatchedEvent) -> None:
        """A watched member, ack or load node changed: forget its cached value and wake the leader."""
        with self._lock:
            self._cache.pop(event.path, None)
        self._kick.set()

    def _cached_reads(self, paths: list[str]) -> dict[str, bytes]:
        """Data of ``paths`` (missing ones omitted), from the watch-invalidated cache or one parallel
        batch of reads that re-arm the watches."""
        with self._lock:
            result = {p: self._cache[p] for p in paths if p in self._cache}
        pending = {p: self._client.get_async(p, watch=self._invalidate) for p in paths if p not in result}
        for path, async_result in pending.items():
            try:
                data = async_result.get(timeout=self.config.session_timeout)[0]
            except NoNodeError:
                continue
            result[path] = data
            with self._lock:
                self._cache[path] = data
        return result

    def _read_view(self) -> tuple[View, int]:
        """One consistent-enough look for the leader: the register (its version is what the step's
        transaction checks), members, vnode load, acks of the open epoch, drain receipts.

        Reads are issued in parallel; member, ack and load data come from a cache that watches
        invalidate (cleared on any session state change), so a pass costs about three round trips.
        """
        register = self._client.get_async(self._path("assignment"), watch=self._kick_watch)
        names_async = self._client.get_children_async(self._path("members"), watch=self._kick_watch)
        load_path = self._path("vnode_load")
        try:
            data, stat = register.get(timeout=self.config.session_timeout)
            control: ControlState | None = ControlState.from_json(data)
            version = stat.version
        except NoNodeError:
            self._client.exists(self._path("assignment"), watch=self._kick_watch)
            control, version = None, -1
        acks_async = ready_async = None
        if control is not None and control.open_epoch:
            acks_path = self._path(f"epochs/{epoch_name(control.open_epoch)}/acks")
            acks_async = self._client.get_children_async(acks_path, watch=self._kick_watch)
        if control is not None and control.round is not None:
            ready_path = self._path(f"rounds/{round_id(control.round.drain_id.target_version)}/ready")
            ready_async = self._client.get_children_async(ready_path, watch=self._kick_watch)
        names = [n for n in names_async.get(timeout=self.config.session_timeout) if n.isdigit()]
        paths = [self._path(f"members/{n}") for n in names] + [load_path]
        ack_paths: list[str] = []
        if acks_async is not None:
            ack_paths = [f"{acks_path}/{n}" for n in acks_async.get(timeout=self.config.session_timeout)]
        data_by_path = self._cached_reads(paths + ack_paths)
        members = {
            int(n): Member.from_json(int(n), data_by_path[self._path(f"members/{n}")])
            for n in names if self._path(f"members/{n}") in data_by_path
        }
        load = {int(v): int(c) for v, c in json.loads(data_by_path[load_path]).items()} \
            if load_path in data_by_path else {}
        acks: list[EpochAck] = []
        for path in ack_paths:
            if path in data_by_path:
                try:
                    acks.append(EpochAck.from_json(data_by_path[path]))
                except CoordinatorError:
                    logger.warning("ignoring malformed ack %s", path)
        ready: set[tuple[int, str]] = set()
        if ready_async is not None:
            for name in ready_async.get(timeout=self.config.session_timeout):
                try:
                    ready.add(parse_ack_name(name))
                except CoordinatorError:
                    continue
        latest = None
        if control is not None and control.last_epoch:
            latest = self._read_manifest(control.last_epoch)
        with self._lock:  # acks of closed epochs are never read again
            for path in [p for p in self._cache if "/epochs/" in p and p not in ack_paths]:
                del self._cache[path]
        view = View(control, members, _now_ms(), tuple(acks), frozenset(ready), load, latest)
        return view, version

    # ---- leader -------------------------------------------------------------------------------

    def _leader_loop(self) -> None:
        timeout: float | None = None
        while not self._stopping.is_set():
            self._kick.wait(timeout)
            self._kick.clear()
            if self._stopping.is_set():
                return
            lead = self._leadership
            if lead is None or self._lost or self._suspended:
                timeout = None
                continue
            try:
                timeout = self._leader_pass(lead)
            except FencedError:
                timeout = 0.05
                self._check_still_leader(lead)
            except (KazooException, CoordinatorError) as exc:
                logger.warning("leader pass of node %d failed: %r", self.node_id, exc)
                timeout = 0.2

    def _check_still_leader(self, lead: Leadership) -> None:
        try:
            alive = self._client.exists(lead.candidate) is not None
        except KazooException:
            return
        if not alive:
            with self._lock:
                if self._leadership == lead:
                    self._leadership = None
            logger.info("node %d was deposed (election node gone)", self.node_id)

    def _leader_pass(self, lead: Leadership) -> float | None:
        """Take steps until none is due; return seconds until the next timer (None: none)."""
        for _ in range(_MAX_STEPS_PER_PASS):
            if self._leadership != lead:
                return None
            view, version = self._read_view()
            step = next_step(view, self.config, lead.token)
            if step is None:
                wake = next_wakeup_ms(view.control, self.config)
                return None if wake is None else max(0.0, (wake - _now_ms()) / 1000) + 0.001
            self.execute(lead, step, version)
        return 0.0

    def execute(self, lead: Leadership, step: Step, expected_version: int) -> None:
        """Apply ``step`` as one fenced transaction (plus, for a large manifest, fenced chunk writes).

        Raises FencedError (counted) when ZooKeeper rejects it: the election node is gone, the
        register moved past ``expected_version``, or a create-once node already exists.
        """
        creates: list[tuple[str, bytes]] = []
        final_checks: list[str] = []
        for relative, data in step.creates:
            if relative.startswith("checkpoints/") and len(data) > MANIFEST_CHUNK_BYTES:
                self._write_chunked(lead, expected_version, self._path(relative), data)
                final_checks.append(self._path(relative))
            else:
                creates.append((self._path(relative), data))
        txn = self._client.transaction()
        txn.check(lead.candidate, 0)
        if expected_version < 0:
            txn.create(self._path("assignment"), step.control.to_json())
        else:
            txn.set_data(self._path("assignment"), step.control.to_json(), version=expected_version)
        for path in final_checks:
            txn.check(path, 0)
        for path, data in creates:
            txn.create(path, data)
        self._commit(txn, f"{step.kind} v{step.control.version}")
        if step.manifest is not None:
            with self._lock:
                self._manifests[step.manifest.epoch] = step.manifest
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

    def _write_chunked(self, lead: Leadership, expected_version: int, path: str, data: bytes) -> None:
        """Write a large manifest as header + chunks, one fenced transaction per chunk."""
        if self._client.exists(path) is not None:  # debris of a leader that died mid-write
            txn = self._fence(lead, expected_version)
            for child in self._client.get_children(path):
                txn.delete(f"{path}/{child}")
            txn.delete(path)
            self._commit(txn, f"clear {path}")
        chunks = [data[i:i + MANIFEST_CHUNK_BYTES] for i in range(0, len(data), MANIFEST_CHUNK_BYTES)]
        header = json.dumps({
            "chunked": True, "chunks": len(chunks), "size": len(data), "xxh3": xxhash.xxh3_64_intdigest(data),
        }).encode()
        for index, chunk in enumerate(chunks):
            txn = self._fence(lead, expected_version)
            if index == 0:
                txn.create(path, header)
            txn.create(f"{path}/chunk-{index:04d}", chunk)
            self._commit(txn, f"chunk {index} of {path}")

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

    def _collect_garbage(self, lead: Leadership, control: ControlState) -> None:
        """Delete manifests, epochs and decided rounds beyond the last K (fenced, best effort)."""
        keep = self.config.manifests_to_keep
        if control.last_epoch % max(1, keep // 2) != 0:
            return
        doomed: list[str] = []
        for folder, limit in (("checkpoints", control.last_epoch - keep), ("epochs", control.last_epoch - keep),
                              ("rounds", control.version - keep)):
            for name in self._client.get_children(self._path(folder)):
                if name.isdigit() and int(name) <= limit:
                    doomed.append(self._path(f"{folder}/{name}"))
        if not doomed:
            return
        try:
            ops: list[str] = []
            for path in doomed:
                for child in self._client.get_children(path):
                    for grandchild in self._client.get_children(f"{path}/{child}"):
                        ops.append(f"{path}/{child}/{grandchild}")
                    ops.append(f"{path}/{child}")
                ops.append(path)
            for start in range(0, len(ops), _GC_BATCH):
                txn = self._fence(lead, -1)
                for path in ops[start:start + _GC_BATCH]:
                    txn.delete(path)
                self._commit(txn, "garbage collection")
        except (KazooException, FencedError) as exc:
            logger.info("garbage collection deferred: %r", exc)

    # ---- node operations ----------------------------------------------------------------------

    def _require_session(self) -> None:
        if self._lost or self._stopping.is_set() or self._client.client_id is None \
                or self._client.client_id[0] != self._session_id:
            raise SessionLostError(f"node {self.node_id} does not hold its session; rejoin first")

    def _current_control(self, fresh: bool) -> ControlState | None:
        if not fresh and self._tracker.control is not None:
            return self._tracker.control
        return self._read_register()[0]

    def is_leader(self) -> bool:
        return self._leadership is not None and not self._lost

    def members(self) -> tuple[Member, ...]:
        members = self._read_members()
        return tuple(members[n] for n in sorted(members))

    def assignment(self) -> AssignmentSnapshot:
        return self._snapshot

    def request_leave(self) -> None:
        self._require_session()
        self._leaving = True
        path = self._path(f"members/{self.node_id}")
        self._client.set(path, Member(self.node_id, self._boot_id, self._endpoint, True).to_json())

    def report_drain_ready(self, drain_id: AssignmentDrainId) -> None:
        self._require_session()
        for fresh in (False, True):
            control = self._current_control(fresh)
            if control is not None and control.round is not None and control.round.drain_id == drain_id:
                break
        else:
            self._metrics.stale_ready_rejected += 1
            raise RoundError(f"round {drain_id} is not the running round")
        path = self._path(f"rounds/{round_id(drain_id.target_version)}/ready/{ack_name(self.node_id, self._boot_id)}")
        try:
            self._client.create(path, b"")
        except NodeExistsError:
            pass
        except NoNodeError as exc:
            self._metrics.stale_ready_rejected += 1
            raise RoundError(f"round {drain_id} no longer exists", cause=exc) from exc
        except KazooException as exc:
            raise CoordinatorError(f"ready report of round {drain_id} not confirmed: {exc!r}", cause=exc) from exc

    def ack_epoch(self, ack: EpochAck) -> None:
        if ack.node_id != self.node_id or ack.boot_id != self._boot_id or self._lost:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"ack of node {ack.node_id} boot {ack.boot_id} is not this live membership")
        try:
            self._require_session()
        except SessionLostError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(str(exc), cause=exc) from exc
        for fresh in (False, True):
            control = self._current_control(fresh)
            if control is not None and control.open_epoch == ack.epoch and control.version == ack.assignment_version:
                break
        else:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"epoch {ack.epoch} at version {ack.assignment_version} is not open")
        path = self._path(f"epochs/{epoch_name(ack.epoch)}/acks/{ack_name(self.node_id, self._boot_id)}")
        try:
            try:
                self._client.create(path, ack.to_json())
            except NodeExistsError:
                self._client.set(path, ack.to_json())
        except NoNodeError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"epoch {ack.epoch} is closed", cause=exc) from exc
        except SessionExpiredError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"ack of epoch {ack.epoch}: session expired", cause=exc) from exc
        except KazooException as exc:  # connection loss: the ack may or may not be recorded
            raise CoordinatorError(f"ack of epoch {ack.epoch} not confirmed: {exc!r}", cause=exc) from exc

    def latest_manifest(self) -> Manifest | None:
        control = self._read_register()[0]
        if control is None or control.last_epoch == 0:
            return None
        return self._read_manifest(control.last_epoch)

    def manifest(self, epoch: int) -> Manifest:
        control = self._read_register()[0]
        if control is None or not 1 <= epoch <= control.last_epoch:
            raise CoordinatorError(f"epoch {epoch} is not committed")
        return self._read_manifest(epoch)

    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        for vnode, count in load.items():
            if not 0 <= vnode < self.config.vnode_count or count < 0:
                raise ConfigurationError(f"vnode load {vnode}: {count} is out of range")
        data = json.dumps({str(v): int(n) for v, n in sorted(load.items())}).encode()
        path = self._path("vnode_load")
        try:
            self._client.set(path, data)
        except NoNodeError:
            try:
                self._client.create(path, data)
            except NodeExistsError:
                self._client.set(path, data)
        self._kick.set()
