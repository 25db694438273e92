"""The coordinator engine both backends share: the leader loop, event dispatch, metrics, validation.

:class:`EngineCoordinator` implements the :class:`~laminar_kafka.coordinator.base.Coordinator` interface over one
:class:`~laminar_kafka.coordinator.store.ControlStore`; a backend adds only its session, membership and election
(:mod:`laminar_kafka.coordinator.zk.coordinator`, :mod:`laminar_kafka.coordinator.local.coordinator`). Its parts:

- :class:`LeaderLoop`: one thread that, while the backend reports a term (this node leads), reads a
  view, asks :func:`laminar_kafka.coordinator.engine.model.next_step` and has the store apply the step; woken by
  :meth:`LeaderLoop.kick` (any input changed) or the model's next timer. :func:`account` keeps the
  metrics of every applied step.
- :class:`Dispatcher` (:mod:`laminar_kafka.coordinator.engine.dispatch`): one thread that turns observed register values
  and rejection markers into events, delivered in order.
- the node operations (acks, drain receipts, manifests, pins, vnode load), validated once here.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import ContextManager

from laminar_kafka.coordinator.base import Coordinator
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.dispatch import Dispatcher
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics, EventCallback, Subscribers
from laminar_kafka.coordinator.engine.failure_streak import FailureStreak
from laminar_kafka.coordinator.engine.model import epoch_interval, next_step, next_wakeup_ms
from laminar_kafka.coordinator.engine.steps import Step, StepKind, View, WriteManifest
from laminar_kafka.coordinator.errors import CoordinatorError, CoordinatorUnavailable, FencedError, RoundError
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import ControlStore, EpochGone, Leadership, require_manifest
from laminar_kafka.coordinator.values import (
    EpochAck,
    Manifest,
    RoundOutcome,
    check_initial_manifest,
    check_seed_manifest,
    check_setting_name,
    check_topic_ids,
)
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, NodeId
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["now_ms", "account", "LeaderLoop", "EngineCoordinator"]

#: Upper bound on steps the leader takes in one pass before re-checking its leadership.
MAX_STEPS_PER_PASS = 64


def now_ms() -> int:
    """The leader's wall clock in ms (deadlines and the checkpoint timer use it)."""
    return int(time.time() * 1000)


def account(step: Step, metrics: CoordinatorMetrics) -> None:
    """Count and log an applied step."""
    if step.kind is StepKind.COMMIT_EPOCH:
        metrics.epochs_committed += 1
    if step.decision is not None:
        if step.decision.outcome is RoundOutcome.COMMIT:
            metrics.rounds_committed += 1
        else:
            metrics.rounds_aborted += 1
        logger.info("round %s decided %s", step.decision.drain_id, step.decision.outcome.value)
    if step.shed:
        metrics.nodes_shed += len(step.shed)
        logger.info("shed dead nodes %s at version %d", list(step.shed), step.control.version)
    for ack, reason in step.rejected_acks:
        metrics.stale_acks_rejected += 1
        logger.warning("rejected ack of node %d boot %s for epoch %d: %s",
                       ack.node_id, ack.boot_id, ack.epoch, reason)
    if step.reported:
        metrics.bump("ack_rejections_recorded", len(step.reported))


