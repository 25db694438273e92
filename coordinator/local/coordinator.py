"""LocalCoordinator: the Coordinator interface for one embedded process, with no ZooKeeper.

This node is the only member and always the leader. The engine (:class:`laminar_kafka.coordinator.engine.core.
EngineCoordinator`) runs the same pure state machine as the ZooKeeper backend over a
:class:`laminar_kafka.coordinator.local.store.LocalStore` (durable manifests and register in ``directory``, fsynced;
see that module). This module adds only what a single process has instead of a session: its one
membership, a term that is always its own, a new boot id on :meth:`LocalCoordinator.rejoin`, and the
directory's exclusive lock (:mod:`laminar_kafka.coordinator.local.state_lock`) from :meth:`start` to :meth:`stop`: a
second process on the same directory fails to start instead of landing every record again. The
directory also pins the name of its one pipeline at the first start: another pipeline pointed at it
(two pipelines on one output, each with the default state-dir) fails to start, naming both.

After a restart the previous process's boot id is dead, so the first step re-publishes the vnodes to
the new boot with ``manifest_epoch`` = the latest manifest (no drain). A content rejection of this
node's ack is delivered as ``AckRejected`` once per ack content.
"""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.core import EngineCoordinator
from laminar_kafka.coordinator.engine.events import SessionState
from laminar_kafka.coordinator.engine.steps import Step
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.layout import rejection_name
from laminar_kafka.coordinator.local.state_lock import StateDirectoryLock
from laminar_kafka.coordinator.local.store import LocalStore
from laminar_kafka.coordinator.store import Leadership
from laminar_kafka.coordinator.values import Member
from laminar_kafka.coordinator.vnodes.registry import NodeId
from laminar_kafka.errors import ConfigurationError

__all__ = ["PIPELINE_SETTING", "LocalCoordinator"]

#: The setting that names the one pipeline whose state a directory holds (pinned at the first start).
PIPELINE_SETTING = "pipeline"

#: Seconds between two looks while `start` waits for this node's first assignment.
_POLL_SECONDS = 0.01


class LocalCoordinator(EngineCoordinator):
    """See the module docstring. Thread-safe; events come from one dispatcher thread, in order.

    ``before_rename(path)``: called by every durable file write once the temporary file is durable
    and before its rename (crash tests inject a kill there).
    """

    def __init__(self, config: CoordinatorConfig, directory: str | os.PathLike[str], node_id: NodeId = 1,
                 endpoint: str = "", *, before_rename: Callable[[Path], None] | None = None) -> None:
        store = LocalStore(Path(directory), before_rename)
        super().__init__(config, node_id, endpoint, store, (OSError,))
        self._local = store
        self._directory_lock = StateDirectoryLock(Path(directory))
        self._lock = threading.Lock()
        self._membership: Leadership | None = None
        self._connected = False

    def _term(self) -> Leadership | None:
        return None if self._stopping.is_set() else self._membership

    def _member(self) -> Member:
        return Member(self.node_id, self._boot_id, self._endpoint, self._leaving)

    def _on_applied(self, step: Step) -> None:
        self._dispatcher.observe(step.control)
        reported = [ack for ack, _ in step.reported]
        if reported:
            self._dispatcher.rejections(reported[0].epoch, [rejection_name(ack) for ack in reported])

    def connect(self, timeout: float = 30.0) -> None:
        """Lock the state directory and load its state (see Coordinator.connect); the directory lock
        is also the reconciliation lock (one embedded node per directory)."""
        with self._lock:
            if self._connected:
                return
            self._directory_lock.acquire()  # before any read or write: one embedded node per directory
            try:
                self._local.recover()
                owner = self._local.pin_setting(PIPELINE_SETTING, self.config.pipeline)
            except (OSError, CoordinatorError) as exc:
                raise CoordinatorError(f"cannot recover local coordinator state in {self._local.directory}: {exc}",
                                       cause=exc) from exc
            if owner != self.config.pipeline:
                raise ConfigurationError(
                    f"state directory {self._local.directory} holds pipeline {owner!r}, not {self.config.pipeline!r}: "
                    "give each pipeline its own state-dir (or output), or run this one as that pipeline"
                )
            self._connected = True

    def start(self, timeout: float = 30.0) -> None:
        if not self._claim_start():
            return
        self.connect(timeout)
        with self._lock:
            self._membership = self._local.register(self._member())
            self._metrics.leader_elections_won += 1
        self._start_engine()
        self._leader.kick()
        deadline = time.monotonic() + timeout
        while not self._leaving:
            control = self._dispatcher.control
            if control is not None and control.boot_of(self.node_id) == self._boot_id:
                break
            if time.monotonic() > deadline:
                raise CoordinatorError(f"local coordinator did not publish an assignment in {timeout}s")
            time.sleep(_POLL_SECONDS)
        self._dispatcher.barrier(timeout)

    def stop(self) -> None:
        if self._claim_stop():
            self._stop_engine()
            self._directory_lock.release()
        elif self._connected and not self._started:  # connected only (reconciling), never joined
            self._connected = False
            self._directory_lock.release()

    def rejoin(self) -> None:
        with self._lock:
            self._local.unregister(self.node_id)
            self._boot_id = uuid.uuid4().hex
            self._membership = self._local.register(self._member())
        self._dispatcher.reset()
        self._dispatcher.session(SessionState.CONNECTED)
        self._leader.kick()

    def is_leader(self) -> bool:
        return self._started and not self._stopping.is_set()

    def members(self) -> tuple[Member, ...]:
        return (self._member(),)

    def request_leave(self) -> None:
        self._leaving = True
        self._local.update_member(self._member())
        self._leader.kick()
