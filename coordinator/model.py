"""The pure round and epoch state machine shared by every coordinator backend.

The whole control state of a pipeline lives in one register, :class:`ControlState` (the ZooKeeper
``assignment`` node; an in-memory value for the local backend and the model tests; defined with the
node names in :mod:`coordinator.state` and re-exported here). The leader
reads a :class:`View` (register + its version, live members and the checks that fence them, acks and
rejection markers of the open epoch, drain receipts of the running round, vnode loads, latest
manifest) and asks :func:`next_step` what to do. A :class:`Step` is the new register value plus the
nodes to create next to it and the node versions to check; the backend executes it as ONE
compare-and-set transaction that also checks the leader's election node, so a step computed from a
stale view, or by a deposed leader, is rejected as a whole. All the I/O is in the backends.

Decisions, in priority order (each call returns at most one step):

1. An open epoch E (bound to the published version V) commits once every *live* owner of V has a
   valid ack. Valid: ack for E at V, from an owner of V whose boot id is both the one recorded when V
   was published and its live member's boot id, whose cursors name only partitions that route to a
   vnode it owns at V, and with no cursor below the previous manifest. Others are returned in
   ``Step.rejected_acks``. The manifest overlays the previous manifest's cursors with the valid acks'
   cursors (before the first commit, the previous manifest is the pinned initial manifest, epoch 0);
   outputs are the union of the valid acks' outputs. A dead owner's partitions keep their last durable
   cursor. The commit step checks the member entry of every node whose ack it relies on
   (``View.member_checks``), so a node that lost its membership and rejoined after the view was read
   cannot have its old boot's ack committed. If E is the cut epoch of the running round, no
   participant died and the deadline has not passed, the same step creates the round's COMMIT
   decision and publishes V+1 = target (manifest_epoch = E). While an epoch is open nothing else
   happens, except: an ack of an owner's live, current boot that is rejected for its content (a foreign
   partition, a regressing cursor) blocks the commit, so a ``reject_acks`` step first records the
   rejection, create-once, as ``epochs/<E>/rejected/<node>.<boot>.<digest>`` (``{"reason": ...}``; the
   digest is that of the ack's content, see :func:`rejection_name`). The node is told and sends a
   replacement ack; the leader classifies the latest content on every pass, so a marker of an older
   content never blocks a valid replacement, and an invalid replacement gets its own marker.
2. A running round aborts when an owner of the predecessor or of the target is dead, or its deadline
   passed: the ABORT decision and V+1 = predecessor owners (dead owners are shed by a later step).
   When every *participant* (a predecessor owner that loses at least one vnode) has reported ready
   under its recorded boot id, the cut epoch opens at V. Otherwise the round waits (epochs continue).
3. A dead owner (its live boot id differs from the one recorded at V, or it is gone) is shed: its
   vnodes move to live nodes without a drain, nothing else moves (manifest_epoch = latest manifest).
4. The target placement over live, non-leaving members differs from the published owners: a round
   starts, unless no live owner loses a vnode, in which case the target is published directly.
5. The checkpoint interval has passed since the last commit and some vnode is owned: epoch E+1 opens.

This module does no I/O.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.base import (
    AssignmentChanged,
    CoordinatorConfig,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    Member,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
)
from coordinator.errors import RoutingError
from coordinator.placement import place, rendezvous
from coordinator.registry import UNASSIGNED, AssignmentSnapshot
from coordinator.rounds import AssignmentDrainId, round_id
from coordinator.routing import partitions_by_vnode
from coordinator.state import (  # the register and node names, re-exported here
    RECENT_DECISIONS,
    ControlState,
    Decision,
    RoundState,
    ack_name,
    epoch_name,
    parse_ack_name,
    parse_rejection_name,
    rejection_name,
)

logger = logging.getLogger(__name__)

__all__ = [
    "RECENT_DECISIONS",
    "RoundState",
    "Decision",
    "ControlState",
    "View",
    "Step",
    "AckVerdict",
    "classify_ack",
    "dead_owners",
    "merge_manifest",
    "shed_owners",
    "next_step",
    "next_wakeup_ms",
    "EventTracker",
    "epoch_name",
    "ack_name",
    "parse_ack_name",
    "rejection_name",
    "parse_rejection_name",
    "unowned_cursor",
]

@dataclass(frozen=True)
class View:
    """What the leader read: everything :func:`next_step` needs.

    ``acks``: acks found under the open epoch (any boot id), latest content. ``rejections``: names of
    the rejection markers of the open epoch (:func:`rejection_name`). ``ready``: ``(node, boot_id)``
    receipts of the running round. ``latest_manifest``: the manifest of ``control.last_epoch``, or
    while that is 0 the pinned initial manifest (None if there is none).

    ``member_checks``: for each member read, the ``(relative path, node version)`` checks that hold
    exactly while that member's entry (its boot id) is the one read; a commit adds the checks of
    every node whose ack it relies on, and waits while a required node has none. ZooKeeper gives the
    member node's data version and the election node of that boot (a member re-created by a new
    session may have the same data version; its old election node is gone). None: the backend does
    not fence members (one process).
    """

    control: ControlState | None
    members: Mapping[int, Member]
    now_ms: int
    acks: tuple[EpochAck, ...] = ()
    ready: frozenset[tuple[int, str]] = frozenset()
    vnode_load: Mapping[int, int] = field(default_factory=dict)
    latest_manifest: Manifest | None = None
    member_checks: Mapping[int, tuple[tuple[str, int], ...]] | None = None
    rejections: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Step:
    """One leader action: replace the register with ``control``, check ``checks`` and create
    ``creates``, atomically.

    ``creates`` and ``checks`` paths are relative to the pipeline root; a check is ``(path, version)``
    and fails the whole step when the node is gone or at another version. ``manifest`` is the manifest
    written by a commit (also among ``creates`` as ``checkpoints/<epoch>``). ``reported``: acks whose
    rejection this step records (markers among ``creates``; the backend tells their nodes). Counters
    for metrics: ``kind`` and ``rejected_acks`` / ``shed``.
    """

    kind: str
    control: ControlState
    creates: tuple[tuple[str, bytes], ...] = ()
    manifest: Manifest | None = None
    rejected_acks: tuple[tuple[EpochAck, str], ...] = ()
    decision: Decision | None = None
    shed: tuple[int, ...] = ()
    checks: tuple[tuple[str, int], ...] = ()
    reported: tuple[tuple[EpochAck, str], ...] = ()


@dataclass(frozen=True)
class AckVerdict:
    """``reason`` is "" for a valid ack. ``reportable``: the ack comes from the live, current boot of
    an owner (identity checks passed) but its content is invalid, so its node must be told."""

    ack: EpochAck
    reason: str
    reportable: bool = False


def _live_boots(members: Mapping[int, Member]) -> dict[int, str]:
    return {node: member.boot_id for node, member in members.items()}


def dead_owners(control: ControlState, members: Mapping[int, Member]) -> frozenset[int]:
    """Owners of the published version whose recorded boot id is not their live member's boot id."""
    live = _live_boots(members)
    return frozenset(n for n in control.snapshot.nodes() if live.get(n) != control.boot_of(n))


