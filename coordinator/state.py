"""The register of a pipeline's control state and the names of the nodes around it.

:class:`ControlState` is the whole control state of a pipeline in one value (the ZooKeeper
``assignment`` node; an in-memory value for the local backend and the model tests): the published
assignment, the boot ids of its owners, the running round (:class:`RoundState`), the epoch counters
and the recent decisions (:class:`Decision`). JSON encoding is canonical and decoding strict.

Node names: epochs are 20-digit zero-padded (:func:`epoch_name`, they sort like numbers); acks and
drain receipts are ``<node>.<boot>`` (:func:`ack_name`: one per boot, so a zombie never blocks its
successor); rejection markers ``<node>.<boot>.<digest of the ack's content>`` (:func:`rejection_name`).

This module does no I/O; :mod:`coordinator.model` re-exports every name.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import xxhash

from coordinator.base import EpochAck, RoundOutcome
from coordinator.errors import CoordinatorError
from coordinator.registry import AssignmentSnapshot, NodeId
from coordinator.rounds import AssignmentDrainId

logger = logging.getLogger(__name__)

__all__ = [
    "RECENT_DECISIONS",
    "EPOCH_NAME_WIDTH",
    "RoundState",
    "Decision",
    "ControlState",
    "epoch_name",
    "ack_name",
    "parse_ack_name",
    "rejection_name",
    "parse_rejection_name",
]

#: How many past decisions the register remembers (so a slow watcher never misses one).
RECENT_DECISIONS: int = 8
#: Width of epoch names in paths (sort like numbers).
EPOCH_NAME_WIDTH: int = 20


def epoch_name(epoch: int) -> str:
    """Path-safe, sortable name of an epoch (20 zero-padded digits)."""
    return f"{epoch:0{EPOCH_NAME_WIDTH}d}"


def ack_name(node_id: NodeId, boot_id: str) -> str:
    """Name of an ack or drain receipt: one per (node, boot), so a zombie can never block its successor."""
    return f"{node_id}.{boot_id}"


def parse_ack_name(name: str) -> tuple[NodeId, str]:
    node, _, boot = name.partition(".")
    if not node.isdigit() or not boot:
        raise CoordinatorError(f"malformed receipt name {name!r}")
    return int(node), boot


def rejection_name(ack: EpochAck) -> str:
    """Name of the rejection marker of ``ack``: ``<node>.<boot>.<xxh3_64 hex of its JSON>``.

    Keyed by content: a replacement ack with other content is classified afresh and, if rejected
    too, gets its own marker (boot ids contain no dot).
    """
    return f"{ack_name(ack.node_id, ack.boot_id)}.{xxhash.xxh3_64_hexdigest(ack.to_json())}"


def parse_rejection_name(name: str) -> tuple[NodeId, str, str]:
    """``(node, boot, digest)`` of a rejection marker name; CoordinatorError when malformed."""
    receipt, _, digest = name.rpartition(".")
    if not digest:
        raise CoordinatorError(f"malformed rejection name {name!r}")
    node, boot = parse_ack_name(receipt)
    return node, boot, digest


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
    def from_dict(cls, data: Mapping[str, Any]) -> RoundState:
        return cls(
            drain_id=AssignmentDrainId.from_json(data["drain_id"]),
            target_owners=tuple(int(o) for o in data["target_owners"]),
            deadline_ms=int(data["deadline_ms"]),
            leader_token=int(data["leader_token"]),
            participants=tuple(int(p) for p in data["participants"]),
            cut_epoch=int(data["cut_epoch"]),
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
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            AssignmentDrainId.from_json(data["drain_id"]),
            RoundOutcome(data["outcome"]),
            int(data["manifest_epoch"]),
        )


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
        return json.dumps({
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
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ControlState:
        """Strict decoding; CoordinatorError when malformed."""
        try:
            data = json.loads(raw)
            snapshot = AssignmentSnapshot(
                int(data["version"]),
                tuple(int(o) for o in data["owners"]),
                tuple(int(c) for c in data["changed_at"]),
            )
            if snapshot.vnode_count != int(data["vnode_count"]):
                raise ValueError("vnode_count does not match owners")
            return cls(
                snapshot=snapshot,
                boots=tuple(sorted((int(n), str(b)) for n, b in data["boots"].items())),
                manifest_epoch=int(data["manifest_epoch"]),
                round=None if data["round"] is None else RoundState.from_dict(data["round"]),
                open_epoch=int(data["open_epoch"]),
                last_epoch=int(data["last_epoch"]),
                last_commit_ms=int(data["last_commit_ms"]),
                decisions=tuple(Decision.from_dict(d) for d in data["decisions"]),
                leader_token=int(data["leader_token"]),
            )
        except CoordinatorError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CoordinatorError(f"malformed assignment register: {exc}", cause=exc) from exc
