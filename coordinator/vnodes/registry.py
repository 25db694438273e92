"""The vnode registry: immutable, versioned owner maps and the pending target of a running round.

A pipeline's partitions hash onto a fixed number of vnodes (:data:`DEFAULT_VNODE_COUNT`); the registry
says which node owns each vnode. Every change is a new :class:`AssignmentSnapshot` with a strictly
greater version. While a round runs, its target is visible as a :class:`PendingTarget`.

Concurrency: one writer lock serialises :meth:`VnodeRegistry.publish`, :meth:`VnodeRegistry.begin_round`
and :meth:`VnodeRegistry.clear_round`; readers never take it. The published snapshot and the pending
target live together in one immutable state object swapped by a single reference assignment, so
:meth:`VnodeRegistry.state` always returns a consistent pair.

This module does no I/O.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from laminar_kafka.coordinator.codec import is_int
from laminar_kafka.coordinator.errors import RegistryError, RoundError
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

logger = logging.getLogger(__name__)

__all__ = [
    "NodeId",
    "UNASSIGNED",
    "DEFAULT_VNODE_COUNT",
    "AssignmentSnapshot",
    "PendingTarget",
    "VnodeRegistry",
    "moved_vnodes",
]

NodeId = int
#: Owner value of a vnode nobody owns. Real node ids are positive.
UNASSIGNED: NodeId = 0
DEFAULT_VNODE_COUNT: int = 256


def _validate_owners(owners: Sequence[int], vnode_count: int | None, what: str) -> tuple[int, ...]:
    result = tuple(owners)
    if vnode_count is not None and len(result) != vnode_count:
        raise RegistryError(f"{what} has {len(result)} entries, expected {vnode_count} vnodes")
    for vnode, owner in enumerate(result):
        if not is_int(owner) or owner < 0:
            raise RegistryError(f"{what}[{vnode}] = {owner!r} is not a node id (int >= 0)")
    return result


@dataclass(frozen=True, slots=True)
class AssignmentSnapshot:
    """One published owner map.

    ``owners[v]`` is the node owning vnode ``v`` (:data:`UNASSIGNED` if none). ``changed_at[v]`` is the
    version at which vnode ``v`` last changed owner (0 if never), as observed by the registry that built
    the snapshot: a holder of vnode ``v`` at versions ``a < b`` kept it throughout iff
    ``changed_at[v] <= a`` in the version-``b`` snapshot, which is how a source detects a
    self -> other -> self move between two looks.

    Invariants (checked on construction, :class:`RegistryError` otherwise): ``version >= 0``, at least
    one vnode, ``len(changed_at) == len(owners)``, owners ``>= 0``, ``0 <= changed_at[v] <= version``.
    """

    version: int
    owners: tuple[int, ...]
    changed_at: tuple[int, ...]

    def __post_init__(self) -> None:
        if not is_int(self.version) or self.version < 0:
            raise RegistryError(f"snapshot version {self.version!r} must be an int >= 0")
        if not isinstance(self.owners, tuple) or not isinstance(self.changed_at, tuple):
            raise RegistryError("snapshot owners and changed_at must be tuples")
        if not self.owners:
            raise RegistryError("a snapshot needs at least one vnode")
        if len(self.changed_at) != len(self.owners):
            raise RegistryError(
                f"changed_at has {len(self.changed_at)} entries but owners has {len(self.owners)}"
            )
        _validate_owners(self.owners, None, "owners")
        for vnode, at in enumerate(self.changed_at):
            if not is_int(at) or not 0 <= at <= self.version:
                raise RegistryError(f"changed_at[{vnode}] = {at!r} is outside 0..{self.version}")

    @classmethod
    def initial(cls, vnode_count: int = DEFAULT_VNODE_COUNT) -> AssignmentSnapshot:
        """Version 0: every vnode unassigned, nothing ever changed."""
        if not is_int(vnode_count) or vnode_count < 1:
            raise RegistryError(f"vnode_count {vnode_count!r} must be an int >= 1")
        return cls(0, (UNASSIGNED,) * vnode_count, (0,) * vnode_count)

    @property
    def vnode_count(self) -> int:
        """Number of vnodes (fixed for the life of a registry)."""
        return len(self.owners)

    def owner_of(self, vnode: int) -> NodeId:
        """Owner of ``vnode``; :class:`RegistryError` if ``vnode`` is outside ``0..vnode_count-1``."""
        if not isinstance(vnode, int) or not 0 <= vnode < len(self.owners):
            raise RegistryError(f"vnode {vnode!r} outside 0..{len(self.owners) - 1}")
        return self.owners[vnode]

    def vnodes_of(self, node: NodeId) -> frozenset[int]:
        """The vnodes ``node`` owns (empty if none; ``vnodes_of(UNASSIGNED)`` lists the unowned ones)."""
        return frozenset(v for v, owner in enumerate(self.owners) if owner == node)

    def nodes(self) -> frozenset[NodeId]:
        """The nodes that own at least one vnode (never includes :data:`UNASSIGNED`)."""
        return frozenset(self.owners) - {UNASSIGNED}

    def next(self, version: int, owners: Sequence[int]) -> AssignmentSnapshot:
        """The snapshot that follows this one at ``version`` with ``owners``.

        Pre: ``version > self.version`` and ``owners`` has ``vnode_count`` node ids, else
        :class:`RegistryError`. Post: ``changed_at[v] == version`` where the owner differs from this
        snapshot's, and is inherited otherwise.
        """
        if not is_int(version) or version <= self.version:
            raise RegistryError(f"version {version!r} must be greater than the published {self.version}")
        new_owners = _validate_owners(owners, self.vnode_count, "owners")
        changed_at = tuple(
            version if new != old else at
            for new, old, at in zip(new_owners, self.owners, self.changed_at, strict=True)
        )
        return AssignmentSnapshot(version, new_owners, changed_at)


def moved_vnodes(
    before: AssignmentSnapshot | Sequence[int], after: AssignmentSnapshot | Sequence[int]
) -> dict[int, tuple[NodeId, NodeId]]:
    """``{vnode: (old_owner, new_owner)}`` for every vnode whose owner differs between two maps.

    Accepts snapshots or plain owner sequences; both must cover the same number of vnodes.
    """
    old = before.owners if isinstance(before, AssignmentSnapshot) else tuple(before)
    new = after.owners if isinstance(after, AssignmentSnapshot) else tuple(after)
    if len(old) != len(new):
        raise RegistryError(f"cannot compare owner maps of {len(old)} and {len(new)} vnodes")
    return {v: (a, b) for v, (a, b) in enumerate(zip(old, new, strict=True)) if a != b}


@dataclass(frozen=True, slots=True)
class PendingTarget:
    """The target of the round in progress: ``owners`` will be published at ``target_version`` on a
    commit (an abort publishes ``target_version`` with the predecessor's owners instead)."""

    drain_id: AssignmentDrainId
    owners: tuple[int, ...]

    @property
    def predecessor_version(self) -> int:
        return self.drain_id.predecessor_version

    @property
    def target_version(self) -> int:
        return self.drain_id.target_version


@dataclass(frozen=True, slots=True)
class _State:
    snapshot: AssignmentSnapshot
    pending: PendingTarget | None


class VnodeRegistry:
    """Thread-safe holder of the published :class:`AssignmentSnapshot` and the pending round target.

    Contracts:
    - Versions only grow: each publication's version is strictly greater than the previous one. Gaps
      are allowed (a mirror of the coordinator may skip versions it never saw).
    - The vnode count is fixed at construction.
    - At most one round is pending; its predecessor is the published version when it begins, and any
      later publication ends it (the published version has moved past its predecessor).
    """

    def __init__(self, vnode_count: int = DEFAULT_VNODE_COUNT) -> None:
        self._lock = threading.Lock()
        self._state = _State(AssignmentSnapshot.initial(vnode_count), None)

    @property
    def vnode_count(self) -> int:
        return self._state.snapshot.vnode_count

    def snapshot(self) -> AssignmentSnapshot:
        """The currently published snapshot (initially version 0, all unassigned). Never blocks."""
        return self._state.snapshot

    def pending(self) -> PendingTarget | None:
        """The target of the running round, or ``None``. Never blocks."""
        return self._state.pending

    def state(self) -> tuple[AssignmentSnapshot, PendingTarget | None]:
        """The published snapshot and pending target, read together (consistent with each other)."""
        state = self._state
        return state.snapshot, state.pending

    def publish(self, version: int, owners: Sequence[int]) -> AssignmentSnapshot:
        """Publish ``owners`` at ``version`` and return the new snapshot.

        Pre: ``version`` > the published version; ``owners`` has ``vnode_count`` ints >= 0
        (:class:`RegistryError` otherwise, and nothing changes).
        Post: the new snapshot is visible to every later reader; ``changed_at`` is updated for each vnode
        whose owner differs; any pending round is cleared.
        """
        with self._lock:
            current = self._state
            snapshot = current.snapshot.next(version, owners)
            if current.pending is not None and current.pending.target_version != version:
                logger.info(
                    "publication of version %d ends pending round %s",
                    version,
                    current.pending.drain_id,
                )
            self._state = _State(snapshot, None)
        return snapshot

    def publish_snapshot(self, snapshot: AssignmentSnapshot) -> AssignmentSnapshot:
        """Adopt ``snapshot`` as published, keeping its ``changed_at`` (a mirror of another registry).

        Use it where versions may be skipped: :meth:`publish` recomputes ``changed_at`` from this
        registry's own history, so a self -> other -> self move inside a skipped version would be
        invisible; the origin's ``changed_at`` keeps it visible.
        Pre: ``snapshot.version`` > the published version and ``snapshot.vnode_count`` equals this
        registry's (:class:`RegistryError` otherwise, and nothing changes).
        Post: as :meth:`publish` (visible to every later reader; any pending round is cleared).
        """
        if not isinstance(snapshot, AssignmentSnapshot):
            raise RegistryError(f"expected an AssignmentSnapshot, got {type(snapshot).__name__}")
        with self._lock:
            current = self._state
            if snapshot.vnode_count != current.snapshot.vnode_count:
                raise RegistryError(
                    f"snapshot has {snapshot.vnode_count} vnodes, expected {current.snapshot.vnode_count}"
                )
            if snapshot.version <= current.snapshot.version:
                raise RegistryError(
                    f"version {snapshot.version} must be greater than the published {current.snapshot.version}"
                )
            self._state = _State(snapshot, None)
        return snapshot

    def begin_round(self, drain_id: AssignmentDrainId, target_owners: Sequence[int]) -> PendingTarget:
        """Record the target of a round and return it.

        Pre: ``drain_id`` is canonical and its predecessor is the published version (else
        :class:`RoundError`: non-canonical or stale); ``target_owners`` is a valid owner map
        (:class:`RegistryError`). If a round is already pending, the same id with the same owners is an
        idempotent no-op; anything else raises :class:`RoundError` (the other round must be published
        or cleared first).
        Post: :meth:`pending` returns the target until :meth:`publish` or :meth:`clear_round`.
        """
        drain_id.require_canonical()
        with self._lock:
            current = self._state
            owners = _validate_owners(target_owners, current.snapshot.vnode_count, "target owners")
            if current.pending is not None:
                if current.pending.drain_id == drain_id and current.pending.owners == owners:
                    return current.pending
                raise RoundError(
                    f"round {current.pending.drain_id} is pending; cannot begin {drain_id}"
                )
            if drain_id.predecessor_version != current.snapshot.version:
                raise RoundError(
                    f"stale round {drain_id}: published version is {current.snapshot.version}"
                )
            pending = PendingTarget(drain_id, owners)
            self._state = _State(current.snapshot, pending)
        return pending

    def clear_round(self, drain_id: AssignmentDrainId) -> bool:
        """Drop the pending target if it belongs to ``drain_id``. Returns whether it did (idempotent)."""
        with self._lock:
            current = self._state
            if current.pending is None or current.pending.drain_id != drain_id:
                return False
            self._state = _State(current.snapshot, None)
        return True
