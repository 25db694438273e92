"""The coordinator engine both backends share: the leader loop, event dispatch, metrics, validation.

:class:`EngineCoordinator` implements the :class:`~laminar_kafka.coordinator.base.Coordinator` interface over one
:class:`~laminar_kafka.coordinator.store.ControlStore`; a backend adds only its session, membership and election
(:mod:`laminar_kafka.coordinator.zk.coordinator`, :mod:`laminar_kafka.coordinator.local.coordinator`). Its parts:

- :class:`~laminar_kafka.coordinator.engine.leader_loop.LeaderLoop`: the thread that steps the model
  while this node leads (:mod:`laminar_kafka.coordinator.engine.leader_loop`).
- :class:`Dispatcher` (:mod:`laminar_kafka.coordinator.engine.dispatch`): one thread that turns observed register values
  and rejection markers into events, delivered in order.
- the node operations (acks, drain receipts, manifests, pins, vnode load), validated once here.
"""
from __future__ import annotations

import logging
import threading
import uuid
from abc import abstractmethod
from collections.abc import Mapping
from typing import ContextManager

from laminar_kafka.coordinator.base import Coordinator
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.dispatch import Dispatcher
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics, EventCallback, Subscribers
from laminar_kafka.coordinator.engine.leader_loop import LeaderLoop
from laminar_kafka.coordinator.engine.steps import Step
from laminar_kafka.coordinator.errors import CoordinatorError, CoordinatorUnavailable, FencedError, RoundError
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import ControlStore, EpochGone, Leadership, require_manifest
from laminar_kafka.coordinator.values import (
    EpochAck,
    Manifest,
    check_initial_manifest,
    check_seed_manifest,
    check_setting_name,
    check_topic_ids,
)
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, NodeId
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["EngineCoordinator"]


