"""LocalCoordinator: the Coordinator interface for one embedded process, with no ZooKeeper.

This node is the only member and always the leader; it runs the same pure state machine as the
ZooKeeper backend (:func:`coordinator.model.next_step`), with the register held in memory.

Durability, in ``directory``::

    manifest-<epoch:020d>.json   one committed manifest per file (the truth for recovery); epoch 0 is
                                 the pinned initial manifest (create-once, never garbage-collected)
    state.json                   the register (ControlState JSON), rewritten after each step
    topics.json                  {topic: Kafka topic id}, each entry create-once (pin_topic_ids)

Every file is written to ``<name>.tmp``, fsynced, atomically renamed over ``<name>``, and the
directory is fsynced. A manifest file is the commit point of its epoch: it is written before the
register that records it, and on start a manifest newer than the register's ``last_epoch`` is
adopted (the register is advanced to it). A crash between the temporary write and the rename
leaves the previous files intact; leftover ``*.tmp`` files are removed on start. After a restart the
previous process's boot id is dead, so the first step re-publishes the vnodes to the new boot with
``manifest_epoch`` = the latest manifest (no drain).

Acks, drain receipts and rejection records live in memory (one process: a restart reopens the epoch).
The member is never fenced by node checks (``View.member_checks`` is None): this process is the only
member. A content rejection of this node's ack is delivered as ``AckRejected`` once per ack content.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from coordinator.base import (
    AckRejected,
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
    check_initial_manifest,
    check_topic_ids,
)
from coordinator.errors import ConfigurationError, CoordinatorError, FencedError, RoundError
from coordinator.model import ControlState, EventTracker, Step, View, next_step, next_wakeup_ms, rejection_name
from coordinator.registry import AssignmentSnapshot, NodeId
from coordinator.rounds import AssignmentDrainId

logger = logging.getLogger(__name__)

__all__ = ["LocalCoordinator", "write_durable"]

#: Test hook: called after the temporary file is durable and before the rename (crash injection).
before_rename: Callable[[Path], None] | None = None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory.

    After it returns the content survives a crash; if the process dies inside it, ``path`` holds
    either its previous content or the new one, never a mix.
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if before_rename is not None:
        before_rename(path)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _now_ms() -> int:
    return int(time.time() * 1000)


class LocalCoordinator(Coordinator):
    """See the module docstring. Thread-safe; events come from one dispatcher thread, in order."""

    def __init__(self, config: CoordinatorConfig, directory: str | os.PathLike[str], node_id: NodeId = 1,
                 endpoint: str = "") -> None:
        if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 1:
            raise ConfigurationError(f"node_id {node_id!r} must be an int >= 1")
        self.config = config
        self.node_id = node_id
        self._dir = Path(directory)
        self._endpoint = endpoint
        self._boot_id = uuid.uuid4().hex
        self._leaving = False
        self._metrics = CoordinatorMetrics()
        self._lock = threading.Condition()
        self._subscribers = Subscribers()
        self._events: queue.Queue[tuple[str, object]] = queue.Queue()
        self._control: ControlState | None = None
        self._acks: dict[int, dict[str, EpochAck]] = {}
        self._rejections: dict[int, set[str]] = {}  # epoch -> rejection names (model.rejection_name)
        self._ready: dict[AssignmentDrainId, set[tuple[int, str]]] = {}
        self._decisions: set[AssignmentDrainId] = set()
        self._load: dict[int, int] = {}
        self._manifests: dict[int, Manifest] = {}
        self._tracker = EventTracker()
        self._snapshot = AssignmentSnapshot.initial(config.vnode_count)
        self._started = False
        self._stopping = False
        self._dirty = True
        self._threads: list[threading.Thread] = []

    # ---- files --------------------------------------------------------------------------------

    def _manifest_path(self, epoch: int) -> Path:
        return self._dir / f"manifest-{epoch:020d}.json"

    def _manifest_epochs(self) -> list[int]:
        epochs = []
        for path in self._dir.glob("manifest-*.json"):
            stem = path.name[len("manifest-"):-len(".json")]
            if stem.isdigit():
                epochs.append(int(stem))
        return sorted(epochs)

    def _recover(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        for tmp in self._dir.glob("*.tmp"):
            tmp.unlink()
        state = self._dir / "state.json"
        control = ControlState.from_json(state.read_bytes()) if state.exists() else None
        epochs = self._manifest_epochs()
        if control is not None and epochs and epochs[-1] > control.last_epoch:
            # The manifest is the commit point; the register write after it was lost.
            control = replace(control, open_epoch=0, last_epoch=epochs[-1])
        if control is not None and control.open_epoch:
            # Acks lived in memory and died with the process: reopen the epoch as the next one later.
            control = replace(control, open_epoch=0)
        if control is not None and control.round is not None:
            control = replace(control, round=None)  # drains died with the previous process
        self._control = control

    # ---- interface ----------------------------------------------------------------------------

    @property
    def boot_id(self) -> str:
        return self._boot_id

    @property
    def metrics(self) -> CoordinatorMetrics:
        return self._metrics

    def subscribe(self, callback: EventCallback) -> None:
        self._subscribers.add(callback)

    def start(self, timeout: float = 30.0) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            try:
                self._recover()
            except (OSError, CoordinatorError) as exc:
                raise CoordinatorError(f"cannot recover local coordinator state in {self._dir}: {exc}",
                                       cause=exc) from exc
            self._metrics.leader_elections_won += 1
        for target, name in ((self._dispatch_loop, "dispatch"), (self._leader_loop, "leader")):
            thread = threading.Thread(target=target, name=f"local-coordinator-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = time.monotonic() + timeout
        with self._lock:
            self._dirty = True
            self._lock.notify_all()
            while self._dirty or (self._control is None or self._control.boot_of(self.node_id) is None) \
                    and not self._leaving:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CoordinatorError(f"local coordinator did not publish an assignment in {timeout}s")
                self._lock.wait(remaining)
        done = threading.Event()
        self._events.put(("barrier", done))
        done.wait(timeout)

    def stop(self) -> None:
        with self._lock:
            if not self._started or self._stopping:
                return
            self._stopping = True
            self._lock.notify_all()
        self._events.put(("quit", None))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def rejoin(self) -> None:
        with self._lock:
            self._boot_id = uuid.uuid4().hex
            self._tracker = EventTracker()
            self._dirty = True
            self._lock.notify_all()
        self._events.put(("session", SessionState.CONNECTED))

    def is_leader(self) -> bool:
        return self._started and not self._stopping

    def members(self) -> tuple[Member, ...]:
        return (Member(self.node_id, self._boot_id, self._endpoint, self._leaving),)

    def assignment(self) -> AssignmentSnapshot:
        return self._snapshot

    def request_leave(self) -> None:
        with self._lock:
            self._leaving = True
            self._dirty = True
            self._lock.notify_all()

    def report_drain_ready(self, drain_id: AssignmentDrainId) -> None:
        with self._lock:
            control = self._control
            if control is None or control.round is None or control.round.drain_id != drain_id:
                self._metrics.stale_ready_rejected += 1
                raise RoundError(f"round {drain_id} is not the running round")
            self._ready.setdefault(drain_id, set()).add((self.node_id, self._boot_id))
            self._dirty = True
            self._lock.notify_all()

    def ack_epoch(self, ack: EpochAck) -> None:
        """See Coordinator.ack_epoch (a replacement ack of this boot overwrites the previous one)."""
        with self._lock:
            control = self._control
            if ack.node_id != self.node_id or ack.boot_id != self._boot_id or control is None \
                    or control.open_epoch != ack.epoch or control.version != ack.assignment_version:
                if self._already_committed(ack):
                    return  # a retry of an ack that is in its epoch's manifest
                self._metrics.stale_acks_rejected += 1
                raise FencedError(f"stale ack for epoch {ack.epoch} at version {ack.assignment_version}")
            self._acks.setdefault(ack.epoch, {})[f"{ack.node_id}.{ack.boot_id}"] = ack
            self._dirty = True
            self._lock.notify_all()

    def _already_committed(self, ack: EpochAck) -> bool:
        control = self._control
        if control is None or not 1 <= ack.epoch <= control.last_epoch:
            return False
        try:
            return (ack.node_id, ack.boot_id) in self.manifest(ack.epoch).acked_by
        except CoordinatorError:
            return False

    def latest_manifest(self) -> Manifest | None:
        control = self._control
        if control is None or control.last_epoch == 0:
            return self._initial_manifest()
        return self.manifest(control.last_epoch)

    def manifest(self, epoch: int) -> Manifest:
        cached = self._manifests.get(epoch)
        if cached is not None:
            return cached
        try:
            manifest = Manifest.from_json(self._manifest_path(epoch).read_bytes())
        except FileNotFoundError as exc:
            raise CoordinatorError(f"manifest {epoch} does not exist (never committed or pinned, or collected)",
                                   cause=exc) from exc
        self._manifests[epoch] = manifest
        return manifest

    def _initial_manifest(self) -> Manifest | None:
        try:
            return self.manifest(0)
        except CoordinatorError:
            return None

    def pin_start(self, manifest: Manifest) -> Manifest:
        """See Coordinator.pin_start: ``manifest-00000000000000000000.json``, create-once."""
        check_initial_manifest(manifest)
        with self._lock:
            self._dir.mkdir(parents=True, exist_ok=True)
            stored = self._initial_manifest()
            if stored is None:
                write_durable(self._manifest_path(0), manifest.to_json())
                self._manifests[0] = stored = manifest
            check_initial_manifest(stored)
            return stored

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """See Coordinator.pin_topic_ids: ``topics.json``, each entry create-once."""
        check_topic_ids(ids)
        path = self._dir / "topics.json"
        with self._lock:
            self._dir.mkdir(parents=True, exist_ok=True)
            try:
                stored = {str(t): str(i) for t, i in json.loads(path.read_bytes()).items()}
            except FileNotFoundError:
                stored = {}
            except (ValueError, AttributeError) as exc:
                raise CoordinatorError(f"malformed {path}: {exc}", cause=exc) from exc
            missing = {t: i for t, i in ids.items() if t not in stored}
            if missing:
                stored.update(missing)
                write_durable(path, json.dumps(dict(sorted(stored.items()))).encode())
            return {t: stored[t] for t in ids}

    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        for vnode, count in load.items():
            if not 0 <= vnode < self.config.vnode_count or count < 0:
                raise ConfigurationError(f"vnode load {vnode}: {count} is out of range")
        with self._lock:
            self._load = dict(load)
            self._dirty = True
            self._lock.notify_all()

    # ---- leader and dispatcher ----------------------------------------------------------------

    def _view(self) -> View:
        control = self._control
        acks: tuple[EpochAck, ...] = ()
        ready: frozenset[tuple[int, str]] = frozenset()
        rejections: frozenset[str] = frozenset()
        latest = None
        if control is not None:
            acks = tuple(self._acks.get(control.open_epoch, {}).values())
            rejections = frozenset(self._rejections.get(control.open_epoch, set()))
            if control.round is not None:
                ready = frozenset(self._ready.get(control.round.drain_id, set()))
            if control.last_epoch:
                latest = self.manifest(control.last_epoch)
        if latest is None:
            latest = self._initial_manifest()
        members = {self.node_id: Member(self.node_id, self._boot_id, self._endpoint, self._leaving)}
        return View(control, members, _now_ms(), acks, ready, dict(self._load), latest, None, rejections)

    def _leader_loop(self) -> None:
        with self._lock:
            while not self._stopping:
                self._dirty = False
                try:
                    step = next_step(self._view(), self.config, 1)
                except CoordinatorError:
                    logger.exception("local coordinator step failed")
                    step = None
                if step is not None:
                    try:
                        self._apply(step)
                    except (OSError, CoordinatorError):
                        logger.exception("local coordinator could not apply a step; retrying")
                        self._lock.wait(0.5)
                    continue
                self._lock.notify_all()
                wake = next_wakeup_ms(self._control, self.config)
                timeout = None if wake is None else max(0.0, (wake - _now_ms()) / 1000) + 0.001
                if not self._dirty:
                    self._lock.wait(timeout)

    def _apply(self, step: Step) -> None:
        """Persist ``step`` (manifest first: the commit point), then expose it. Caller holds the lock."""
        manifests: dict[int, Manifest] = {}
        if step.manifest is not None:
            write_durable(self._manifest_path(step.manifest.epoch), step.manifest.to_json())
            manifests[step.manifest.epoch] = step.manifest
            self._manifests[step.manifest.epoch] = step.manifest
        if step.decision is not None and step.decision.drain_id in self._decisions:
            raise CoordinatorError(f"round {step.decision.drain_id} already decided")
        write_durable(self._dir / "state.json", step.control.to_json())
        self._control = step.control
        if step.decision is not None:  # decided only once persisted: a failed write is retried
            self._decisions.add(step.decision.drain_id)
        m = self._metrics
        if step.kind == "commit_epoch":
            m.epochs_committed += 1
            self._acks.pop(step.manifest.epoch if step.manifest else 0, None)
            self._rejections.pop(step.manifest.epoch if step.manifest else 0, None)
            self._collect_garbage(step.control.last_epoch)
        for ack, reason in step.reported:  # recorded only now that the step is applied
            self._rejections.setdefault(ack.epoch, set()).add(rejection_name(ack))
            if ack.node_id == self.node_id and ack.boot_id == self._boot_id:
                self._events.put(("event", AckRejected(ack.epoch, reason)))
        if step.decision is not None:
            if step.decision.outcome is RoundOutcome.COMMIT:
                m.rounds_committed += 1
            else:
                m.rounds_aborted += 1
            self._ready.pop(step.decision.drain_id, None)
        m.stale_acks_rejected += len(step.rejected_acks)
        m.nodes_shed += len(step.shed)
        for epoch in self._tracker.committed_range(step.control):
            if epoch not in manifests:
                try:
                    manifests[epoch] = self.manifest(epoch)
                except CoordinatorError:
                    pass
        events = self._tracker.advance(step.control, manifests)
        self._snapshot = step.control.snapshot
        for event in events:
            self._events.put(("event", event))

    def _collect_garbage(self, last_epoch: int) -> None:
        """Delete manifests beyond the last K; never the pinned initial manifest (epoch 0)."""
        for epoch in self._manifest_epochs():
            if 0 < epoch <= last_epoch - self.config.manifests_to_keep:
                self._manifest_path(epoch).unlink(missing_ok=True)
                self._manifests.pop(epoch, None)

    def _dispatch_loop(self) -> None:
        while True:
            kind, payload = self._events.get()
            if kind == "quit":
                return
            if kind == "barrier":
                payload.set()  # type: ignore[attr-defined]
                continue
            event: CoordinatorEvent = (
                SessionStateChanged(payload) if kind == "session" else payload  # type: ignore[arg-type]
            )
            self._subscribers.deliver([event])
