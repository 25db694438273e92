"""The node side of the register: turning the register values a node observes into events.

This module does no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping

from laminar_kafka.coordinator.engine.events import (
    AssignmentChanged,
    CoordinatorEvent,
    EpochCommitted,
    EpochOpened,
    RoundDecided,
    RoundStarted,
)
from laminar_kafka.coordinator.state import RECENT_DECISIONS, ControlState
from laminar_kafka.coordinator.values import Manifest
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

__all__ = ["EventTracker"]


class EventTracker:
    """Turns the sequence of register values a node observes into events, in a causal order.

    Watches may coalesce changes; the tracker still delivers, for each register value seen:
    EpochCommitted for every newly committed epoch whose manifest speaks of an older version, then
    RoundDecided for each decision of a round it saw start, then AssignmentChanged (new version),
    then EpochCommitted for newly committed epochs of the new version, then RoundStarted (a round
    not seen before), then EpochOpened (a newer open epoch). Not thread-safe (one watcher thread).
    """

    def __init__(self) -> None:
        self.control: ControlState | None = None
        self._last_opened = 0
        self._last_committed = 0
        self._rounds_seen: set[AssignmentDrainId] = set()
        self._decided: set[AssignmentDrainId] = set()

    def committed_range(self, control: ControlState) -> range:
        """Epochs whose manifests the caller should pass to :meth:`advance`."""
        start = max(self._last_committed, control.last_epoch - RECENT_DECISIONS) + 1 \
            if self.control is not None else control.last_epoch + 1
        return range(start, control.last_epoch + 1)

    def advance(self, control: ControlState, manifests: Mapping[int, Manifest]) -> list[CoordinatorEvent]:
        events: list[CoordinatorEvent] = []
        previous = self.control
        if previous is not None and control.version < previous.version:
            return events  # an older value (never happens with ordered watches)
        new_version = previous is None or control.version > previous.version
        commits = [manifests[e] for e in sorted(manifests) if e > self._last_committed and e <= control.last_epoch]
        for manifest in commits:
            if manifest.assignment_version < control.version:
                events.append(EpochCommitted(manifest))
        for decision in control.decisions:
            if decision.drain_id in self._rounds_seen and decision.drain_id not in self._decided:
                self._decided.add(decision.drain_id)
                events.append(RoundDecided(decision.drain_id, decision.outcome, decision.manifest_epoch))
        if new_version:
            events.append(AssignmentChanged(control.snapshot, control.manifest_epoch))
        for manifest in commits:
            if manifest.assignment_version >= control.version:
                events.append(EpochCommitted(manifest))
        self._last_committed = max(self._last_committed, control.last_epoch)
        r = control.round
        if r is not None and r.drain_id not in self._rounds_seen:
            self._rounds_seen.add(r.drain_id)
            events.append(RoundStarted(r.drain_id, r.target_owners, r.deadline_ms))
        if control.open_epoch > self._last_opened:
            events.append(EpochOpened(control.open_epoch, control.version))
        self._last_opened = max(self._last_opened, control.open_epoch, control.last_epoch)
        if previous is None:
            # First look: rounds decided before we joined are not ours to hear about.
            self._decided.update(d.drain_id for d in control.decisions)
        self.control = control
        return events
