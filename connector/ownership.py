"""Vnode-scoped partition ownership of one source generation and its reconciliation (pure).

No I/O and no clock: callers pass ``now`` (a :func:`time.monotonic` value) and the registry
snapshots they read. :class:`Ownership` is an immutable value; every transition returns a new one
or raises. A connector executes what a transition asks for (pause, release, acquire, rewind) and
feeds the outcome back (Kafka's vnode driver on its reader thread; :class:`~laminar_kafka.connector.log_source.PartitionedLogSource`
at once, on the event loop).

Vocabulary (``TopicPartitionId`` = ``(topic, partition)``):

- ``version``: the assignment version the source is *pinned* to. Checkpoints carry it, and the
  source never emits records of a partition it does not own under it.
- ``owned``: the partitions whose vnode ``self_id`` owns at ``version``.
- ``live``: the partitions the consumer actually holds (confirmed by the reader thread).
  ``owned - live`` are partitions waiting for explicit start cursors (an acquisition).
- Reconciled with a published snapshot ``S`` iff ``version == S.version`` and ``live == owned``
  (and then ``owned`` equals the owned set computed from ``S``; a mismatch is a conflict).

Drains: :attr:`Ownership.drain` is the current or last round's
:class:`~laminar_kafka.connector.drain.DrainProgress` (phases and the cut live in :mod:`laminar_kafka.connector.drain`);
:class:`Ownership` checks each drain transition against the registry and fails the generation when
one breaks an invariant.

Owner maps (routing and validity: :mod:`laminar_kafka.connector.owner_map`): a map where a vnode
that routes a known partition is unassigned while other vnodes have owners is rejected
(:class:`~laminar_kafka.connector.errors.UnassignedVnodeError`; in a round's target, a
:class:`~laminar_kafka.connector.errors.DrainError`). The coordinator assigns every vnode or none; an
all-unassigned map (version 0 before the first publication, or no live member) is legitimate and
gives this node nothing.

Self -> other -> self: a partition kept between two looks at versions ``a < b`` really stayed
only if its vnode's ``changed_at <= a`` in the version-``b`` snapshot; otherwise another node
may have read it meanwhile, so it is released and acquired again at an explicit cursor (never
resumed from the stale local one).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from laminar_kafka.connector.drain import DrainPhase, DrainProgress, FinishPlan
from laminar_kafka.connector.errors import ConnectorError, DrainError, FatalError
from laminar_kafka.connector.owner_map import require_assigned, route_partitions, unassigned_vnodes
from laminar_kafka.connector.protocol import SourceDrainOutcome, SourceDrainResolution
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, PendingTarget
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

# route_partitions and unassigned_vnodes live in owner_map; kept importable from here for callers
__all__ = ["Ownership", "Reconcile", "route_partitions", "unassigned_vnodes"]


def _frozen(mapping: Mapping[TopicPartitionId, int | None]) -> Mapping[TopicPartitionId, int | None]:
    return MappingProxyType(dict(sorted(mapping.items())))


@dataclass(frozen=True)
class Reconcile:
    """A step toward a published snapshot outside any drain: pin ``version`` with ``owned``,
    unassign ``release`` and assign ``acquire`` (``None`` = the partition's low watermark, the same
    rule as a Resume checkpoint that lacks a partition). An empty plan only moves the pin."""

    version: int
    owned: frozenset[TopicPartitionId]
    release: frozenset[TopicPartitionId] = frozenset()
    acquire: Mapping[TopicPartitionId, int | None] = field(default_factory=dict)

    @property
    def needs_consumer(self) -> bool:
        return bool(self.release or self.acquire)


@dataclass(frozen=True)
class Ownership:
    """The ownership state of one source generation (see the module docstring).

    ``routes`` maps every partition the source knows to its vnode; ``drain`` is the active or last
    resolved round; ``failure`` is set once the generation is terminally failed.
    """

    self_id: int
    routes: Mapping[TopicPartitionId, int]
    version: int
    owned: frozenset[TopicPartitionId]
    live: frozenset[TopicPartitionId] = frozenset()
    drain: DrainProgress | None = None
    failure: str | None = None
    #: the last :meth:`owned_at` of an owner tuple (that tuple, its answer): a running source asks
    #: for the same snapshot's owned set several times per poll, each an O(partitions) walk
    _owned_memo: tuple[tuple[int, ...], frozenset[TopicPartitionId]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _settled_memo: bool | None = field(default=None, init=False, repr=False, compare=False)

    # -- construction and queries ------------------------------------------------------------------

    @classmethod
    def at(cls, self_id: int, routes: Mapping[TopicPartitionId, int], snapshot: AssignmentSnapshot) -> Ownership:
        """Pinned to ``snapshot`` with nothing live yet (the state before the consumer starts).

        Raises :class:`UnassignedVnodeError` if ``snapshot`` leaves a routed vnode unassigned
        (see the module docstring).
        """
        require_assigned(routes, snapshot)
        state = cls(self_id, MappingProxyType(dict(routes)), snapshot.version, frozenset())
        return replace(state, owned=state.owned_at(snapshot.owners))

    def owned_at(self, owners: tuple[int, ...] | list[int]) -> frozenset[TopicPartitionId]:
        """The known partitions whose vnode ``self_id`` owns in ``owners``."""
        memo = self._owned_memo
        if memo is not None and memo[0] is owners:
            return memo[1]
        me = self.self_id
        owned = frozenset(tp for tp, vnode in self.routes.items() if owners[vnode] == me)
        if isinstance(owners, tuple):  # immutable: the answer holds as long as the tuple
            object.__setattr__(self, "_owned_memo", (owners, owned))
        return owned

    @property
    def settled(self) -> bool:
        """Whether every owned partition is live and every live one owned (``live == owned``: at the
        same version, nothing to release or acquire). Computed once per value: the driver asks on
        every turn, and comparing two sets of 1,000 partitions each time was an idle node's cost."""
        memo = self._settled_memo
        if memo is None:
            memo = self.live == self.owned
            object.__setattr__(self, "_settled_memo", memo)
        return memo

    @property
    def phase(self) -> DrainPhase:
        if self.failure is not None:
            return DrainPhase.FAILED
        return DrainPhase.IDLE if self.drain is None else self.drain.phase

    @property
    def pending(self) -> frozenset[TopicPartitionId]:
        """Owned partitions the consumer does not hold yet (waiting for explicit cursors)."""
        return self.owned - self.live

    def require_alive(self) -> None:
        if self.failure is not None:
            raise FatalError(f"source generation failed: {self.failure}")

    def is_ready(self, snapshot: AssignmentSnapshot) -> bool:
        """Reconciled with ``snapshot``: pinned to its version with every owned partition live.

        Raises :class:`FatalError` if failed, or if pinned to ``snapshot.version`` with an owned set
        that differs from the snapshot's (two owner maps under one version: unsafe to continue).
        """
        self.require_alive()
        if self.version != snapshot.version:
            return False
        if self.owned != self.owned_at(snapshot.owners):
            raise FatalError(
                f"ownership conflict at version {self.version}: pinned {len(self.owned)} partition(s), "
                f"the published map gives {len(self.owned_at(snapshot.owners))}"
            )
        return self.live == self.owned

    # -- failure -----------------------------------------------------------------------------------

    def fail(self, reason: str) -> Ownership:
        """Terminal: every later transition raises :class:`FatalError`. Idempotent (first reason kept)."""
        if self.failure is not None:
            return self
        logger.error("source ownership failed: %s", reason)
        return replace(self, failure=reason)

    def expire(self, now: float) -> Ownership:
        """Fail if a round is still ``DRAINING`` after its deadline (the boundary came too late)."""
        drain = self.drain
        if self.failure is None and drain is not None and drain.expired(now):
            return self.fail(
                f"drain {drain.round} passed its deadline before the boundary was consumed"
            )
        return self

    # -- drain ------------------------------------------------------------------------------------

    def begin_drain(
        self,
        round: AssignmentDrainId,
        deadline: float,
        now: float,
        snapshot: AssignmentSnapshot,
        pending: PendingTarget | None,
    ) -> tuple[Ownership, bool]:
        """Start ``round``; returns the new state and whether anything started (False: same round
        again, a no-op).

        Pre (else :class:`DrainError`, state unchanged): no other round active; ``round`` is newer
        than the last resolved one; the deadline is in the future; ``round.predecessor_version`` is
        the published version and the source is reconciled with it; the registry's pending target
        is ``round``. Post: ``revoked`` = owned now and not under the target; ``DRAINING`` if any
        partition is revoked, else ``READY`` with an empty cut.
        """
        self.require_alive()
        drain = self.drain
        if drain is not None and drain.round == round:
            if drain.active:
                return self, False
            raise DrainError(f"drain {round} was already resolved ({drain.outcome.value if drain.outcome else '?'})")
        if drain is not None and drain.active:
            raise DrainError(f"drain {drain.round} is active; cannot begin {round}")
        if drain is not None and round.target_version <= drain.round.target_version:
            raise DrainError(f"stale drain {round}: round {drain.round} was already resolved")
        if not round.is_canonical():
            raise DrainError(f"drain round {round} is not canonical")
        if now >= deadline:
            raise DrainError(f"drain {round} deadline has already passed")
        if round.predecessor_version != snapshot.version:
            raise DrainError(
                f"stale or superseded drain {round}: the published version is {snapshot.version}"
            )
        if not self.is_ready(snapshot):
            raise DrainError(
                f"drain {round}: the source is not reconciled with version {snapshot.version} "
                f"(pinned {self.version}, {len(self.pending)} partition(s) pending)"
            )
        if pending is None or pending.drain_id != round:
            raise DrainError(
                f"drain {round} is not the registry's pending round "
                f"({pending.drain_id if pending is not None else 'none pending'})"
            )
        vnodes = unassigned_vnodes(self.routes, pending.owners)
        if vnodes:
            raise DrainError(
                f"drain {round}: the target leaves vnode(s) {list(vnodes)[:16]} that route partitions "
                "of this source unassigned while other vnodes have owners (an invalid owner map)"
            )
        new = DrainProgress.begin(round, deadline, self.owned, self.owned_at(pending.owners))
        return replace(self, drain=new), True

    def _active(self, round: AssignmentDrainId) -> DrainProgress:
        drain = self.drain
        if drain is None or drain.round != round:
            current = drain.round if drain is not None else None
            raise DrainError(f"unknown or stale drain {round} (current: {current})")
        return drain

    def boundary_paused(self, round: AssignmentDrainId, positions: Mapping[TopicPartitionId, int]) -> Ownership:
        """Record the reader's positions of the revoked partitions at the pause (for an abort
        that arrives before the boundary is consumed); fails the generation on a mismatch."""
        drain = self._active(round)
        try:
            return replace(self, drain=drain.paused_at(positions))
        except FatalError as exc:
            return self.fail(str(exc))

    def boundary_consumed(
        self, round: AssignmentDrainId, cursor: Mapping[TopicPartitionId, int], now: float
    ) -> Ownership:
        """Every record fetched before ``round``'s boundary was emitted: fix the cut from ``cursor``.

        A boundary of a round that is not ``DRAINING`` (already aborted, superseded) changes nothing.
        Fails the generation if the deadline passed, a revoked partition has no cursor, or the cut
        differs from the reader's pause positions.
        """
        state = self.expire(now)
        if state.failure is not None:
            return state
        drain = state.drain
        if drain is None or drain.round != round or drain.phase is not DrainPhase.DRAINING:
            return state
        try:
            return replace(state, drain=drain.cut_at(cursor))
        except FatalError as exc:
            return state.fail(str(exc))

    def check_cut(self, cursor: Mapping[TopicPartitionId, int]) -> Ownership:
        """Fail the generation if a revoked partition's cursor moved after the cut was fixed."""
        if self.failure is not None or self.drain is None:
            return self
        try:
            self.drain.check_cut(cursor)
        except FatalError as exc:
            return self.fail(str(exc))
        return self

    def ready(self, round: AssignmentDrainId) -> bool:
        """Whether ``round``'s cut is fixed (``READY``; ``RESOLVED`` also counts). Raises
        :class:`DrainError` for another round and :class:`FatalError` once failed."""
        self.require_alive()
        drain = self._active(round)
        return drain.phase in (DrainPhase.READY, DrainPhase.RESOLVED)

    def plan_finish(
        self,
        resolution: SourceDrainResolution,
        now: float,
        deadline: float,
        handoff: Mapping[TopicPartitionId, int] | None,
    ) -> FinishPlan | None:
        """What resolving the active round takes; ``None`` if it was already resolved the same way.

        Raises :class:`DrainError` (state unchanged) for an unknown or stale round, and otherwise
        as :meth:`DrainProgress.plan_finish` (:class:`FatalError`: the caller fails the
        generation). ``handoff`` (Commit only): ``{tp: next offset}`` from the durable manifest
        holding the cut; ``None`` leaves gained partitions pending for a later explicit acquisition.
        """
        self.require_alive()
        drain = self._active(resolution.round)
        return drain.plan_finish(resolution.outcome, self.owned, now, deadline, handoff)

    def finished(self, plan: FinishPlan, acquired: Mapping[TopicPartitionId, int]) -> Ownership:
        """Apply a :class:`FinishPlan` the consumer executed (``acquired``: partitions assigned)."""
        drain = self.drain
        assert drain is not None and drain.active
        resolved = drain.resolved(plan.outcome)
        if plan.outcome is SourceDrainOutcome.ABORT:
            return replace(self, drain=resolved)
        return replace(
            self,
            version=drain.round.target_version,
            owned=drain.target_owned,
            live=(self.live - plan.release) | frozenset(acquired),
            drain=resolved,
        )

    # -- reconciliation outside drains --------------------------------------------------------------

    def plan_reconcile(
        self, snapshot: AssignmentSnapshot, offer: tuple[int, Mapping[TopicPartitionId, int]] | None
    ) -> Reconcile | None:
        """The next step toward ``snapshot``, or ``None`` when there is nothing to do now.

        Nothing while failed, while a round is active, or while pinned ahead of ``snapshot`` (a
        committed target not yet published). Otherwise: keep the live partitions still owned that
        did not change owner in between; release the rest of the live ones; acquire the owned
        partitions not kept at the cursors of ``offer`` if it was made for ``snapshot.version``
        (partitions it lacks start at their low watermark). Without a matching offer, gained
        partitions stay pending. Raises :class:`UnassignedVnodeError` for a newer ``snapshot``
        that leaves a routed vnode unassigned (see the module docstring).
        """
        if self.failure is not None or (self.drain is not None and self.drain.active):
            return None
        if snapshot.version < self.version:
            return None
        if snapshot.version > self.version:
            require_assigned(self.routes, snapshot)
        if snapshot.version == self.version:
            mapped = self.owned_at(snapshot.owners)
            if mapped is not self.owned and mapped != self.owned:
                raise FatalError(f"ownership conflict at version {self.version}: two owner maps")
            if self.settled:
                return None
            new_owned, stale = self.owned, frozenset[TopicPartitionId]()
        else:
            new_owned = self.owned_at(snapshot.owners)
            stale = frozenset(
                tp for tp in self.owned & new_owned if snapshot.changed_at[self.routes[tp]] > self.version
            )
        keep = (self.live & new_owned) - stale
        release = self.live - keep
        need = new_owned - keep
        acquire: dict[TopicPartitionId, int | None] = {}
        if need and offer is not None and offer[0] == snapshot.version:
            cursors = offer[1]
            acquire = {tp: cursors.get(tp) for tp in sorted(need)}
        if snapshot.version == self.version and not release and not acquire:
            return None
        return Reconcile(snapshot.version, new_owned, release, _frozen(acquire))

    def acquisition_needed(self, snapshot: AssignmentSnapshot) -> tuple[int, frozenset[TopicPartitionId]] | None:
        """``(snapshot.version, partitions)`` when reconciling with ``snapshot`` waits for explicit
        cursors (an offer for that version) of ``partitions``, else ``None`` (nothing to acquire or
        do now, or a snapshot :meth:`plan_reconcile` rejects: that error surfaces on reconciling)."""
        try:
            plan = self.plan_reconcile(snapshot, (snapshot.version, {}))
        except ConnectorError:
            return None
        if plan is None or not plan.acquire:
            return None
        return plan.version, frozenset(plan.acquire)

    def reconciled(self, plan: Reconcile, acquired: Mapping[TopicPartitionId, int]) -> Ownership:
        """Apply a :class:`Reconcile` the consumer executed (``acquired``: partitions assigned)."""
        return replace(
            self,
            version=plan.version,
            owned=plan.owned,
            live=(self.live - plan.release) | frozenset(acquired),
        )

    # -- topology growth ---------------------------------------------------------------------------

    def can_route_more(self, snapshot: AssignmentSnapshot) -> bool:
        """Whether new partitions may join the routing table now: alive, no round active, and
        pinned to ``snapshot`` (the published version), so their owned share is computed from the
        owner map the source is pinned to."""
        return (
            self.failure is None
            and not (self.drain is not None and self.drain.active)
            and self.version == snapshot.version
        )

    def with_partitions(self, routes: Mapping[TopicPartitionId, int], snapshot: AssignmentSnapshot) -> Ownership:
        """Add partitions that appeared in the topology (``{tp: vnode}``; known ones are ignored).

        Pre: :meth:`can_route_more` (else :class:`DrainError`, state unchanged). Post: the new
        partitions whose vnode ``self_id`` owns in ``snapshot`` are owned and pending (not live):
        they are acquired by a :class:`Reconcile` at the same version with explicit cursors, and
        :meth:`is_ready` is False until then. Raises :class:`UnassignedVnodeError` if ``snapshot``
        leaves a new partition's vnode unassigned (see the module docstring).
        """
        if not self.can_route_more(snapshot):
            raise DrainError(
                f"cannot add partitions now (pinned {self.version}, published {snapshot.version}, "
                f"phase {self.phase.value})"
            )
        added = {tp: v for tp, v in routes.items() if tp not in self.routes}
        if not added:
            return self
        require_assigned(added, snapshot)
        mine = frozenset(tp for tp, v in added.items() if snapshot.owners[v] == self.self_id)
        return replace(
            self,
            routes=MappingProxyType(dict(sorted({**self.routes, **added}.items()))),
            owned=self.owned | mine,
        )

    def started(self, live: frozenset[TopicPartitionId]) -> Ownership:
        """The consumer was started holding ``live`` (a subset of ``owned``)."""
        return replace(self, live=frozenset(live))
