"""The register of a pipeline's control state: :class:`ControlState`, with its round and decisions.

:class:`ControlState` is the whole control state of a pipeline in one value (the ZooKeeper
``assignment`` node, ``state.json`` of the local backend, a value in memory for the model tests): the
published assignment, the boot ids of its owners, the round in progress (:class:`RoundState`), the
epoch counters and the recent decisions (:class:`Decision`). JSON encoding is canonical; decoding is
strict (:mod:`laminar_kafka.coordinator.codec`): CodecError naming the field, nothing coerced.

This module does no I/O. The node names around the register are in :mod:`laminar_kafka.coordinator.layout`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laminar_kafka.coordinator.codec import dumps, expect_int, expect_list, expect_object, expect_str, loads
from laminar_kafka.coordinator.errors import CodecError, CoordinatorError
from laminar_kafka.coordinator.values import RoundOutcome
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, NodeId
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

__all__ = [
    "RECENT_DECISIONS",
    "RoundState",
    "Decision",
    "ControlState",
]

#: How many past decisions the register remembers (so a slow watcher never misses one).
RECENT_DECISIONS: int = 8


def _drain_id(value: object, what: str) -> AssignmentDrainId:
    if not isinstance(value, Mapping):
        raise CodecError(f"{what}: drain id must be a JSON object, got {type(value).__name__}")
    try:
        return AssignmentDrainId.from_json(value)
    except CoordinatorError as exc:
        raise CodecError(f"{what}: {exc.message}", cause=exc) from exc


def _ints(value: object, what: str, minimum: int = 0) -> tuple[int, ...]:
    return tuple(expect_int(v, f"{what}[{i}]", minimum) for i, v in enumerate(expect_list(value, what)))


@dataclass(frozen=True)
class RoundState:
    """A running round as recorded in the register (and, for readers, in ``rounds/<round_id>``).

    ``participants``: predecessor owners that lose at least one vnode; each must report ready.
    ``cut_epoch``: the epoch opened after every participant was ready (0 until then).
    """

    drain_id: AssignmentDrainId
    target_owners: tuple[int, ...]
    deadline_ms: int
    leader_token: int
    participants: tuple[int, ...]
    cut_epoch: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "drain_id": self.drain_id.to_json(),
            "target_owners": list(self.target_owners),
            "deadline_ms": self.deadline_ms,
            "leader_token": self.leader_token,
            "participants": list(self.participants),
            "cut_epoch": self.cut_epoch,
        }

    @classmethod
    def from_dict(cls, data: object, what: str = "round") -> RoundState:
        """Strict inverse of :meth:`to_dict`; CodecError when malformed."""
        d = expect_object(data, what, ("drain_id", "target_owners", "deadline_ms", "leader_token",
                                       "participants", "cut_epoch"))
        return cls(
            drain_id=_drain_id(d["drain_id"], f"{what}: drain_id"),
            target_owners=_ints(d["target_owners"], f"{what}: target_owners"),
            deadline_ms=expect_int(d["deadline_ms"], f"{what}: deadline_ms"),
            leader_token=expect_int(d["leader_token"], f"{what}: leader_token"),
            participants=_ints(d["participants"], f"{what}: participants", minimum=1),
            cut_epoch=expect_int(d["cut_epoch"], f"{what}: cut_epoch"),
        )


@dataclass(frozen=True)
class Decision:
    drain_id: AssignmentDrainId
    outcome: RoundOutcome
    manifest_epoch: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "drain_id": self.drain_id.to_json(),
            "outcome": self.outcome.value,
            "manifest_epoch": self.manifest_epoch,
        }

    @classmethod
    def from_dict(cls, data: object, what: str = "decision") -> Decision:
        """Strict inverse of :meth:`to_dict`; CodecError when malformed."""
        d = expect_object(data, what, ("drain_id", "outcome", "manifest_epoch"))
        outcome = expect_str(d["outcome"], f"{what}: outcome")
        if outcome not in {o.value for o in RoundOutcome}:
            raise CodecError(f"{what}: outcome {outcome!r} is not one of {[o.value for o in RoundOutcome]}")
        return cls(
            _drain_id(d["drain_id"], f"{what}: drain_id"),
            RoundOutcome(outcome),
            expect_int(d["manifest_epoch"], f"{what}: manifest_epoch"),
        )

    @classmethod
    def from_json(cls, raw: bytes) -> Decision:
        """Strict decoding of a decision node's data."""
        return cls.from_dict(loads(raw, "decision"))


