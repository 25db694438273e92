"""One simulated node: the real :class:`ZooKeeperCoordinator` and the smallest faithful part of the node
runtime around it (what the runtime does on each coordinator event, without Kafka or files).

- ``AssignmentChanged``: the partitions of the vnodes it owns are its sources; a partition it gains starts
  at the cursor of the manifest the event names (``manifest_epoch``; after a rejoin the latest), one it
  keeps continues where it is.
- ``RoundStarted``: the partitions it loses stop reading (the drain), then ``report_drain_ready``.
- ``EpochOpened`` at its version: every source reads up to the synthetic log's high watermark now; the
  records since the last cut are staged, and the ack carries the cursors that moved.
- The staged ranges go into the lake before the ack (durable, unpublished, as staged files are).
  ``EpochCommitted``: the staged ranges of the acks the manifest counts (``acked_by``) are published, and
  the node's committed cursors move to its acked ones (its ack not counted: back to the committed ones). Any node observing the commit publishes every
  counted ack's ranges, a killed node's too, as the lake's recovery does for a node that died between
  its ack and its publish.

Each node works from one thread of its own (coordinator callbacks only enqueue, as the runtime's do).
A killed node (:meth:`SimNode.kill`) ends its session on the server at once and stops working: its staged
output of an epoch that does not commit with its ack is dropped, as a SIGKILLed node's is.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from kazoo.client import KazooClient

from control_plane.model import Indexes, MemoryLake, Offsets, SyntheticLogs, cursors_to_array
from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    Coordinator,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    RoundStarted,
    SessionState,
    SessionStateChanged,
)
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError, RoundError
from laminar_kafka.coordinator.zk.coordinator import TRANSIENT, ZooKeeperCoordinator

SOURCE = "kafka"
TOPIC = "t"
#: how long a write that may or may not have happened is retried (a ZooKeeper restart)
RETRY_S = 30.0
#: what an event's handling is retried on: not confirmed (a ZooKeeper restart), kazoo's own errors included
RETRIED: tuple[type[BaseException], ...] = (CoordinatorError, *TRANSIENT)


@dataclass
class Staged:
    """One epoch's staged ranges of a node."""

    indexes: Indexes
    starts: Offsets
    ends: Offsets


@dataclass
class Timings:
    """When this node saw each epoch open and commit (monotonic seconds)."""

    opened: dict[int, float] = field(default_factory=dict)
    committed: dict[int, float] = field(default_factory=dict)


