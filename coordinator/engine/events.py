"""What a coordinator tells its node: events, their subscribers, the session states and the metrics.

Events reach the subscribed callbacks from one coordinator thread, in the causal order described in
:mod:`laminar_kafka.coordinator.base`. This module does no I/O.
"""
from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Union

from laminar_kafka.coordinator.values import Manifest, RoundOutcome
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

logger = logging.getLogger(__name__)

__all__ = [
    "SessionState",
    "AssignmentChanged",
    "RoundStarted",
    "RoundDecided",
    "EpochOpened",
    "EpochCommitted",
    "AckRejected",
    "SessionStateChanged",
    "CoordinatorEvent",
    "EventCallback",
    "Subscribers",
    "CoordinatorMetrics",
]


class SessionState(enum.Enum):
    """Coordinator session states, as kazoo names them."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"




@dataclass(frozen=True)
class AssignmentChanged:
    """A new assignment version is published.

    `manifest_epoch`: for partitions this node acquires without a drain (a dead node's, or the very
    first assignment), the epoch of the manifest whose cursors they start from (0 = no epoch has
    committed yet: start from the pinned initial manifest, `manifest(0)`).
    """

    snapshot: AssignmentSnapshot
    manifest_epoch: int = 0


@dataclass(frozen=True)
class RoundStarted:
    """A live rebalance round: drain what you lose under `target_owners`, then `report_drain_ready`."""

    drain_id: AssignmentDrainId
    target_owners: tuple[int, ...]
    deadline_unix_ms: int


@dataclass(frozen=True)
class RoundDecided:
    """The create-once decision of a round. On COMMIT the handoff cursors are those of
    manifest `manifest_epoch`."""

    drain_id: AssignmentDrainId
    outcome: RoundOutcome
    manifest_epoch: int


@dataclass(frozen=True)
class EpochOpened:
    epoch: int
    assignment_version: int


@dataclass(frozen=True)
class EpochCommitted:
    manifest: Manifest


@dataclass(frozen=True)
class AckRejected:
    """The leader rejected this node's ack of the open epoch `epoch` (of this boot) for `reason`.

    Delivered once per rejected ack content. The epoch cannot commit until this node sends a valid
    replacement ack for it: retire the source generation, drop the staged output of `epoch`, restart
    from `latest_manifest()` and call `ack_epoch` again (see the module docstring, point 5).
    """

    epoch: int
    reason: str


@dataclass(frozen=True)
class SessionStateChanged:
    state: SessionState


CoordinatorEvent = Union[
    AssignmentChanged, RoundStarted, RoundDecided, EpochOpened, EpochCommitted, AckRejected,
    SessionStateChanged,
]
EventCallback = Callable[[CoordinatorEvent], None]


class Subscribers:
    """The event callbacks of one coordinator: thread-safe registration, and delivery in order
    where one failing subscriber is logged and never keeps an event from the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[EventCallback] = []

    def add(self, callback: EventCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def deliver(self, events: Iterable[CoordinatorEvent]) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for event in events:
            for callback in callbacks:
                try:
                    callback(event)
                except Exception:  # one subscriber must not break the others
                    logger.exception("subscriber failed on %s", type(event).__name__)


@dataclass
class CoordinatorMetrics:
    """Counters a coordinator keeps; the cluster exports them on /metrics."""

    fenced_writes_rejected: int = 0
    stale_acks_rejected: int = 0
    stale_ready_rejected: int = 0
    epochs_committed: int = 0
    rounds_committed: int = 0
    rounds_aborted: int = 0
    nodes_shed: int = 0
    leader_elections_won: int = 0
    session_state: str = SessionState.CONNECTED.value
    extra: dict[str, int] = field(default_factory=dict)

    def bump(self, name: str, amount: int = 1) -> None:
        """Add `amount` to the counter `name` (a field, or else an entry of `extra`)."""
        if name in _METRIC_FIELDS:
            setattr(self, name, getattr(self, name) + amount)
        else:
            self.extra[name] = self.extra.get(name, 0) + amount


_METRIC_FIELDS: frozenset[str] = frozenset({
    "fenced_writes_rejected", "stale_acks_rejected", "stale_ready_rejected", "epochs_committed",
    "rounds_committed", "rounds_aborted", "nodes_shed", "leader_elections_won",
})