class EngineCoordinator(Coordinator):
    """The Coordinator interface over a store; subclasses add session, membership and election.

    A subclass provides :meth:`_term` (its leadership), :meth:`_require_session` (raise
    SessionLostError unless it holds its session) and calls :meth:`_start_engine` once its store is
    reachable. ``transient``: the store's I/O exceptions that mean "not confirmed, retry".
    """

    def __init__(self, config: CoordinatorConfig, node_id: NodeId, endpoint: str, store: ControlStore,
                 transient: tuple[type[BaseException], ...] = (), metrics: CoordinatorMetrics | None = None) -> None:
        if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 1:
            raise ConfigurationError(f"node_id {node_id!r} must be an int >= 1")
        self.config = config
        self.node_id = node_id
        self._endpoint = endpoint
        self._store = store
        self._transient = transient
        self._boot_id = uuid.uuid4().hex
        self._leaving = False
        self._metrics = metrics if metrics is not None else CoordinatorMetrics()
        self._lifecycle = threading.Lock()
        self._started = False
        self._stopping = threading.Event()
        self._subscribers = Subscribers()
        self._dispatcher = Dispatcher(store, self._subscribers, self._metrics, node_id, lambda: self._boot_id,
                                      AssignmentSnapshot.initial(config.vnode_count), transient)
        self._leader = LeaderLoop(store, config, self._metrics, self._term, f"coordinator-{node_id}-leader",
                                  self._on_fenced, self._on_applied, transient)

    # ---- backend hooks ------------------------------------------------------------------------------

    @abstractmethod
    def _term(self) -> Leadership | None:
        """This node's current term, or None while it must not lead (not elected, suspended, lost)."""

    def _require_session(self) -> None:
        """Raise SessionLostError unless this node holds its session."""

    def _on_fenced(self, term: Leadership) -> None:
        """A leader step was rejected."""

    def _on_applied(self, step: Step) -> None:
        """A leader step was applied."""

    def _claim_start(self) -> bool:
        """True for the first call of ``start`` only (start is idempotent)."""
        with self._lifecycle:
            if self._started:
                return False
            self._started = True
            return True

    def _claim_stop(self) -> bool:
        """True for the first call of ``stop`` after a start only (stop is idempotent)."""
        with self._lifecycle:
            if not self._started or self._stopping.is_set():
                return False
            self._stopping.set()
            return True

    def _start_engine(self) -> None:
        self._dispatcher.start()
        self._leader.start()

    def _stop_engine(self) -> None:
        self._leader.stop()
        self._dispatcher.stop()

    @property
    def store(self) -> ControlStore:
        """The store (tests read views and apply steps through it)."""
        return self._store

    def execute(self, term: Leadership, step: Step, expected_version: int) -> None:
        """Apply one leader step as the leader loop does (tests use it to replay stale steps)."""
        self._leader.execute(term, step, expected_version)

    def pause_leader(self) -> ContextManager[None]:
        """A block in which this node's leader loop takes no step (tests compute steps by hand)."""
        return self._leader.paused()

    # ---- interface ------------------------------------------------------------------------------------

    @property
    def boot_id(self) -> str:
        return self._boot_id

    @property
    def metrics(self) -> CoordinatorMetrics:
        return self._metrics

    def subscribe(self, callback: EventCallback) -> None:
        self._subscribers.add(callback)

    def assignment(self) -> AssignmentSnapshot:
        return self._dispatcher.snapshot

    def _control(self, fresh: bool) -> ControlState | None:
        observed = self._dispatcher.control
        return observed if not fresh and observed is not None else self._store.read_register()

    def _not_confirmed(self, what: str, exc: BaseException) -> CoordinatorError:
        return CoordinatorError(f"{what} not confirmed: {exc!r}", cause=exc)

    def report_drain_ready(self, drain_id: AssignmentDrainId) -> None:
        self._require_session()
        try:
            for fresh in (False, True):
                control = self._control(fresh)
                if control is not None and control.round is not None and control.round.drain_id == drain_id:
                    break
            else:
                self._metrics.stale_ready_rejected += 1
                raise RoundError(f"round {drain_id} is not the running round")
            try:
                self._store.write_ready(drain_id, self.node_id, self._boot_id)
            except RoundError:
                self._metrics.stale_ready_rejected += 1
                raise
        except RoundError:
            raise
        except self._transient as exc:
            raise self._not_confirmed(f"ready report of round {drain_id}", exc) from exc
        self._leader.kick()

    def ack_epoch(self, ack: EpochAck) -> None:
        """See Coordinator.ack_epoch (a replacement ack of this boot overwrites the previous one)."""
        if ack.node_id != self.node_id or ack.boot_id != self._boot_id:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(f"ack of node {ack.node_id} boot {ack.boot_id} is not this live membership")
        try:
            self._require_session()
        except CoordinatorError as exc:
            self._metrics.stale_acks_rejected += 1
            raise FencedError(str(exc), cause=exc) from exc
        try:
            for fresh in (False, True):
                control = self._control(fresh)
                if control is not None and control.open_epoch == ack.epoch \
                        and control.version == ack.assignment_version:
                    break
            else:
                self._closed_epoch_ack(ack, "is not open")
                return
            try:
                self._store.write_ack(ack)
            except EpochGone as exc:  # the epoch's records are gone (committed and collected)
                self._closed_epoch_ack(ack, "is closed", exc)
                return
        except FencedError:
            self._metrics.stale_acks_rejected += 1
            raise
        except self._transient as exc:  # the ack may or may not be recorded
            raise self._not_confirmed(f"ack of epoch {ack.epoch}", exc) from exc
        self._leader.kick()

    def _closed_epoch_ack(self, ack: EpochAck, why: str, cause: BaseException | None = None) -> None:
        """An ack for an epoch that is not open: success if that epoch committed with this boot's ack
        (a retry whose answer was lost), else FencedError."""
        control = self._store.read_register()
        if control is not None and 1 <= ack.epoch <= control.last_epoch:
            manifest = self._store.read_manifest(ack.epoch)
            if manifest is not None and (ack.node_id, ack.boot_id) in manifest.acked_by:
                return
        raise FencedError(f"epoch {ack.epoch} at version {ack.assignment_version} {why}", cause=cause)

    def latest_manifest(self) -> Manifest | None:
        try:
            control = self._store.read_register()
            if control is not None and control.last_epoch:
                return require_manifest(self._store, control.last_epoch)
            return self._store.read_manifest(0)
        except self._transient as exc:
            raise CoordinatorUnavailable(f"the latest manifest cannot be read now: {exc!r}", cause=exc) from exc

    def manifest(self, epoch: int) -> Manifest:
        try:
            if epoch != 0:
                control = self._store.read_register()
                if control is None or not 1 <= epoch <= control.last_epoch:
                    pinned = self._store.read_manifest(0)  # a seed (rebase) is committed before any register
                    if pinned is not None and pinned.epoch == epoch:
                        return pinned
                    raise CoordinatorError(f"epoch {epoch} is not committed")
            return require_manifest(self._store, epoch)
        except self._transient as exc:
            raise CoordinatorUnavailable(f"manifest {epoch} cannot be read now: {exc!r}", cause=exc) from exc

    def pin_start(self, manifest: Manifest) -> Manifest:
        """See Coordinator.pin_start (the store's create-once initial manifest)."""
        check_initial_manifest(manifest)
        try:
            pinned = self._store.pin_initial(manifest)
        except self._transient as exc:
            raise self._not_confirmed("initial manifest", exc) from exc
        check_seed_manifest(pinned)  # the stored one may be a seed (the control state was reseeded)
        self._leader.kick()
        return pinned

    def rebase(self, seed: Manifest) -> None:
        """See Coordinator.rebase (the store's :meth:`~laminar_kafka.coordinator.store.ControlStore.reset`, with this
        node's leader loop paused)."""
        check_seed_manifest(seed)
        try:
            with self.pause_leader():
                self._store.reset(seed)
        except self._transient as exc:
            raise self._not_confirmed("rebase of the control state", exc) from exc
        self._leader.kick()

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """See Coordinator.pin_topic_ids (one create-once record per topic)."""
        check_topic_ids(ids)
        try:
            return self._store.pin_topic_ids(ids)
        except self._transient as exc:
            raise self._not_confirmed("topic ids", exc) from exc

    def pin_setting(self, name: str, value: str | None) -> str | None:
        """See Coordinator.pin_setting (one create-once record)."""
        check_setting_name(name)
        try:
            return self._store.pin_setting(name, value)
        except self._transient as exc:
            raise self._not_confirmed(f"setting {name!r}", exc) from exc

    def request_epoch(self, after_epoch: int) -> None:
        if not isinstance(after_epoch, int) or isinstance(after_epoch, bool) or after_epoch < 0:
            raise ConfigurationError(f"after_epoch {after_epoch!r} must be an int >= 0")
        if not self.config.quiet_checkpoint_interval and not self.config.freshness_target:
            return  # no leader of this pipeline waits for asks (the settings are pipeline-wide)
        try:
            self._store.write_epoch_wanted(after_epoch)
        except self._transient as exc:
            raise self._not_confirmed(f"the ask for epoch {after_epoch + 1}", exc) from exc
        self._leader.kick()

    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        for vnode, count in load.items():
            if not 0 <= vnode < self.config.vnode_count or count < 0:
                raise ConfigurationError(f"vnode load {vnode}: {count} is out of range")
        self._store.write_vnode_load(load)
        self._leader.kick()