def unowned_cursor(ack: EpochAck, snapshot: AssignmentSnapshot) -> str:
    """Why a cursor of ``ack`` names a partition its node does not own in ``snapshot`` ("" if none).

    Each ``topic:partition`` key of ``ack.cursors[source]`` routes to a vnode by
    :func:`coordinator.routing.partition_vnode` with that source identity; its owner must be
    ``ack.node_id``. A key that is not ``topic:partition`` (canonical decimal partition) is invalid too.
    """
    for source, partitions in sorted(ack.cursors.items()):
        tps: list[tuple[str, int]] = []
        for key in partitions:
            topic, sep, number = key.rpartition(":")
            if not sep or not topic or not number.isascii() or not number.isdigit() \
                    or str(int(number)) != number:
                return f"cursor key {key!r} of {source!r} is not topic:partition"
            tps.append((topic, int(number)))
        try:
            groups = partitions_by_vnode(source, tps, snapshot.vnode_count)
        except RoutingError as exc:
            return f"cursors of {source!r} cannot be routed: {exc.message}"
        for vnode, members in groups.items():
            if snapshot.owners[vnode] != ack.node_id:
                topic, partition = members[0]
                return f"cursor {topic}:{partition} is not owned by node {ack.node_id} at version {snapshot.version}"
    return ""