class LeaderLoop:
    """The leader thread (see the module docstring).

    ``term()``: this node's current term, or None while it does not lead (or must not act: session
    suspended or lost). ``on_fenced(term)``: a step was rejected (the backend checks whether it was
    deposed). ``on_applied(step)``: after each applied step. ``transient``: exception types of the
    store's I/O that mean "retry soon".
    """

    def __init__(self, store: ControlStore, config: CoordinatorConfig, metrics: CoordinatorMetrics,
                 term: Callable[[], Leadership | None], name: str,
                 on_fenced: Callable[[Leadership], None] = lambda _t: None,
                 on_applied: Callable[[Step], None] = lambda _s: None,
                 transient: tuple[type[BaseException], ...] = ()) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._term = term
        self._on_fenced = on_fenced
        self._on_applied = on_applied
        self._transient = transient
        self._retryable: tuple[type[BaseException], ...] = (CoordinatorError, *transient)
        self._kick = threading.Event()
        self._stopping = threading.Event()
        self._pass_lock = threading.Lock()  # held during a pass (see paused)
        self._pass_failures = FailureStreak(logger, "leader pass")
        #: committed epochs in a row that changed no cursor, under the term that committed them
        self._quiet: tuple[Leadership | None, int] = (None, 0)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No pass runs inside the block (a pass in flight is waited for); the leader is woken after."""
        with self._pass_lock:
            yield
        self.kick()

    def kick(self, *_args: object) -> None:
        """Wake the leader: some input changed (usable directly as a watch callback)."""
        self._kick.set()

    def _run(self) -> None:
        timeout: float | None = None
        while not self._stopping.is_set():
            self._kick.wait(timeout)
            self._kick.clear()
            if self._stopping.is_set():
                return
            term = self._term()
            if term is None:
                timeout = None
                continue
            try:
                with self._pass_lock:
                    timeout = self.run_pass(term)
                self._pass_failures.succeeded()
            except FencedError:
                timeout = 0.05
                self._on_fenced(term)
            except self._retryable as exc:
                self._pass_failures.failed(exc)
                timeout = 0.2
            except Exception:  # the leader thread must survive any one bad pass
                logger.exception("leader pass failed")
                timeout = 1.0

    def run_pass(self, term: Leadership) -> float | None:
        """Take steps until none is due; return seconds until the model's next timer (None: none)."""
        for _ in range(MAX_STEPS_PER_PASS):
            if self._term() != term:
                return None
            view, version = self._store.read_view(now_ms())
            config = self._pass_config(term, view)
            step = next_step(view, config, term.token)
            if step is None:
                wake = next_wakeup_ms(view.control, config)
                return None if wake is None else max(0.0, (wake - now_ms()) / 1000) + 0.001
            self.execute(term, step, version)
            self._count_quiet(term, step, view.latest_manifest)
        return 0.0

    def _pass_config(self, term: Leadership, view: View) -> CoordinatorConfig:
        """The configuration of this pass: its checkpoint interval from :func:`epoch_interval`."""
        config = self._config
        if not config.quiet_checkpoint_interval:
            return config
        quiet = self._quiet[1] if self._quiet[0] == term else 0
        interval = epoch_interval(config, view.control, quiet, view.epoch_wanted_after)
        if interval == config.checkpoint_interval:
            return config
        return replace(config, checkpoint_interval=interval)

    def _count_quiet(self, term: Leadership, step: Step, previous: Manifest | None) -> None:
        """After a commit: one more quiet epoch if its manifest moved no cursor, else none."""
        if step.kind is not StepKind.COMMIT_EPOCH:
            return
        written = next((i.manifest for i in step.intents if isinstance(i, WriteManifest)), None)
        same = written is not None and previous is not None and written.cursors == previous.cursors
        count = self._quiet[1] if self._quiet[0] == term else 0
        self._quiet = (term, count + 1 if same else 0)

    def execute(self, term: Leadership, step: Step, expected_version: int) -> None:
        """Have the store apply ``step`` (FencedError, counted, when rejected), then account for it
        and, after every ``keep // 2`` commits, collect garbage."""
        try:
            self._store.apply(term, step, expected_version)
        except FencedError:
            self._metrics.fenced_writes_rejected += 1
            raise
        account(step, self._metrics)
        self._on_applied(step)
        keep = self._config.manifests_to_keep
        if step.kind is StepKind.COMMIT_EPOCH and step.control.last_epoch % max(1, keep // 2) == 0:
            self._store.collect_garbage(term, step.control, keep)


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
        if not self.config.quiet_checkpoint_interval:
            return  # no leader of this pipeline waits a quiet interval (the setting is pipeline-wide)
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
