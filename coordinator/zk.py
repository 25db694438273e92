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
    epochs/<epoch>/acks/<node>.<boot> EpochAck JSON (chunked over 512 KB, see below); a replacement
                                      ack of the same boot overwrites it
    epochs/<epoch>/rejected/<node>.<boot>.<digest>   create-once {"reason": ...}: the leader rejected
                                      that ack content of a live owner (coordinator.model.rejection_name);
                                      the node's coordinator delivers AckRejected once per marker
    checkpoints/<epoch>               Manifest JSON, or (over 512 KB) a header
                                      {"chunked": true, "chunks": n, "size": s, "xxh3": h} with
                                      children chunk-0000.. holding the bytes in order (coordinator.zk_store)
    checkpoints/00000000000000000000  the pinned initial manifest (create-once under locks/pin; never
                                      garbage-collected)
    topics/<topic>                    create-once: the topic's Kafka topic id (pin_topic_ids)

Fencing: every leader write is one transaction that checks the leader's election node
(``check(candidate, version=0)``: it exists, so the session that created it is alive) and replaces
the register with ``set_data(assignment, version=<version read>)``; a failure of either (deposed
leader, paused leader whose session expired, or a stale view) rejects the whole write, raises
FencedError and counts ``fenced_writes_rejected``. The only leader writes outside that shape are the
chunks of a large manifest and garbage collection, which also check the election node and the
register version without replacing it; a manifest is committed only by the register's ``last_epoch``,
never by the existence of its node (a chunked manifest's header is published in the commit itself).
A commit also checks, for every node whose ack it relies on, its member node at the data version read
and the election node of that boot (``View.member_checks``): a node that lost its session and
rejoined after the leader read it fails the commit, which is retried from a fresh view.

Threads: kazoo's own threads call only non-blocking callbacks here, which feed one inbox. One
dispatcher thread turns the inbox into events (reading manifests and rejection markers as needed)
and calls subscribers in order. One leader thread runs :func:`coordinator.model.next_step` while
this node leads; its reads and fenced writes are :class:`coordinator.zk_leader.LeaderStore`, the
chunked-node format and create-once records :mod:`coordinator.zk_store`.
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
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

from coordinator.base import (
    MANIFEST_CHUNK_BYTES,
    AckRejected,
    Coordinator,
    CoordinatorConfig,
    CoordinatorEvent,
    CoordinatorMetrics,
    EpochAck,
    EventCallback,
    Manifest,
    Member,
    SessionState,
    SessionStateChanged,
    Subscribers,
    check_initial_manifest,
    check_topic_ids,
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
)
from coordinator.registry import AssignmentSnapshot, NodeId
from coordinator.rounds import AssignmentDrainId, round_id
from coordinator.zk_leader import CANDIDATE_PREFIX, Leadership, LeaderStore
from coordinator.zk_store import ManifestStore, commit_or_raise, create_once, descendants, pin_names, write_chunks

logger = logging.getLogger(__name__)

__all__ = ["ZooKeeperCoordinator"]

#: Upper bound on steps the leader takes in one pass before re-checking its leadership.
_MAX_STEPS_PER_PASS = 64


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
        self._manifests = ManifestStore(self._client, self._path("checkpoints"), config.session_timeout,
                                        config.manifests_to_keep)
        self._store = LeaderStore(self._client, config, self._metrics, self._manifests, self._kick)
        self._rejection_watches: set[int] = set()  # epochs whose rejected/ folder is watched
        self._reported: set[tuple[int, str]] = set()  # (epoch, marker) delivered as AckRejected
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
            self._path(f"leader/{CANDIDATE_PREFIX}"), data, ephemeral=True, sequence=True
        )

    # ---- kazoo callbacks (never block) ------------------------------------------------------

    def _on_session_state(self, state: str) -> None:
        self._store.clear_cache()  # watches may have been missed while disconnected
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
        candidates = sorted(c for c in children if c.startswith(CANDIDATE_PREFIX))
        mine = self._candidate.rsplit("/", 1)[1] if self._candidate else None
        with self._lock:
            if mine is not None and candidates and candidates[0] == mine and not self._lost:
                if self._leadership is None or self._leadership.candidate != self._candidate:
                    token = int(mine[len(CANDIDATE_PREFIX):]) + 1
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
                elif kind == "rejections":
                    self._report_rejections(*payload)
                elif kind == "resync":
                    self._tracker = EventTracker()
                    self._rejection_watches.clear()
                    control = self._read_register()[0]
                    if control is not None:
                        self._observe(control)
            except Exception:  # noqa: BLE001 - the dispatcher must survive any one bad item
                logger.exception("coordinator %d failed to process %s", self.node_id, kind)

    def _observe(self, control: ControlState) -> None:
        manifests: dict[int, Manifest] = {}
        for epoch in self._tracker.committed_range(control):
            try:
                manifests[epoch] = self._manifests.read(epoch)
            except CoordinatorError:
                logger.debug("manifest %d already collected", epoch)
        events = self._tracker.advance(control, manifests)
        self._snapshot = self._tracker.control.snapshot if self._tracker.control else self._snapshot
        self._deliver(events)
        self._watch_rejections(control)

    def _epoch_closed(self, epoch: int) -> bool:
        control = self._tracker.control
        return control is not None and control.last_epoch >= epoch

    def _watch_rejections(self, control: ControlState) -> None:
        """Watch the rejection markers of the open epoch (one kazoo ChildrenWatch per epoch, which
        stops once the epoch is closed); the markers reach :meth:`_report_rejections` via the inbox."""
        epoch = control.open_epoch
        if not epoch or epoch in self._rejection_watches:
            return
        self._rejection_watches = {e for e in self._rejection_watches if e >= control.last_epoch}
        self._reported = {r for r in self._reported if r[0] > control.last_epoch}
        self._rejection_watches.add(epoch)

        def on_markers(children: list[str]) -> bool | None:
            if self._stopping.is_set() or self._epoch_closed(epoch):
                return False
            self._inbox.put(("rejections", (epoch, list(children))))
            return None

        try:
            self._client.ChildrenWatch(self._path(f"epochs/{epoch_name(epoch)}/rejected"), on_markers)
        except (KazooException, KazooTimeoutError) as exc:  # retried on the next register change or resync
            self._rejection_watches.discard(epoch)
            logger.warning("cannot watch the rejections of epoch %d: %r", epoch, exc)

    def _report_rejections(self, epoch: int, names: list[str]) -> None:
        """Deliver AckRejected once per new marker of this boot's acks (dispatcher thread)."""
        prefix = f"{ack_name(self.node_id, self._boot_id)}."
        for name in sorted(names):
            if not name.startswith(prefix) or (epoch, name) in self._reported or self._epoch_closed(epoch):
                continue
            try:
                raw, _ = self._client.get(self._path(f"epochs/{epoch_name(epoch)}/rejected/{name}"))
                reason = str(json.loads(raw)["reason"])
            except NoNodeError:
                continue
            except (KazooException, KazooTimeoutError) as exc:  # the watch will not fire again: retry
                logger.info("reading rejection %s of epoch %d failed (%r); retrying", name, epoch, exc)
                if not self._stopping.is_set():
                    retry = threading.Timer(0.5, self._inbox.put, args=(("rejections", (epoch, [name])),))
                    retry.daemon = True
                    retry.start()
                continue
            except (ValueError, KeyError, TypeError):
                reason = "rejected by the leader (malformed marker)"
            self._reported.add((epoch, name))
            self._metrics.bump("ack_rejections_received")
            logger.warning("node %d: the leader rejected its ack of epoch %d: %s", self.node_id, epoch, reason)
            self._deliver([AckRejected(epoch, reason)])

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
            except (KazooException, KazooTimeoutError, CoordinatorError) as exc:
                logger.warning("leader pass of node %d failed: %r", self.node_id, exc)
                timeout = 0.2
            except Exception:  # noqa: BLE001 - the leader thread must survive any one bad pass
                logger.exception("leader pass of node %d failed", self.node_id)
                timeout = 1.0

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
            view, version = self._store.read_view()
            step = next_step(view, self.config, lead.token)
            if step is None:
                wake = next_wakeup_ms(view.control, self.config)
                return None if wake is None else max(0.0, (wake - _now_ms()) / 1000) + 0.001
            self.execute(lead, step, version)
        return 0.0

    def _read_view(self) -> tuple[View, int]:
        """The leader's view and the register version it was read at (see LeaderStore.read_view)."""
        return self._store.read_view()

    def execute(self, lead: Leadership, step: Step, expected_version: int) -> None:
        """Apply ``step`` as one fenced transaction (see LeaderStore.execute); FencedError when rejected."""
        self._store.execute(lead, step, expected_version)

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
        """See Coordinator.ack_epoch. The ack node ``epochs/<E>/acks/<node>.<boot>`` is created or
        overwritten (a replacement after AckRejected); over MANIFEST_CHUNK_BYTES it is chunked
        (:mod:`coordinator.zk_store`), replacing the previous node."""
        if ack.node_id != self.node_id or ack.boot_id != self._boot_id or self._lost:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"ack of node {ack.node_id} boot {ack.boot_id} is not this live membership")
        try:
            self._require_session()
        except SessionLostError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(str(exc), cause=exc) from exc
        path = self._path(f"epochs/{epoch_name(ack.epoch)}/acks/{ack_name(self.node_id, self._boot_id)}")
        data = ack.to_json()
        try:
            for fresh in (False, True):
                control = self._current_control(fresh)
                if control is not None and control.open_epoch == ack.epoch \
                        and control.version == ack.assignment_version:
                    break
            else:
                self._closed_epoch_ack(ack, "is not open")
                return
            try:
                self._write_ack(path, data)
            except NoNodeError as exc:  # the epoch's node is gone (committed and collected)
                self._closed_epoch_ack(ack, "is closed", exc)
        except SessionExpiredError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"ack of epoch {ack.epoch}: session expired", cause=exc) from exc
        except (KazooException, KazooTimeoutError) as exc:  # connection loss: the ack may or may not be recorded
            raise CoordinatorError(f"ack of epoch {ack.epoch} not confirmed: {exc!r}", cause=exc) from exc

    def _write_ack(self, path: str, data: bytes) -> None:
        """Create or overwrite the ack node. Over MANIFEST_CHUNK_BYTES: replace it by PENDING +
        chunks, then publish the header (readers skip the ack meanwhile, and the header's publication
        fires their data watch). A small ack overwriting a chunked one just replaces the data (the
        old chunks are ignored, and collected with the epoch)."""
        if len(data) <= MANIFEST_CHUNK_BYTES:
            try:
                self._client.create(path, data)
            except NodeExistsError:
                self._client.set(path, data)
            return
        debris = descendants(self._client, path)
        if debris:
            txn = self._client.transaction()
            for doomed in debris:
                txn.delete(doomed)
            commit_or_raise(txn)
        header = write_chunks(self._client, path, data, MANIFEST_CHUNK_BYTES, self._client.transaction,
                              lambda txn, _what: commit_or_raise(txn))
        self._client.set(path, header, version=0)

    def _closed_epoch_ack(self, ack: EpochAck, why: str, cause: BaseException | None = None) -> None:
        """An ack for an epoch that is not open: success if that epoch committed with this boot's ack
        (a retry whose answer was lost), else FencedError (counted)."""
        control = self._read_register()[0]
        if control is not None and 1 <= ack.epoch <= control.last_epoch:
            manifest = self._manifests.find(ack.epoch)
            if manifest is not None and (ack.node_id, ack.boot_id) in manifest.acked_by:
                return
        self._metrics.stale_acks_rejected += 1
        raise FencedError(f"epoch {ack.epoch} at version {ack.assignment_version} {why}", cause=cause)

    def latest_manifest(self) -> Manifest | None:
        control = self._read_register()[0]
        if control is not None and control.last_epoch:
            return self._manifests.read(control.last_epoch)
        return self._manifests.find(0)

    def manifest(self, epoch: int) -> Manifest:
        if epoch == 0:
            return self._manifests.read(0)
        control = self._read_register()[0]
        if control is None or not 1 <= epoch <= control.last_epoch:
            raise CoordinatorError(f"epoch {epoch} is not committed")
        return self._manifests.read(epoch)

    def pin_start(self, manifest: Manifest) -> Manifest:
        """See Coordinator.pin_start: ``checkpoints/00000000000000000000``, create-once under the lock
        ``locks/pin`` (chunked when large)."""
        check_initial_manifest(manifest)
        path = self._path(f"checkpoints/{epoch_name(0)}")
        try:
            stored = create_once(self._client, path, manifest.to_json(), MANIFEST_CHUNK_BYTES,
                                 self._path("locks/pin"), self.config.session_timeout * 3)
        except KazooException as exc:
            raise CoordinatorError(f"initial manifest not pinned: {exc!r}", cause=exc) from exc
        pinned = Manifest.from_json(stored)
        check_initial_manifest(pinned)
        self._manifests.remember(pinned)
        self._kick.set()
        return pinned

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """See Coordinator.pin_topic_ids: one create-once node ``topics/<topic>`` per topic."""
        check_topic_ids(ids)
        try:
            return pin_names(self._client, self._path("topics"), ids, self.config.session_timeout)
        except KazooException as exc:
            raise CoordinatorError(f"topic ids not pinned: {exc!r}", cause=exc) from exc

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