class SimNode:
    """See the module docstring. ``vnode_of[p]`` is partition ``p``'s vnode (routed once by the driver);
    ``coordinator`` is a :class:`ZooKeeperCoordinator` (any coordinator but for :meth:`kill`)."""

    def __init__(self, coordinator: Coordinator, logs: SyntheticLogs, lake: MemoryLake, vnode_of: Indexes,
                 started_at: float) -> None:
        self.node_id = node_id = coordinator.node_id
        self.coordinator = coordinator
        self.logs, self.lake, self.vnode_of, self.started_at = logs, lake, vnode_of, started_at
        self.owned: Indexes = np.zeros(0, dtype=np.int64)
        self.position: Offsets = np.zeros(0, dtype=np.int64)  # next offset to read, per owned partition
        self.committed: Offsets = np.zeros(0, dtype=np.int64)  # cursor as of the last committed manifest
        self.frozen: Indexes = np.zeros(0, dtype=np.int64)  # owned partitions being drained (stopped)
        self.staged: dict[int, Staged] = {}
        self.landed_records = 0
        self.timings = Timings()
        self.dead = False
        self.freeze_at: float | None = None  # seconds since start: the logs stop growing (the final check)
        self.threads: set[int] = set()  # native ids of this node's threads (its CPU)
        self._work: queue.Queue[CoordinatorEvent | None] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name=f"sim-node-{node_id}", daemon=True)

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the coordinator (join, election) and the worker; record the threads they started."""
        before = {t.native_id for t in threading.enumerate()}
        self.coordinator.subscribe(self._on_event)
        self._worker.start()
        self.coordinator.start(timeout=60)
        self.threads = {t.native_id for t in threading.enumerate() if t.native_id is not None} - before

    def kill(self) -> None:
        """End the session on the server at once (a twin client closes it) and stop working."""
        self.dead = True
        assert isinstance(self.coordinator, ZooKeeperCoordinator)
        session_id, password = self.coordinator.client.client_id
        twin = KazooClient(hosts=self.coordinator.config.hosts, client_id=(session_id, password))
        twin.start(timeout=30)
        twin.stop()
        twin.close()
        self._work.put(None)

    def stop(self) -> None:
        self._work.put(None)
        if not self.dead:
            self.dead = True
        try:
            self.coordinator.stop()
        except Exception:  # noqa: BLE001 - a killed node's session is already gone
            pass

    # ---- events ---------------------------------------------------------------------------------

    def _on_event(self, event: CoordinatorEvent) -> None:
        now = time.monotonic()
        if isinstance(event, EpochOpened):
            self.timings.opened.setdefault(event.epoch, now)
        elif isinstance(event, EpochCommitted):
            self.timings.committed.setdefault(event.manifest.epoch, now)
        if not self.dead:
            self._work.put(event)

    def _run(self) -> None:
        while (event := self._work.get()) is not None:
            if self.dead:
                return
            deadline = time.monotonic() + RETRY_S
            while not self.dead:
                try:
                    self._handle(event)
                    break
                except (FencedError, RoundError):
                    break  # a stale epoch or a superseded round: the next event says what holds
                except RETRIED:  # rejoin lets kazoo's own errors through
                    if time.monotonic() > deadline:  # not confirmed: retried as the runtime does
                        break
                    time.sleep(0.2)

    def _handle(self, event: CoordinatorEvent) -> None:
        if isinstance(event, SessionStateChanged) and event.state is SessionState.LOST:
            self._rejoin()
        elif isinstance(event, AssignmentChanged):
            self._assigned(event)
        elif isinstance(event, RoundStarted):
            self._drain(event)
        elif isinstance(event, EpochOpened):
            self._ack(event)
        elif isinstance(event, EpochCommitted):
            self._land(event)

    def _rejoin(self) -> None:
        """The session is gone: drop every source and staged output, register again (a new boot) and
        start the partitions the register gives this node id from the latest manifest, as the runtime
        does (an epoch the old boot acked may have committed after the manifest the register names)."""
        self.owned = self.position = self.committed = self.frozen = np.zeros(0, dtype=np.int64)
        self.staged.clear()
        self.coordinator.rejoin()
        self._assigned(AssignmentChanged(self.coordinator.assignment(), 0))

    def _mine(self, owners: tuple[int, ...]) -> Indexes:
        mask = np.asarray(owners, dtype=np.int64)[self.vnode_of] == self.node_id
        return np.flatnonzero(mask).astype(np.int64)

    def _assigned(self, event: AssignmentChanged) -> None:
        owned = self._mine(event.snapshot.owners)
        gained = np.setdiff1d(owned, self.owned)
        kept = np.isin(self.owned, owned)
        position = dict(zip(self.owned[kept].tolist(), self.position[kept].tolist(), strict=True))
        committed = dict(zip(self.owned[kept].tolist(), self.committed[kept].tolist(), strict=True))
        if len(gained):
            manifest = self._manifest_or_latest(event.manifest_epoch)
            start = cursors_to_array(manifest.cursors.get(SOURCE, {}) if manifest else {}, TOPIC, len(self.vnode_of))
            for p in gained.tolist():
                position[p] = committed[p] = int(start[p])
        self.owned = owned
        self.position = np.array([position[p] for p in owned.tolist()], dtype=np.int64)
        self.committed = np.array([committed[p] for p in owned.tolist()], dtype=np.int64)
        self.frozen = np.zeros(0, dtype=np.int64)

    def _manifest_or_latest(self, epoch: int) -> Manifest | None:
        """Manifest ``epoch`` (0: the latest), or the latest when it was collected (as the runtime's)."""
        if epoch:
            try:
                return self.coordinator.manifest(epoch)
            except CoordinatorError:
                pass
        return self.coordinator.latest_manifest()

    def _drain(self, event: RoundStarted) -> None:
        target = self._mine(event.target_owners)
        losing = np.setdiff1d(self.owned, target)
        if len(losing):
            self.frozen = losing
            self.coordinator.report_drain_ready(event.drain_id)

    def _ack(self, event: EpochOpened) -> None:
        if event.assignment_version != self.coordinator.assignment().version or not len(self.owned):
            return
        staged = self.staged.get(event.epoch)
        if staged is None:  # else an ack retried: the same cut again
            seconds = time.monotonic() - self.started_at
            if self.freeze_at is not None:
                seconds = min(seconds, self.freeze_at)
            read = np.maximum(self.position, self.logs.high_watermarks(self.owned, seconds))
            if len(self.frozen):
                stopped = np.isin(self.owned, self.frozen)
                read[stopped] = self.position[stopped]
            moved = np.flatnonzero(read != self.position)
            self.staged[event.epoch] = staged = Staged(self.owned[moved], self.position[moved], read[moved])
            self.position = read  # the cut: the next epoch's output starts here, as a real node's does
            self.lake.stage(event.epoch, (self.node_id, self.coordinator.boot_id), staged.indexes, staged.starts,
                            staged.ends, f"node {self.node_id} epoch {event.epoch} (staged at {seconds:.1f}s)")
        keys = [f"{TOPIC}:{p}" for p in staged.indexes.tolist()]
        cursors = dict(zip(keys, staged.ends.tolist(), strict=True))
        self.coordinator.ack_epoch(EpochAck(self.node_id, self.coordinator.boot_id, event.epoch,
                                            event.assignment_version, {SOURCE: cursors}, ()))

    def _land(self, event: EpochCommitted) -> None:
        """Publish the epoch; move the committed cursors by this node's staged epochs up to it when the
        manifest counts its ack (epochs commit in order and wait for every live owner's ack, so a
        commit counting this boot's ack counted its earlier ones: a commit a coalesced watch skipped
        is taken in by the next), else go back to them (the epoch committed without this node's
        output: read it again, as a node restarting from the manifest does)."""
        epoch = event.manifest.epoch
        self.lake.publish(epoch, event.manifest.acked_by)
        done = sorted(e for e in self.staged if e <= epoch)
        if not done:
            return
        counted = (self.node_id, self.coordinator.boot_id) in event.manifest.acked_by
        for staged in (self.staged.pop(e) for e in done):
            if not counted or not len(self.owned):
                continue
            self.landed_records += int((staged.ends - staged.starts).sum())
            where = np.minimum(np.searchsorted(self.owned, staged.indexes), len(self.owned) - 1)
            kept = self.owned[where] == staged.indexes  # partitions given away since carry no cursor here
            self.committed[where[kept]] = staged.ends[kept]
        if not counted:
            self.position = self.committed.copy()
            self.staged.clear()