def classify_ack(
    ack: EpochAck, control: ControlState, members: Mapping[int, Member], previous: Manifest | None
) -> AckVerdict:
    """Why ``ack`` is invalid for the open epoch of ``control`` ("" when it is valid).

    Identity first (epoch, version, owner, recorded and live boot id: not reportable, the sender is
    not the live owner), then content (every cursor owned at the epoch's version, none below
    ``previous``: reportable).
    """
    if control.open_epoch == 0 or ack.epoch != control.open_epoch:
        return AckVerdict(ack, "not the open epoch")
    if ack.assignment_version != control.version:
        return AckVerdict(ack, f"version {ack.assignment_version} is not the epoch's {control.version}")
    if ack.node_id not in control.snapshot.nodes():
        return AckVerdict(ack, "not an owner at the epoch's version")
    if control.boot_of(ack.node_id) != ack.boot_id:
        return AckVerdict(ack, "boot id is not the one recorded at the epoch's version")
    member = members.get(ack.node_id)
    if member is None or member.boot_id != ack.boot_id:
        return AckVerdict(ack, "boot id is not the member's live boot id")
    foreign = unowned_cursor(ack, control.snapshot)
    if foreign:
        return AckVerdict(ack, foreign, reportable=True)
    if previous is not None:
        for source, partitions in ack.cursors.items():
            before = previous.cursors.get(source, {})
            for tp, offset in partitions.items():
                if offset < before.get(tp, 0):
                    reason = f"cursor {source}/{tp} = {offset} regresses below {before[tp]}"
                    return AckVerdict(ack, reason, reportable=True)
    return AckVerdict(ack, "")


def merge_manifest(
    epoch: int, version: int, previous: Manifest | None, acks: Sequence[EpochAck]
) -> Manifest:
    """Previous cursors overlaid with each ack's cursors; outputs = union of the acks' outputs."""
    cursors: dict[str, dict[str, int]] = {}
    if previous is not None:
        cursors = {source: dict(parts) for source, parts in previous.cursors.items()}
    outputs: set[str] = set()
    for ack in sorted(acks, key=lambda a: a.node_id):
        for source, parts in ack.cursors.items():
            cursors.setdefault(source, {}).update(parts)
        outputs.update(ack.outputs)
    return Manifest(
        epoch=epoch,
        assignment_version=version,
        cursors=cursors,
        outputs=tuple(sorted(outputs)),
        acked_by=tuple(sorted((a.node_id, a.boot_id) for a in acks)),
    )


def _eligible(members: Mapping[int, Member]) -> list[int]:
    return sorted(n for n, m in members.items() if not m.leaving)


def shed_owners(
    owners: Sequence[int], dead: frozenset[int], members: Mapping[int, Member],
    strategy: str, vnode_load: Mapping[int, int],
) -> tuple[int, ...]:
    """Move only the vnodes of ``dead`` nodes; every other vnode keeps its owner.

    Orphans go to live non-leaving members (any live member when all are leaving; UNASSIGNED when no
    member is live): by rendezvous for that strategy, else heaviest first to the least loaded node.
    """
    result = [UNASSIGNED if o in dead else o for o in owners]
    candidates = _eligible(members) or sorted(members)
    orphans = [v for v, o in enumerate(owners) if o in dead]
    if not candidates or not orphans:
        return tuple(result)
    if strategy == "rendezvous":
        hrw = rendezvous(len(owners), candidates)
        for v in orphans:
            result[v] = hrw[v]
        return tuple(result)
    load = {n: 0 for n in candidates}
    count = {n: 0 for n in candidates}
    for v, o in enumerate(result):
        if o in load:
            load[o] += vnode_load.get(v, 0)
            count[o] += 1
    for v in sorted(orphans, key=lambda v: (-vnode_load.get(v, 0), v)):
        node = min(candidates, key=lambda n: (load[n], count[n], n))
        result[v] = node
        load[node] += vnode_load.get(v, 0)
        count[node] += 1
    return tuple(result)


def _boots_for(owners: Sequence[int], members: Mapping[int, Member]) -> tuple[tuple[int, str], ...]:
    return tuple(sorted((n, members[n].boot_id) for n in set(owners) - {UNASSIGNED} if n in members))


