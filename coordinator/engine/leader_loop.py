"""The leader loop of the coordinator engine: one thread that, while the backend reports a term
(this node leads), reads a view, asks :func:`laminar_kafka.coordinator.engine.model.next_step` and
has the store apply the step; woken by :meth:`LeaderLoop.kick` (any input changed) or the model's
next timer. :func:`account` keeps the metrics of every applied step.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
from laminar_kafka.coordinator.engine.failure_streak import FailureStreak
from laminar_kafka.coordinator.engine.model import epoch_interval, next_step, next_wakeup_ms
from laminar_kafka.coordinator.engine.steps import Step, StepKind, View, WriteManifest
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.store import ControlStore, Leadership
from laminar_kafka.coordinator.values import (
    Manifest,
    RoundOutcome,
)

logger = logging.getLogger(__name__)

__all__ = ["MAX_STEPS_PER_PASS", "LeaderLoop", "account", "now_ms"]

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