@dataclass(frozen=True)
class ControlState:
    """The register: published assignment, boot ids of its owners, round, epoch counters.

    Invariants: ``open_epoch`` is 0 or ``last_epoch + 1``; an open epoch is bound to
    ``snapshot.version``; ``round`` (if any) has ``predecessor_version == snapshot.version``.
    ``last_commit_ms`` is the leader's wall clock at the last commit (or publication of version 1):
    the base of the checkpoint-interval timer. ``leader_token`` is the fencing token of the last writer.
    """

    snapshot: AssignmentSnapshot
    boots: tuple[tuple[int, str], ...]
    manifest_epoch: int = 0
    round: RoundState | None = None
    open_epoch: int = 0
    last_epoch: int = 0
    last_commit_ms: int = 0
    decisions: tuple[Decision, ...] = ()
    leader_token: int = 0

    @property
    def version(self) -> int:
        return self.snapshot.version

    def boot_of(self, node: NodeId) -> str | None:
        for owner, boot in self.boots:
            if owner == node:
                return boot
        return None

    def to_json(self) -> bytes:
        return dumps({
            "version": self.snapshot.version,
            "vnode_count": self.snapshot.vnode_count,
            "owners": list(self.snapshot.owners),
            "changed_at": list(self.snapshot.changed_at),
            "boots": {str(n): b for n, b in self.boots},
            "manifest_epoch": self.manifest_epoch,
            "round": None if self.round is None else self.round.to_dict(),
            "open_epoch": self.open_epoch,
            "last_epoch": self.last_epoch,
            "last_commit_ms": self.last_commit_ms,
            "decisions": [d.to_dict() for d in self.decisions],
            "leader_token": self.leader_token,
        })

    @classmethod
    def from_json(cls, raw: bytes) -> ControlState:
        """Strict decoding; CodecError when malformed (including an invalid snapshot)."""
        what = "assignment register"
        d = expect_object(loads(raw, what), what, _REGISTER_KEYS)
        if not isinstance(d["boots"], dict):
            raise CodecError(f"{what}: boots must be a JSON object")
        boots = []
        for node, boot in d["boots"].items():
            if not node.isascii() or not node.isdigit() or str(int(node)) != node or int(node) < 1:
                raise CodecError(f"{what}: boots key {node!r} is not a node id")
            boots.append((int(node), expect_str(boot, f"{what}: boots[{node}]", nonempty=True)))
        try:
            snapshot = AssignmentSnapshot(
                expect_int(d["version"], f"{what}: version"),
                _ints(d["owners"], f"{what}: owners"),
                _ints(d["changed_at"], f"{what}: changed_at"),
            )
        except CodecError:
            raise
        except CoordinatorError as exc:
            raise CodecError(f"{what}: {exc.message}", cause=exc) from exc
        if snapshot.vnode_count != expect_int(d["vnode_count"], f"{what}: vnode_count", minimum=1):
            raise CodecError(f"{what}: vnode_count {d['vnode_count']} does not match {snapshot.vnode_count} owners")
        return cls(
            snapshot=snapshot,
            boots=tuple(sorted(boots)),
            manifest_epoch=expect_int(d["manifest_epoch"], f"{what}: manifest_epoch"),
            round=None if d["round"] is None else RoundState.from_dict(d["round"], f"{what}: round"),
            open_epoch=expect_int(d["open_epoch"], f"{what}: open_epoch"),
            last_epoch=expect_int(d["last_epoch"], f"{what}: last_epoch"),
            last_commit_ms=expect_int(d["last_commit_ms"], f"{what}: last_commit_ms"),
            decisions=tuple(Decision.from_dict(x, f"{what}: decisions[{i}]")
                            for i, x in enumerate(expect_list(d["decisions"], f"{what}: decisions"))),
            leader_token=expect_int(d["leader_token"], f"{what}: leader_token"),
        )


_REGISTER_KEYS = ("version", "vnode_count", "owners", "changed_at", "boots", "manifest_epoch", "round",
                  "open_epoch", "last_epoch", "last_commit_ms", "decisions", "leader_token")