def _publish(
    control: ControlState, owners: Sequence[int], members: Mapping[int, Member], token: int, **changes: Any
) -> ControlState:
    snapshot = control.snapshot.next(control.version + 1, owners)
    boots = _boots_for(owners, members)
    # A dead owner kept by an abort keeps its old (now stale) boot so a later step sheds it.
    kept = dict(boots)
    for node in snapshot.nodes():
        if node not in kept and control.boot_of(node) is not None:
            kept[node] = control.boot_of(node)  # type: ignore[assignment]
    return replace(control, snapshot=snapshot, boots=tuple(sorted(kept.items())), leader_token=token, **changes)


def _decide(
    control: ControlState, outcome: RoundOutcome, manifest_epoch: int, members: Mapping[int, Member],
    token: int, **changes: Any,
) -> tuple[ControlState, Decision, tuple[str, bytes]]:
    assert control.round is not None
    r = control.round
    decision = Decision(r.drain_id, outcome, manifest_epoch)
    owners = r.target_owners if outcome is RoundOutcome.COMMIT else control.snapshot.owners
    new = _publish(
        control, owners, members, token, round=None, manifest_epoch=manifest_epoch,
        decisions=(control.decisions + (decision,))[-RECENT_DECISIONS:], **changes,
    )
    path = f"rounds/{round_id(r.drain_id.target_version)}/decision"
    return new, decision, (path, json.dumps(decision.to_dict(), separators=(",", ":")).encode())


def next_step(view: View, config: CoordinatorConfig, token: int) -> Step | None:
    """The leader's next action given ``view`` (see the module docstring), or None to wait.

    ``token`` is the leader's fencing token (recorded in every register it writes).
    """
    members = view.members
    control = view.control
    if control is None:
        eligible = _eligible(members)
        if not eligible:
            return None
        initial = AssignmentSnapshot.initial(config.vnode_count)
        owners = place(config.placement, initial.owners, eligible, view.vnode_load)
        snapshot = initial.next(1, owners)
        first = ControlState(
            snapshot=snapshot, boots=_boots_for(owners, members), last_commit_ms=view.now_ms,
            leader_token=token,
        )
        return Step("publish", first)

    dead = dead_owners(control, members)
    previous = view.latest_manifest

    # 1. The open epoch.
    if control.open_epoch:
        epoch = control.open_epoch
        verdicts = [classify_ack(a, control, members, previous) for a in view.acks]
        valid = {v.ack.node_id: v.ack for v in verdicts if not v.reason}
        rejected = tuple((v.ack, v.reason) for v in verdicts if v.reason)
        required = control.snapshot.nodes() - dead
        if not required <= valid.keys():
            return _report_rejections(view, control, verdicts, token)
        checks: tuple[tuple[str, int], ...] = ()
        if view.member_checks is not None:
            if not required <= view.member_checks.keys():
                return None  # a member entry without its election node yet: its liveness cannot be fenced
            checks = tuple(c for n in sorted(required) for c in view.member_checks[n])
        manifest = merge_manifest(epoch, control.version, previous, [valid[n] for n in sorted(required)])
        creates: list[tuple[str, bytes]] = [(f"checkpoints/{epoch_name(epoch)}", manifest.to_json())]
        base = replace(
            control, open_epoch=0, last_epoch=epoch, last_commit_ms=view.now_ms, leader_token=token,
        )
        r = control.round
        if r is not None and r.cut_epoch == epoch and not _round_failed(control, dead, members) \
                and view.now_ms < r.deadline_ms:
            new, decision, decision_node = _decide(base, RoundOutcome.COMMIT, epoch, members, token)
            creates.append(decision_node)
            return Step("commit_epoch", new, tuple(creates), manifest, rejected, decision, checks=checks)
        return Step("commit_epoch", base, tuple(creates), manifest, rejected, checks=checks)

    # 2. The running round.
    if control.round is not None:
        r = control.round
        if _round_failed(control, dead, members) or view.now_ms >= r.deadline_ms:
            new, decision, decision_node = _decide(
                control, RoundOutcome.ABORT, control.last_epoch, members, token
            )
            return Step("decide", new, (decision_node,), decision=decision)
        if r.cut_epoch == 0:
            ready = all((p, control.boot_of(p)) in view.ready for p in r.participants)
            if ready:
                epoch = control.last_epoch + 1
                new = replace(control, open_epoch=epoch, round=replace(r, cut_epoch=epoch), leader_token=token)
                return Step("open_epoch", new, _epoch_creates(epoch, control.version))
        # Waiting for drain receipts: ordinary epochs continue (below).
        return _epoch_timer(view, control, config, token)

    # 3. Dead owners: move their vnodes without a drain.
    if dead:
        owners = shed_owners(control.snapshot.owners, dead, members, config.placement, view.vnode_load)
        new = _publish(control, owners, members, token, manifest_epoch=control.last_epoch)
        # _publish keeps stale boots only for owners still present; dead ones are gone from owners.
        return Step("shed", new, shed=tuple(sorted(dead)))

    # 4. Membership change: a round (or a direct publication when no live owner loses anything).
    eligible = _eligible(members)
    if eligible:
        target = place(config.placement, control.snapshot.owners, eligible, view.vnode_load)
    else:
        target = (UNASSIGNED,) * control.snapshot.vnode_count
    if target != control.snapshot.owners:
        participants = tuple(sorted({
            old for old, new in zip(control.snapshot.owners, target) if old != new and old != UNASSIGNED
        }))
        if not participants:
            new = _publish(control, target, members, token, manifest_epoch=control.last_epoch)
            return Step("publish", new)
        drain_id = AssignmentDrainId.for_round(control.snapshot, target, token)
        r = RoundState(
            drain_id=drain_id, target_owners=tuple(target),
            deadline_ms=view.now_ms + int(config.round_deadline * 1000), leader_token=token,
            participants=participants,
        )
        rid = round_id(drain_id.target_version)
        record = json.dumps({
            "predecessor": drain_id.predecessor_version, "target": drain_id.target_version,
            "digest": drain_id.digest, "leader_token": token, "target_owners": list(target),
            "participants": list(participants), "deadline_ms": r.deadline_ms,
        }, separators=(",", ":")).encode()
        new = replace(control, round=r, leader_token=token)
        return Step("start_round", new, ((f"rounds/{rid}", record), (f"rounds/{rid}/ready", b"")))

    # 5. The epoch timer.
    return _epoch_timer(view, control, config, token)


