"""One round's drain as this source sees it: phases, the cut, and what resolving it takes (pure).

No I/O and no clock: callers pass ``now`` (a :func:`time.monotonic` value). Values are immutable;
every transition returns a new one or raises :class:`~laminar_kafka.connector.errors.FatalError` (an
invariant broke: the caller fails the generation) or :class:`~laminar_kafka.connector.errors.DrainError` (a
rejection: nothing changed). :class:`~laminar_kafka.connector.ownership.Ownership` holds the current or last
:class:`DrainProgress` and checks each transition against the registry.

Phases (:class:`DrainPhase`): ``IDLE`` (no round seen) -> ``DRAINING`` (boundary in the FIFO,
revoked partitions paused) -> ``READY`` (boundary consumed; the cut is fixed) -> ``RESOLVED``
(commit or abort applied; remembered so a repeated resolution is a no-op). ``FAILED`` is terminal
(reported by :class:`~laminar_kafka.connector.ownership.Ownership`). A round that revokes nothing is
``READY`` at once with an empty cut.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from laminar_kafka.connector.errors import DrainError, FatalError
from laminar_kafka.connector.protocol import SourceDrainOutcome
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = ["DrainPhase", "DrainProgress", "FinishPlan"]


class DrainPhase(enum.Enum):
    IDLE = "idle"
    DRAINING = "draining"
    READY = "ready"
    RESOLVED = "resolved"
    FAILED = "failed"


@dataclass(frozen=True)
class FinishPlan:
    """What resolving a round asks of the consumer.

    Commit: unassign ``release``, assign ``acquire`` (``{tp: next offset}``; partitions of the
    target still missing from it stay pending until explicit cursors arrive). Abort: seek each
    partition of ``resume`` to its offset and resume it.
    """

    outcome: SourceDrainOutcome
    release: frozenset[TopicPartitionId] = frozenset()
    acquire: Mapping[TopicPartitionId, int | None] = field(default_factory=dict)
    resume: Mapping[TopicPartitionId, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DrainProgress:
    """The drain of one round (``round``) on this source, from begin to resolution.

    ``revoked``: partitions owned now and not under the target (paused from the boundary on).
    ``target_owned``: partitions owned under the target. ``boundary``: the reader's position of
    each revoked partition when it paused (what the cut will be), ``None`` until observed.
    ``cut``: the next offset of each revoked partition once the boundary was consumed (empty
    before). ``outcome``: set once ``RESOLVED``.
    """

    round: AssignmentDrainId
    deadline: float
    phase: DrainPhase
    revoked: frozenset[TopicPartitionId]
    target_owned: frozenset[TopicPartitionId]
    boundary: Mapping[TopicPartitionId, int] | None = None
    cut: Mapping[TopicPartitionId, int] = field(default_factory=dict)
    outcome: SourceDrainOutcome | None = None

    @classmethod
    def begin(
        cls,
        round: AssignmentDrainId,
        deadline: float,
        owned: frozenset[TopicPartitionId],
        target_owned: frozenset[TopicPartitionId],
    ) -> DrainProgress:
        """``DRAINING`` if the round revokes any of ``owned``, else ``READY`` with an empty cut."""
        revoked = owned - target_owned
        if revoked:
            return cls(round, deadline, DrainPhase.DRAINING, revoked, target_owned)
        return cls(round, deadline, DrainPhase.READY, revoked, target_owned, MappingProxyType({}))

    @property
    def active(self) -> bool:
        """True while the round holds the source (``DRAINING`` or ``READY``)."""
        return self.phase in (DrainPhase.DRAINING, DrainPhase.READY)

    def expired(self, now: float) -> bool:
        """Still ``DRAINING`` after the deadline (the boundary came too late)."""
        return self.phase is DrainPhase.DRAINING and now > self.deadline

    def paused_at(self, positions: Mapping[TopicPartitionId, int]) -> DrainProgress:
        """Record the reader's positions of the revoked partitions at the pause (for an abort that
        arrives before the boundary is consumed). Idempotent; FatalError if the reader paused
        other partitions."""
        if self.boundary is not None:
            return self
        if set(positions) != set(self.revoked):
            raise FatalError(
                f"drain {self.round}: the reader paused {sorted(positions)}, not {sorted(self.revoked)}"
            )
        return replace(self, boundary=MappingProxyType(dict(positions)))

    def cut_at(self, cursor: Mapping[TopicPartitionId, int]) -> DrainProgress:
        """Fix the cut from ``cursor`` (every record before the boundary was emitted): ``READY``.

        Pre: ``DRAINING``. FatalError if a revoked partition has no cursor or the cut differs from
        the reader's pause positions.
        """
        missing = [tp for tp in self.revoked if tp not in cursor]
        if missing:
            raise FatalError(f"drain {self.round}: no cursor for revoked {sorted(missing)}")
        cut = {tp: cursor[tp] for tp in sorted(self.revoked)}
        if self.boundary is not None and dict(self.boundary) != cut:
            raise FatalError(
                f"drain {self.round}: cut {cut} differs from the pause positions {dict(self.boundary)}"
            )
        return replace(self, phase=DrainPhase.READY, cut=MappingProxyType(cut))

    def check_cut(self, cursor: Mapping[TopicPartitionId, int]) -> None:
        """FatalError if a revoked partition's cursor moved after the cut was fixed (``READY``)."""
        if self.phase is not DrainPhase.READY:
            return
        for tp, offset in self.cut.items():
            if cursor.get(tp) != offset:
                raise FatalError(
                    f"drain {self.round}: cursor of revoked {tp[0]}:{tp[1]} moved from the cut "
                    f"{offset} to {cursor.get(tp)}"
                )

    def plan_finish(
        self,
        outcome: SourceDrainOutcome,
        owned: frozenset[TopicPartitionId],
        now: float,
        deadline: float,
        handoff: Mapping[TopicPartitionId, int] | None,
    ) -> FinishPlan | None:
        """What resolving this round with ``outcome`` takes (``owned``: the partitions owned now);
        ``None`` if it was already resolved the same way.

        Raises :class:`DrainError` (a rejection) for a different outcome than the one already
        applied, an abort before the pause was observed, or handoff cursors that lack a gained
        partition. Raises :class:`FatalError` for a decision this generation cannot honour
        exactly: a resolution past its deadline, a Commit before ``READY``, or handoff cursors
        that contradict the cut (they must come from the durable cut).
        """
        if self.phase is DrainPhase.RESOLVED:
            if self.outcome is outcome:
                return None
            raise DrainError(
                f"drain {self.round} was resolved as {self.outcome.value if self.outcome else '?'}; "
                f"cannot {outcome.value} it"
            )
        if now > deadline:
            raise FatalError(f"{outcome.value} of drain {self.round}: its deadline has passed")
        if outcome is SourceDrainOutcome.ABORT:
            positions = self.cut if self.phase is DrainPhase.READY else self.boundary
            if positions is None:
                raise DrainError(f"abort of drain {self.round}: the pause has not been observed yet")
            return FinishPlan(outcome, resume=MappingProxyType(dict(positions)))
        if self.phase is not DrainPhase.READY:
            raise FatalError(f"commit of drain {self.round} arrived before the drain was ready")
        gained = self.target_owned - owned
        acquire: dict[TopicPartitionId, int | None] = {}
        if handoff is not None:
            missing = sorted(gained - set(handoff))
            if missing:
                raise DrainError(f"commit of drain {self.round}: no handoff cursor for {missing}")
            wrong = {tp: (handoff[tp], o) for tp, o in self.cut.items() if tp in handoff and handoff[tp] != o}
            if wrong:
                raise FatalError(
                    f"commit of drain {self.round}: handoff cursors contradict the cut "
                    f"(handoff, cut) = {wrong}"
                )
            acquire = {tp: handoff[tp] for tp in sorted(gained)}
        return FinishPlan(outcome, release=self.revoked, acquire=MappingProxyType(acquire))

    def resolved(self, outcome: SourceDrainOutcome) -> DrainProgress:
        return replace(self, phase=DrainPhase.RESOLVED, outcome=outcome)
