"""ZooKeeperCoordinator: the pipeline's control plane on a real ZooKeeper, through kazoo.

The engine (:class:`laminar_kafka.coordinator.engine.core.EngineCoordinator`) does the work over a
:class:`laminar_kafka.coordinator.zk.store.ZooKeeperStore` (layout: :mod:`laminar_kafka.coordinator.layout`; fencing: see
``zk_store``). This module adds what only ZooKeeper has: the kazoo session and its states, the
ephemeral member entry, the leader election and the watches that feed the engine. With
``config.credentials`` the session authenticates and every node it creates carries the digest ACL
(:mod:`laminar_kafka.coordinator.zk.auth`); a session the subtree's ACL refuses fails ``start`` with
AccessDeniedError.

Election: ``leader/candidate-<seq>`` (ephemeral sequential, ``{node_id, boot_id}``); the lowest is
the leader and its sequence number + 1 is the fencing token (monotonic: a later leader always holds a
higher sequence than every earlier one).

Threads: kazoo's own threads call only non-blocking callbacks here (they feed the dispatcher's inbox
or wake the leader loop). Clocks: deadlines and the checkpoint timer use the leader's wall clock
(nodes' clocks are assumed roughly synchronised; a skew only shifts when a new leader considers a
deadline passed).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, ContextManager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, WatchedEvent, ZnodeStat

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.core import EngineCoordinator
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics, SessionState
from laminar_kafka.coordinator.errors import (
    AccessDeniedError,
    ControlStateLost,
    CoordinatorError,
    NodeIdTaken,
    SessionLostError,
)
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import Leadership
from laminar_kafka.coordinator.values import Member
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.coordinator.zk.auth import ensure_subtree, open_client
from laminar_kafka.coordinator.zk.store import ZooKeeperStore
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["ZooKeeperCoordinator"]

#: kazoo failures that mean "not confirmed, retry".
TRANSIENT: tuple[type[BaseException], ...] = (KazooException, KazooTimeoutError)


#: the lock of the start-up reconciliation with the lake (relative to the pipeline's subtree)
RECONCILE_LOCK = "locks/reconcile"
#: session timeouts a session may stay suspended before the client stops presenting the last zxid it
#: saw: an ensemble replaced by an empty one, or restored from an older copy, refuses a client that saw
#: newer data, for ever (kazoo would reconnect for ever, the node suspended for ever); without the zxid
#: such a server answers "session expired" (LOST: the node stops and reconciles with the lake), and a
#: live ensemble that lost its quorum for that long takes the session back as before
SUSPENDED_TIMEOUTS = 3.0


@contextlib.contextmanager
def _held(lock: Any, timeout: float) -> Iterator[None]:
    """Hold kazoo ``lock`` for the block; CoordinatorError when not acquired in ``timeout`` seconds."""
    try:
        acquired = lock.acquire(timeout=timeout)
    except KazooTimeoutError:
        acquired = False
    if not acquired:
        raise CoordinatorError(f"lock {lock.path} not acquired in {timeout:.0f}s (another node holds it)")
    try:
        yield
    finally:
        lock.release()


def went_back(seen: ControlState | None, data: bytes | None, exists: bool) -> str:
    """Why the register read now (``data``; ``exists`` False: deleted) is not a successor of the one this
    node saw (``seen``): "" when it is (or nothing was seen, or it does not decode: the dispatcher
    reports that). A register's version and last epoch only grow; one that is gone or smaller is
    another control state (deleted, replaced, restored from an older copy, or reseeded from the lake
    by nodes that started while this one was cut off), on which nothing this node holds is valid."""
    if seen is None or seen.version == 0:
        return ""
    if not exists:
        return f"is gone (this node saw version {seen.version}, epoch {seen.last_epoch})"
    try:
        now = ControlState.from_json(data) if data else None
    except CoordinatorError:
        return ""
    if now is None or (now.version >= seen.version and now.last_epoch >= seen.last_epoch):
        return ""
    return (f"went back to version {now.version}, epoch {now.last_epoch} (this node saw version {seen.version}, "
            f"epoch {seen.last_epoch})")


class ZooKeeperCoordinator(EngineCoordinator):
    """See the module docstring. Thread-safe; methods block on ZooKeeper (call them off the loop).

    ``id_origin``: how the node id was chosen when not given by hand (``--node-id auto``: the host
    name's ordinal, or an id allocated to the node's identity); the refusal of a twin names it.
    """

    def __init__(self, config: CoordinatorConfig, node_id: NodeId, endpoint: str = "", *, id_origin: str = "") -> None:
        if not config.hosts:
            raise ConfigurationError("ZooKeeperCoordinator needs config.hosts")
        client = open_client(config.hosts, config.session_timeout, config.credentials)
        metrics = CoordinatorMetrics()  # shared: the store counts its transactions in it
        store = ZooKeeperStore(client, config, metrics)
        super().__init__(config, node_id, endpoint, store, TRANSIENT, metrics)
        store.on_change = self._leader.kick
        self._zk_store = store
        self._client = client
        self._base = store.base
        self._lock = threading.RLock()
        self._session_id: int | None = None
        self._lost = False
        self._suspended = False
        self._candidate: str | None = None
        self._leadership: Leadership | None = None
        self._rejection_watches: set[int] = set()  # epochs whose rejected/ folder is watched
        self._connected = False
        self._connect_lock = threading.Lock()
        self._control_lost = ""  # why the register this node followed is gone or went back ("": it is not)
        self._suspensions = 0  # SUSPENDED transitions so far (a suspension's watchdog acts on its own only)
        self._dispatcher.on_observed = self._watch_rejections
        self._id_origin = id_origin

    # ---- properties ---------------------------------------------------------------------------------

    @property
    def client(self) -> KazooClient:
        """The kazoo client (tests use its session id to expire the session on the server)."""
        return self._client

    @property
    def leadership(self) -> Leadership | None:
        """The current term if this node leads, else None."""
        return self._leadership

    def _term(self) -> Leadership | None:
        return None if self._lost or self._suspended else self._leadership

    # ---- lifecycle ----------------------------------------------------------------------------

    def connect(self, timeout: float = 30.0) -> None:
        """Open the session and make sure the pipeline's subtree exists (see Coordinator.connect)."""
        with self._connect_lock:  # not self._lock: kazoo's session callback takes that one
            if self._connected:
                return
            try:
                self._client.start(timeout=timeout)
            except KazooTimeoutError as exc:
                raise CoordinatorError(f"ZooKeeper {self.config.hosts} unreachable in {timeout}s", cause=exc) from exc
            try:
                ensure_subtree(self._client, self._base, self.config.credentials)
            except AccessDeniedError:
                self._client.stop()
                self._client.close()
                raise
            self._client.add_listener(self._on_session_state)
            for folder in layout.FOLDERS:
                self._client.ensure_path(self._zk_store.path(folder))
            self._connected = True

    def reconcile_lock(self) -> ContextManager[None]:
        """A kazoo lock at ``locks/reconcile`` (ephemeral: a node that dies releases it)."""
        return _held(self._client.Lock(self._zk_store.path(RECONCILE_LOCK)), self.config.session_timeout * 10)

    def start(self, timeout: float = 30.0) -> None:
        if not self._claim_start():
            return
        try:
            self.connect(timeout)
        except BaseException:  # not started after all, then re-raised
            self._started = False
            raise
        self._start_engine()
        self._register(timeout)
        self._join_election()
        self._client.ChildrenWatch(self._zk_store.path(layout.LEADER), self._on_candidates)
        self._client.DataWatch(self._zk_store.path(layout.ASSIGNMENT), self._on_register)
        self._dispatcher.barrier(timeout)

    def stop(self) -> None:
        if not self._claim_stop():
            with self._connect_lock:  # connected only (reconciling), never joined: close the session
                close, self._connected = self._connected and not self._started, False
            if close:  # outside the lock: kazoo's session callback takes it while the client stops
                self._client.stop()
                self._client.close()
            return
        with self._lock:
            self._leadership = None
        self._leader.kick()
        for path in (self._zk_store.path(layout.member_path(self.node_id)), self._candidate):
            if path is None:
                continue
            try:
                _, stat = self._client.get(path)
                if stat.ephemeralOwner == self._client.client_id[0]:
                    self._client.delete(path, version=stat.version)
            except (KazooException, TypeError):
                pass
        try:
            self._client.stop()
        finally:
            self._client.close()
        self._stop_engine()

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
        try:  # a session lost while the control state was replaced: never join the new one from old state
            data, stat = self._client.get(self._zk_store.path(layout.ASSIGNMENT))
        except NoNodeError:
            data, stat = None, None
        reason = self._control_lost or went_back(self._dispatcher.control, data, stat is not None)
        if reason:
            raise ControlStateLost(f"the pipeline's register {reason}")
        if old_candidate is not None:  # only this session's: in a replaced ensemble the name is another's
            try:
                _, candidate = self._client.get(old_candidate)
                if candidate.ephemeralOwner == self._client.client_id[0]:
                    self._client.delete(old_candidate, version=candidate.version)
            except NoNodeError:
                pass
        self._register(self.config.session_timeout * 3)
        self._join_election()
        with self._lock:
            self._lost = False
            self._suspended = False
        self._metrics.session_state = SessionState.CONNECTED.value
        self._dispatcher.session(SessionState.CONNECTED)
        self._rejection_watches.clear()
        self._dispatcher.resync()
        self._on_candidates(self._client.get_children(self._zk_store.path(layout.LEADER)))
        self._dispatcher.barrier(self.config.session_timeout)

    def _register(self, timeout: float) -> None:
        """Create this node's ephemeral member entry; wait out a dead session's stale entry (it ends
        within a session timeout), saying so once, for at most ``timeout`` or 2 x session timeout +
        10 s, whichever is longer; then an entry still held means another process runs as this node:
        :class:`NodeIdTaken` (the twin refusal; it names ``id_origin``)."""
        path = self._zk_store.path(layout.member_path(self.node_id))
        member = Member(self.node_id, self._boot_id, self._endpoint, self._leaving)
        bound = max(timeout, 2 * self.config.session_timeout + 10.0)
        deadline = time.monotonic() + bound
        holder = ""
        while True:
            try:
                self._client.create(path, member.to_json(), ephemeral=True)
                break
            except NoNodeError as exc:
                raise ControlStateLost(f"the pipeline's subtree {self._base} is gone", cause=exc) from exc
            except NodeExistsError:
                try:
                    raw, stat = self._client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._client.client_id[0]:
                    self._client.set(path, member.to_json(), version=stat.version)
                    break
                gone = threading.Event()
                if self._client.exists(path, watch=lambda _e, gone=gone: gone.set()) is None:  # this attempt's event
                    continue
                if not holder:
                    holder = _holder_text(self.node_id, raw, stat.ephemeralOwner)
                    logger.warning("node id %d is held by a live session (%s): waiting up to %.0fs for it to end "
                                   "(a previous run of this node whose session has not expired yet, or another "
                                   "process running as node %d)", self.node_id, holder, bound, self.node_id)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not gone.wait(remaining):
                    origin = f" ({self._id_origin})" if self._id_origin else ""
                    raise NodeIdTaken(
                        f"node id {self.node_id} is held by a live session ({holder}) after {bound:.0f}s: another "
                        f"process runs as node {self.node_id}{origin}; stop it or choose another --node-id"
                    ) from None
        self._session_id = self._client.client_id[0]

    def _join_election(self) -> None:
        self._candidate = self._client.create(
            self._zk_store.path(layout.candidate_path(layout.CANDIDATE_PREFIX)),
            layout.candidate_data(self.node_id, self._boot_id), ephemeral=True, sequence=True,
        )

    # ---- kazoo callbacks (never block) ------------------------------------------------------

    def _on_session_state(self, state: str) -> None:
        self._zk_store.clear_cache()  # watches may have been missed while disconnected
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._suspensions += 1
            self._metrics.session_state = SessionState.SUSPENDED.value
            self._dispatcher.session(SessionState.SUSPENDED)
            timer = threading.Timer(self.config.session_timeout * SUSPENDED_TIMEOUTS, self._suspended_too_long,
                                    (self._suspensions,))
            timer.daemon = True
            timer.start()
        elif state == KazooState.LOST:
            with self._lock:
                self._lost = True
                self._leadership = None
            self._metrics.session_state = SessionState.LOST.value
            self._dispatcher.session(SessionState.LOST)
        else:
            was_suspended = self._suspended
            self._suspended = False
            if not self._lost and was_suspended:
                self._metrics.session_state = SessionState.CONNECTED.value
                self._dispatcher.session(SessionState.CONNECTED)
            self._leader.kick()

    def _suspended_too_long(self, suspension: int) -> None:
        """Still the same suspension after :data:`SUSPENDED_TIMEOUTS`: reconnect without the last zxid."""
        if not self._suspended or suspension != self._suspensions or self._stopping.is_set():
            return
        logger.warning("node %d: ZooKeeper %s has not taken the session back in %.0fs (a replaced or restored "
                       "ensemble refuses a client that saw newer data): reconnecting without the last zxid seen",
                       self.node_id, self.config.hosts, self.config.session_timeout * SUSPENDED_TIMEOUTS)
        self._client.last_zxid = 0

    def _on_candidates(self, children: list[str]) -> None:
        candidates = sorted(c for c in children if c.startswith(layout.CANDIDATE_PREFIX))
        mine = self._candidate.rsplit("/", 1)[1] if self._candidate else None
        with self._lock:
            if mine is not None and candidates and candidates[0] == mine and not self._lost:
                if self._leadership is None or self._leadership.candidate != self._candidate:
                    assert self._candidate is not None
                    self._leadership = Leadership(layout.candidate_seq(mine) + 1, self._candidate)
                    self._metrics.leader_elections_won += 1
                    logger.info("node %d leads pipeline %s with token %d", self.node_id, self._base,
                                self._leadership.token)
            elif self._leadership is not None:
                logger.info("node %d no longer leads pipeline %s", self.node_id, self._base)
                self._leadership = None
        self._leader.kick()

    def _on_register(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> None:
        reason = "" if self._stopping.is_set() else went_back(self._dispatcher.control, data, stat is not None)
        if reason:
            with self._lock:
                first = not self._control_lost
                self._control_lost = reason
            if first:  # the runtime's rejoin then raises ControlStateLost: the node stops
                logger.error("node %d: the pipeline's register %s: its session is treated as lost", self.node_id,
                             reason)
                self._dispatcher.session(SessionState.LOST)
            return
        if data:
            self._dispatcher.observe(data)
        self._leader.kick()

    def _on_fenced(self, term: Leadership) -> None:
        """A step was rejected: find out whether this node was deposed (its election node is gone)."""
        try:
            alive = self._client.exists(term.candidate) is not None
        except KazooException:
            return
        if not alive:
            with self._lock:
                if self._leadership == term:
                    self._leadership = None
            logger.info("node %d was deposed (election node gone)", self.node_id)

    def _watch_rejections(self, control: ControlState) -> None:
        """Watch the rejection markers of the open epoch (one kazoo ChildrenWatch per epoch, which
        stops once the epoch is closed); the markers reach the dispatcher's inbox (dispatcher thread)."""
        epoch = control.open_epoch
        if not epoch or epoch in self._rejection_watches:
            return
        self._rejection_watches = {e for e in self._rejection_watches if e >= control.last_epoch}
        self._rejection_watches.add(epoch)

        def on_markers(children: list[str]) -> bool | None:
            if self._stopping.is_set() or self._dispatcher.epoch_closed(epoch):
                return False
            self._dispatcher.rejections(epoch, children)
            return None

        try:
            self._client.ChildrenWatch(self._zk_store.path(layout.rejected_folder(epoch)), on_markers)
        except TRANSIENT as exc:  # retried on the next register change or resync
            self._rejection_watches.discard(epoch)
            logger.warning("cannot watch the rejections of epoch %d: %r", epoch, exc)

    # ---- node operations ----------------------------------------------------------------------

    def _require_session(self) -> None:
        if self._lost or self._stopping.is_set() or self._client.client_id is None \
                or self._client.client_id[0] != self._session_id:
            raise SessionLostError(f"node {self.node_id} does not hold its session; rejoin first")

    def is_leader(self) -> bool:
        return self._leadership is not None and not self._lost

    def members(self) -> tuple[Member, ...]:
        members = self._zk_store.read_members()
        return tuple(members[n] for n in sorted(members))

    def request_leave(self) -> None:
        self._require_session()
        self._leaving = True
        path = self._zk_store.path(layout.member_path(self.node_id))
        self._client.set(path, Member(self.node_id, self._boot_id, self._endpoint, True).to_json())


def _holder_text(node_id: NodeId, raw: bytes, session_id: int) -> str:
    """``boot <id>, endpoint <endpoint>, session 0x<id>`` of the member entry held by another session."""
    try:
        member = Member.from_json(node_id, raw)
        boot, endpoint = member.boot_id, member.endpoint or "none"
    except CoordinatorError:
        boot, endpoint = "unreadable", "unreadable"
    return f"boot {boot}, endpoint {endpoint}, session {session_id:#x}"