def _report_rejections(
    view: View, control: ControlState, verdicts: Sequence[AckVerdict], token: int
) -> Step | None:
    """A ``reject_acks`` step creating the missing markers of reportable rejections (None: none)."""
    folder = f"epochs/{epoch_name(control.open_epoch)}/rejected"
    reports = tuple(
        (v.ack, v.reason) for v in verdicts if v.reportable and rejection_name(v.ack) not in view.rejections
    )
    if not reports:
        return None
    creates = tuple(
        (f"{folder}/{rejection_name(ack)}", json.dumps({"reason": reason}, separators=(",", ":")).encode())
        for ack, reason in reports
    )
    return Step("reject_acks", replace(control, leader_token=token), creates, rejected_acks=reports,
                reported=reports)


def _round_failed(control: ControlState, dead: frozenset[int], members: Mapping[int, Member]) -> bool:
    """A predecessor owner is dead, or a node that only gains vnodes is no longer a member."""
    r = control.round
    if r is None:
        return False
    gaining = frozenset(r.target_owners) - {UNASSIGNED} - control.snapshot.nodes()
    return bool(control.snapshot.nodes() & dead) or any(n not in members for n in gaining)


def _epoch_creates(epoch: int, version: int) -> tuple[tuple[str, bytes], ...]:
    name = epoch_name(epoch)
    data = json.dumps({"epoch": epoch, "assignment_version": version}, separators=(",", ":")).encode()
    return ((f"epochs/{name}", data), (f"epochs/{name}/acks", b""), (f"epochs/{name}/rejected", b""))


def _epoch_timer(view: View, control: ControlState, config: CoordinatorConfig, token: int) -> Step | None:
    if not control.snapshot.nodes():
        return None
    if view.now_ms < control.last_commit_ms + int(config.checkpoint_interval * 1000):
        return None
    epoch = control.last_epoch + 1
    new = replace(control, open_epoch=epoch, leader_token=token)
    return Step("open_epoch", new, _epoch_creates(epoch, control.version))


def next_wakeup_ms(control: ControlState | None, config: CoordinatorConfig) -> int | None:
    """The wall-clock time (ms) at which :func:`next_step` may act without any new input."""
    if control is None:
        return None
    times = []
    if control.round is not None:
        times.append(control.round.deadline_ms)
    if control.open_epoch == 0 and control.snapshot.nodes():
        times.append(control.last_commit_ms + int(config.checkpoint_interval * 1000))
    return min(times) if times else None


# ---- the node side: turning register changes into events ---------------------------------------


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
