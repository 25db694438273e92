"""What the leader reads (:class:`View`) and what it decides to write (:class:`Step` and its intents).

The pure model (:func:`laminar_kafka.coordinator.engine.model.next_step`) turns a view into at most one step. A step is
the new register value plus typed *intents*, the records to create beside it, and the member
*fences* it relies on. A store adapter (:mod:`laminar_kafka.coordinator.store`) executes the whole step as ONE
compare-and-set: it checks the leader's election, the register version the view was read at and
every fence, then replaces the register and creates the intents' records, or does nothing at all.
Where the records live (ZooKeeper paths, files, memory) is the adapter's business: the ZooKeeper
layout is :mod:`laminar_kafka.coordinator.layout`.

This module does no I/O.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Union

from laminar_kafka.coordinator.state import ControlState, Decision, RoundState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member

__all__ = [
    "MemberFence",
    "View",
    "OpenEpoch",
    "WriteManifest",
    "StartRound",
    "CreateDecision",
    "RecordRejection",
    "Intent",
    "Step",
    "StepKind",
]


@dataclass(frozen=True)
class MemberFence:
    """Holds exactly while ``node``'s membership is the one the leader read: its member entry is at
    ``member_version`` and its election candidate ``candidate`` (a name under ``leader/``) exists.

    A member re-created by a new session may have the same data version, but the old session's
    election candidate is gone, so the pair fences exactly the membership read.
    """

    node: int
    member_version: int
    candidate: str


@dataclass(frozen=True)
class View:
    """What the leader read: everything :func:`laminar_kafka.coordinator.engine.model.next_step` needs.

    ``acks``: acks found under the open epoch (any boot id), latest content. ``rejections``: names of
    the rejection markers of the open epoch (:func:`laminar_kafka.coordinator.layout.rejection_name`). ``ready``:
    ``(node, boot_id)`` receipts of the running round. ``latest_manifest``: the manifest of
    ``control.last_epoch``, or while that is 0 the pinned initial manifest (None if there is none).

    ``epoch_wanted_after``: see :func:`laminar_kafka.coordinator.engine.model.epoch_interval`.

    ``member_fences``: per member read, the fence of its membership; a commit carries the fence of
    every node whose ack it relies on, and waits while a required node has none (its election
    candidate is not there yet). None: the store does not fence members (one process).
    """

    control: ControlState | None
    members: Mapping[int, Member]
    now_ms: int
    acks: tuple[EpochAck, ...] = ()
    ready: frozenset[tuple[int, str]] = frozenset()
    vnode_load: Mapping[int, int] = field(default_factory=dict)
    latest_manifest: Manifest | None = None
    member_fences: Mapping[int, MemberFence] | None = None
    rejections: frozenset[str] = frozenset()
    #: the latest epoch after which a node asked for the next one (0: none asked)
    epoch_wanted_after: int = 0


@dataclass(frozen=True)
class OpenEpoch:
    """Create the record of epoch ``epoch`` (bound to ``assignment_version``) and its empty ack and
    rejection folders."""

    epoch: int
    assignment_version: int


@dataclass(frozen=True)
class WriteManifest:
    """Create the durable manifest of a committed epoch (its commit point is the register)."""

    manifest: Manifest


@dataclass(frozen=True)
class StartRound:
    """Create the record of a round and its empty folder of drain receipts."""

    round: RoundState


@dataclass(frozen=True)
class CreateDecision:
    """Create-once the decision of a round: a second decision of the same round fails the step."""

    decision: Decision


@dataclass(frozen=True)
class RecordRejection:
    """Create-once the marker recording that ``ack`` (of a live owner's current boot) was rejected."""

    ack: EpochAck
    reason: str


Intent = Union[OpenEpoch, WriteManifest, StartRound, CreateDecision, RecordRejection]


class StepKind(enum.StrEnum):
    """What a leader step does (a string enum: logs and metrics print the value)."""

    PUBLISH = "publish"  #: publish the next assignment version (first one, or a committed round)
    OPEN_EPOCH = "open_epoch"  #: open the next epoch
    COMMIT_EPOCH = "commit_epoch"  #: write the manifest of a fully acked epoch (maybe deciding a round)
    DECIDE = "decide"  #: decide a round without an epoch (abort)
    START_ROUND = "start_round"  #: start a round towards a new owner map
    SHED = "shed"  #: move the vnodes of dead nodes
    REJECT_ACKS = "reject_acks"  #: record rejected acks for their nodes


@dataclass(frozen=True)
class Step:
    """One leader action: replace the register with ``control`` and create ``intents``, atomically,
    provided every fence in ``fences`` holds.

    ``kind`` names the action (:class:`StepKind`). ``rejected_acks``: acks the step found invalid
    (counted); ``shed``: dead nodes whose vnodes it moves (counted).
    """

    kind: StepKind
    control: ControlState
    intents: tuple[Intent, ...] = ()
    rejected_acks: tuple[tuple[EpochAck, str], ...] = ()
    shed: tuple[int, ...] = ()
    fences: tuple[MemberFence, ...] = ()

    @property
    def manifest(self) -> Manifest | None:
        """The manifest a commit writes (None for other steps)."""
        return next((i.manifest for i in self.intents if isinstance(i, WriteManifest)), None)

    @property
    def decision(self) -> Decision | None:
        """The decision this step creates (None if it decides no round)."""
        return next((i.decision for i in self.intents if isinstance(i, CreateDecision)), None)

    @property
    def reported(self) -> tuple[tuple[EpochAck, str], ...]:
        """The rejections this step records (their nodes are told once it is applied)."""
        return tuple((i.ack, i.reason) for i in self.intents if isinstance(i, RecordRejection))
