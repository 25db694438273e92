"""The dispatcher thread of a coordinator: observed register values and rejection markers in, events
out, in order.

Backends feed its inbox from their own threads with calls that never block (:meth:`Dispatcher.
observe`, :meth:`Dispatcher.session`, :meth:`Dispatcher.rejections`, :meth:`Dispatcher.resync`); the
dispatcher reads what the events need (committed manifests, rejection reasons) from the store and
delivers them to the subscribers, one at a time, in the causal order of
:class:`~laminar_kafka.coordinator.engine.tracker.EventTracker`. ``AckRejected`` is delivered once per rejection marker of
this node's current boot.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from laminar_kafka.coordinator.engine.events import (
    AckRejected,
    CoordinatorEvent,
    CoordinatorMetrics,
    SessionState,
    SessionStateChanged,
    Subscribers,
)
from laminar_kafka.coordinator.engine.tracker import EventTracker
from laminar_kafka.coordinator.errors import CodecError, CoordinatorError, CoordinatorUnavailable
from laminar_kafka.coordinator.layout import ack_name
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import ControlStore
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot

logger = logging.getLogger(__name__)

__all__ = ["Dispatcher"]

#: Seconds before a rejection marker, or the register whose observation failed, is read again.
_RETRY_SECONDS = 0.5


class Dispatcher:
    """See the module docstring. ``on_observed(control)`` runs on the dispatcher thread after the
    events of each observed register value (the ZooKeeper backend watches the open epoch's markers)."""

    def __init__(self, store: ControlStore, subscribers: Subscribers, metrics: CoordinatorMetrics, node_id: int,
                 boot_id: Callable[[], str], snapshot: AssignmentSnapshot,
                 transient: tuple[type[BaseException], ...] = ()) -> None:
        self._store = store
        self._subscribers = subscribers
        self._metrics = metrics
        self._node_id = node_id
        self._boot_id = boot_id
        self._transient = transient
        self._retryable: tuple[type[BaseException], ...] = (CoordinatorError, *transient)
        #: what a failed observation of the register is retried on (not a value that does not decode)
        self._unavailable: tuple[type[BaseException], ...] = (CoordinatorUnavailable, *transient)
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._tracker = EventTracker()
        self._reported: set[tuple[int, str]] = set()  # (epoch, marker) delivered as AckRejected
        self._stopping = threading.Event()
        self.snapshot = snapshot
        self.on_observed: Callable[[ControlState], None] = lambda _c: None
        self._thread = threading.Thread(target=self._run, name=f"coordinator-{node_id}-dispatch", daemon=True)

    @property
    def control(self) -> ControlState | None:
        """The last register value observed (None before the first)."""
        return self._tracker.control

    # ---- inputs (any thread, never block) ---------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._inbox.put(("quit", None))
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def observe(self, register: ControlState | bytes) -> None:
        """A register value was observed (raw bytes are decoded on the dispatcher thread)."""
        self._inbox.put(("register", register))

    def session(self, state: SessionState) -> None:
        self._inbox.put(("session", state))

    def rejections(self, epoch: int, names: list[str]) -> None:
        """The rejection markers now present in ``epoch``."""
        self._inbox.put(("rejections", (epoch, list(names))))

    def reset(self) -> None:
        """Forget what was observed (after a rejoin): the next register value is a first look."""
        self._inbox.put(("reset", None))

    def resync(self) -> None:
        """Forget what was observed (after a rejoin) and observe the stored register again."""
        self._inbox.put(("resync", None))

    def barrier(self, timeout: float) -> None:
        """Wait until everything queued so far has been delivered; CoordinatorError after ``timeout``."""
        done = threading.Event()
        self._inbox.put(("barrier", done))
        if not done.wait(timeout):
            raise CoordinatorError(f"event dispatch did not catch up in {timeout}s")

    def epoch_closed(self, epoch: int) -> bool:
        control = self._tracker.control
        return control is not None and control.last_epoch >= epoch

    # ---- the dispatcher thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            kind, payload = self._inbox.get()
            try:
                if kind == "quit":
                    return
                if kind == "barrier":
                    payload.set()
                elif kind == "session":
                    self._subscribers.deliver([SessionStateChanged(payload)])
                elif kind == "register":
                    control = payload if isinstance(payload, ControlState) else ControlState.from_json(payload)
                    self._observe(control)
                elif kind == "rejections":
                    self._report_rejections(*payload)
                elif kind == "reset":
                    self._tracker = EventTracker()
                elif kind in ("resync", "reread"):
                    if kind == "resync":
                        self._tracker = EventTracker()
                    current = self._store.read_register()
                    if current is not None:
                        self._observe(current)
            except self._unavailable as exc:
                if kind not in ("register", "resync", "reread"):
                    logger.exception("coordinator %d failed to process %s", self._node_id, kind)
                    continue
                # The value's events (a manifest read timed out) are not delivered yet, and no watch may
                # fire again: the leader can be waiting for this node's ack of the epoch it missed. (A
                # value that does not decode is not retried: it is logged below, as any other failure.)
                logger.info("coordinator %d: observing the register failed (%r); reading it again in %.1fs",
                            self._node_id, exc, _RETRY_SECONDS)
                self._later(("reread", None))
            except Exception:  # the dispatcher must survive any one bad item
                logger.exception("coordinator %d failed to process %s", self._node_id, kind)

    def _later(self, item: tuple[str, Any]) -> None:
        """Put ``item`` in the inbox after :data:`_RETRY_SECONDS` (not once stopping)."""
        if self._stopping.is_set():
            return
        retry = threading.Timer(_RETRY_SECONDS, self._inbox.put, args=(item,))
        retry.daemon = True
        retry.start()

    def _observe(self, control: ControlState) -> None:
        manifests = {}
        for epoch in self._tracker.committed_range(control):
            manifest = self._store.read_manifest(epoch)
            if manifest is None:
                logger.debug("manifest %d already collected", epoch)
            else:
                manifests[epoch] = manifest
        events: list[CoordinatorEvent] = self._tracker.advance(control, manifests)
        if self._tracker.control is not None:
            self.snapshot = self._tracker.control.snapshot
        self._reported = {r for r in self._reported if r[0] > control.last_epoch}
        self._subscribers.deliver(events)
        self.on_observed(control)

    def _report_rejections(self, epoch: int, names: list[str]) -> None:
        """Deliver AckRejected once per new marker of this boot's acks."""
        prefix = f"{ack_name(self._node_id, self._boot_id())}."
        for name in sorted(names):
            if not name.startswith(prefix) or (epoch, name) in self._reported or self.epoch_closed(epoch):
                continue
            try:
                reason = self._store.read_rejection(epoch, name)
            except CodecError:
                reason = "rejected by the leader (malformed marker)"
            except self._retryable as exc:  # a watch will not fire again: retry
                logger.info("reading rejection %s of epoch %d failed (%r); retrying", name, epoch, exc)
                if not self._stopping.is_set():
                    retry = threading.Timer(_RETRY_SECONDS, self.rejections, args=(epoch, [name]))
                    retry.daemon = True
                    retry.start()
                continue
            if reason is None:
                continue
            self._reported.add((epoch, name))
            self._metrics.bump("ack_rejections_received")
            logger.warning("node %d: the leader rejected its ack of epoch %d: %s", self._node_id, epoch, reason)
            self._subscribers.deliver([AckRejected(epoch, reason)])
