"""The pure round and epoch state machine shared by every coordinator backend.

The whole control state of a pipeline lives in one register, :class:`ControlState` (the ZooKeeper
``assignment`` node; defined in :mod:`laminar_kafka.coordinator.state`). The leader reads a :class:`View`
(register + its version, live members and the fences of their memberships, acks and rejection
markers of the open epoch, drain receipts of the running round, vnode loads, latest manifest) and asks
:func:`next_step` what to do. A :class:`Step` (:mod:`laminar_kafka.coordinator.engine.steps`) is the new register value
plus typed intents (open an epoch, write a manifest, start a round, create a decision, record a
rejection) and the member fences it relies on; a store (:mod:`laminar_kafka.coordinator.store`) executes it as ONE
compare-and-set that also checks the leader's election, so a step computed from a stale view, or by a
deposed leader, is rejected as a whole. This module names no path and does no I/O.

Decisions, in priority order (each call returns at most one step):

1. An open epoch E (bound to the published version V) commits once every *live* owner of V has a
   valid ack. Valid: ack for E at V, from an owner of V whose boot id is both the one recorded when V
   was published and its live member's boot id, whose cursors name only partitions that route to a
   vnode it owns at V, and with no cursor below the previous manifest. Others are returned in
   ``Step.rejected_acks``. The manifest overlays the previous manifest's cursors with the valid acks'
   cursors (before the first commit, the previous manifest is the pinned initial manifest, epoch 0);
   outputs are the union of the valid acks' outputs. A dead owner's partitions keep their last durable
   cursor. The commit step fences the membership of every node whose ack it relies on
   (``View.member_fences``), so a node that lost its membership and rejoined after the view was read
   cannot have its old boot's ack committed. If E is the cut epoch of the running round, no
   participant died and the deadline has not passed, the same step creates the round's COMMIT
   decision and publishes V+1 = target (manifest_epoch = E). While an epoch is open nothing else
   happens, except: an ack of an owner's live, current boot that is rejected for its content (a foreign
   partition, a regressing cursor) blocks the commit, so a ``reject_acks`` step first records the
   rejection, create-once (:class:`RecordRejection`, keyed by the ack's content: see
   :func:`rejection_name`). The node is told and sends a
   replacement ack; the leader classifies the latest content on every pass (:func:`classify_ack`
   and :func:`merge_manifest` of :mod:`laminar_kafka.coordinator.engine.acks`), so a marker of an older
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
   The leader passes the interval :func:`epoch_interval` gives: the quiet one while epochs change
   nothing and no node asked for one. With a freshness target there is no clock: E+1 opens when a
   node asked for an epoch after E (nodes ask by need), and never while none asks.

This module does no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.acks import AckVerdict, classify_ack, merge_manifest
from laminar_kafka.coordinator.engine.steps import (  # re-exported here
    CreateDecision,
    MemberFence,
    OpenEpoch,
    RecordRejection,
    StartRound,
    Step,
    StepKind,
    View,
    WriteManifest,
)
from laminar_kafka.coordinator.engine.tracker import EventTracker  # re-exported here
from laminar_kafka.coordinator.layout import (  # the node names, re-exported here
    ack_name,
    epoch_name,
    parse_ack_name,
    parse_rejection_name,
    rejection_name,
)
from laminar_kafka.coordinator.state import RECENT_DECISIONS, ControlState, Decision, RoundState  # re-exported here
from laminar_kafka.coordinator.values import Member, RoundOutcome
from laminar_kafka.coordinator.vnodes.placement import place, rendezvous
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

__all__ = [
    "RECENT_DECISIONS",
    "RoundState",
    "Decision",
    "ControlState",
    "View",
    "Step",
    "MemberFence",
    "dead_owners",
    "shed_owners",
    "next_step",
    "next_wakeup_ms",
    "epoch_interval",
    "epoch_asked",
    "QUIET_AFTER_EPOCHS",
    "EventTracker",
    "epoch_name",
    "ack_name",
    "parse_ack_name",
    "rejection_name",
    "parse_rejection_name",
    ]


#: committed epochs in a row that changed no cursor before the leader waits the quiet interval
QUIET_AFTER_EPOCHS = 3


def _live_boots(members: Mapping[int, Member]) -> dict[int, str]:
    return {node: member.boot_id for node, member in members.items()}


def dead_owners(control: ControlState, members: Mapping[int, Member]) -> frozenset[int]:
    """Owners of the published version whose recorded boot id is not their live member's boot id."""
    live = _live_boots(members)
    return frozenset(n for n in control.snapshot.nodes() if live.get(n) != control.boot_of(n))


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
        recorded = control.boot_of(node)
        if node not in kept and recorded is not None:
            kept[node] = recorded
    return replace(control, snapshot=snapshot, boots=tuple(sorted(kept.items())), leader_token=token, **changes)


def _decide(
    control: ControlState, outcome: RoundOutcome, manifest_epoch: int, members: Mapping[int, Member],
    token: int, **changes: Any,
) -> tuple[ControlState, CreateDecision]:
    assert control.round is not None
    r = control.round
    decision = Decision(r.drain_id, outcome, manifest_epoch)
    owners = r.target_owners if outcome is RoundOutcome.COMMIT else control.snapshot.owners
    new = _publish(
        control, owners, members, token, round=None, manifest_epoch=manifest_epoch,
        decisions=(control.decisions + (decision,))[-RECENT_DECISIONS:], **changes,
    )
    return new, CreateDecision(decision)


def next_step(view: View, config: CoordinatorConfig, token: int) -> Step | None:
    """The leader's next action given ``view`` (see the module docstring), or None to wait.

    ``token`` is the leader's fencing token (recorded in every register it writes). The phases are
    tried in the module docstring's priority order; an open epoch and a running round each decide
    alone (their None means wait), the later phases fall through to the epoch timer.
    """
    control = view.control
    if control is None:
        return _first_publication(view, config, token)
    dead = dead_owners(control, view.members)
    if control.open_epoch:
        return _open_epoch_step(view, control, dead, token)
    if control.round is not None:
        return _running_round_step(view, control, config, dead, token)
    if dead:
        return _shed_step(view, control, config, dead, token)
    membership = _membership_step(view, control, config, token)
    if membership is not None:
        return membership
    return _epoch_timer(view, control, config, token)


def _first_publication(view: View, config: CoordinatorConfig, token: int) -> Step | None:
    """No register yet: publish version 1 over the eligible members (None while there are none)."""
    members = view.members
    eligible = _eligible(members)
    if not eligible:
        return None
    initial = AssignmentSnapshot.initial(config.vnode_count)
    owners = place(config.placement, initial.owners, eligible, view.vnode_load)
    snapshot = initial.next(1, owners)
    # Epochs continue after the pinned manifest's: 0 for a new pipeline, the seed's epoch S for a
    # control state reseeded from the lake (no epoch number is used twice).
    base = view.latest_manifest.epoch if view.latest_manifest is not None else 0
    first = ControlState(
        snapshot=snapshot, boots=_boots_for(owners, members), last_commit_ms=view.now_ms,
        leader_token=token, last_epoch=base, manifest_epoch=base,
    )
    return Step(StepKind.PUBLISH, first)


def _open_epoch_step(view: View, control: ControlState, dead: frozenset[int], token: int) -> Step | None:
    """1. The open epoch: commit it once every live owner has a valid ack (with the round's COMMIT
    decision when it is the round's cut epoch), else record missing rejections, else wait (None)."""
    members = view.members
    previous = view.latest_manifest
    epoch = control.open_epoch
    verdicts = [classify_ack(a, control, members, previous) for a in view.acks]
    valid = {v.ack.node_id: v.ack for v in verdicts if not v.reason}
    rejected = tuple((v.ack, v.reason) for v in verdicts if v.reason)
    required = control.snapshot.nodes() - dead
    if not required <= valid.keys():
        return _report_rejections(view, control, verdicts, token)
    fences: tuple[MemberFence, ...] = ()
    if view.member_fences is not None:
        if not required <= view.member_fences.keys():
            return None  # a member entry without its election node yet: its liveness cannot be fenced
        fences = tuple(view.member_fences[n] for n in sorted(required))
    manifest = merge_manifest(epoch, control.version, previous, [valid[n] for n in sorted(required)])
    write = WriteManifest(manifest)
    committed = replace(
        control, open_epoch=0, last_epoch=epoch, last_commit_ms=view.now_ms, leader_token=token,
    )
    r = control.round
    if r is not None and r.cut_epoch == epoch and not _round_failed(control, dead, members) \
            and view.now_ms < r.deadline_ms:
        new, decide = _decide(committed, RoundOutcome.COMMIT, epoch, members, token)
        return Step(StepKind.COMMIT_EPOCH, new, (write, decide), rejected, fences=fences)
    return Step(StepKind.COMMIT_EPOCH, committed, (write,), rejected, fences=fences)


def _running_round_step(
    view: View, control: ControlState, config: CoordinatorConfig, dead: frozenset[int], token: int
) -> Step | None:
    """2. The running round (``control.round`` is set): abort it, open its cut epoch once every
    participant reported ready, or let ordinary epochs continue while drain receipts are awaited."""
    r = control.round
    assert r is not None
    if _round_failed(control, dead, view.members) or view.now_ms >= r.deadline_ms:
        new, decide = _decide(control, RoundOutcome.ABORT, control.last_epoch, view.members, token)
        return Step(StepKind.DECIDE, new, (decide,))
    if r.cut_epoch == 0:
        ready = all((p, control.boot_of(p)) in view.ready for p in r.participants)
        if ready:
            epoch = control.last_epoch + 1
            new = replace(control, open_epoch=epoch, round=replace(r, cut_epoch=epoch), leader_token=token)
            return Step(StepKind.OPEN_EPOCH, new, (OpenEpoch(epoch, control.version),))
    # Waiting for drain receipts: ordinary epochs continue.
    return _epoch_timer(view, control, config, token)


def _shed_step(
    view: View, control: ControlState, config: CoordinatorConfig, dead: frozenset[int], token: int
) -> Step:
    """3. Dead owners (``dead`` is not empty): move their vnodes without a drain."""
    owners = shed_owners(control.snapshot.owners, dead, view.members, config.placement, view.vnode_load)
    new = _publish(control, owners, view.members, token, manifest_epoch=control.last_epoch)
    # _publish keeps stale boots only for owners still present; dead ones are gone from owners.
    return Step(StepKind.SHED, new, shed=tuple(sorted(dead)))


def _membership_step(view: View, control: ControlState, config: CoordinatorConfig, token: int) -> Step | None:
    """4. Membership change: a round, or a direct publication when no live owner loses a vnode
    (None when the target placement is the published one)."""
    members = view.members
    eligible = _eligible(members)
    if eligible:
        target = place(config.placement, control.snapshot.owners, eligible, view.vnode_load)
    else:
        target = (UNASSIGNED,) * control.snapshot.vnode_count
    if target == control.snapshot.owners:
        return None
    participants = tuple(sorted({
        old for old, new in zip(control.snapshot.owners, target, strict=True) if old != new and old != UNASSIGNED
    }))
    if not participants:
        published = _publish(control, target, members, token, manifest_epoch=control.last_epoch)
        return Step(StepKind.PUBLISH, published)
    drain_id = AssignmentDrainId.for_round(control.snapshot, target, token)
    r = RoundState(
        drain_id=drain_id, target_owners=tuple(target),
        deadline_ms=view.now_ms + int(config.round_deadline * 1000), leader_token=token,
        participants=participants,
    )
    started = replace(control, round=r, leader_token=token)
    return Step(StepKind.START_ROUND, started, (StartRound(r),))


def _report_rejections(
    view: View, control: ControlState, verdicts: Sequence[AckVerdict], token: int
) -> Step | None:
    """A ``reject_acks`` step creating the missing markers of reportable rejections (None: none)."""
    reports = tuple(
        (v.ack, v.reason) for v in verdicts if v.reportable and rejection_name(v.ack) not in view.rejections
    )
    if not reports:
        return None
    intents = tuple(RecordRejection(ack, reason) for ack, reason in reports)
    return Step(StepKind.REJECT_ACKS, replace(control, leader_token=token), intents, rejected_acks=reports)


def _round_failed(control: ControlState, dead: frozenset[int], members: Mapping[int, Member]) -> bool:
    """A predecessor owner is dead, or a node that only gains vnodes is no longer a member."""
    r = control.round
    if r is None:
        return False
    gaining = frozenset(r.target_owners) - {UNASSIGNED} - control.snapshot.nodes()
    return bool(control.snapshot.nodes() & dead) or any(n not in members for n in gaining)


def _epoch_timer(view: View, control: ControlState, config: CoordinatorConfig, token: int) -> Step | None:
    """5. The epoch timer: open epoch E+1 once some vnode is owned and the checkpoint interval has
    passed since the last commit, or, with a freshness target (no clock), once a node asked for an
    epoch after the latest (:func:`epoch_asked`); None otherwise."""
    if not control.snapshot.nodes():
        return None
    if config.freshness_target:
        if not epoch_asked(control, view.epoch_wanted_after):
            return None
    elif view.now_ms < control.last_commit_ms + int(config.checkpoint_interval * 1000):
        return None
    epoch = control.last_epoch + 1
    new = replace(control, open_epoch=epoch, leader_token=token)
    return Step(StepKind.OPEN_EPOCH, new, (OpenEpoch(epoch, control.version),))


def epoch_asked(control: ControlState, epoch_wanted_after: int) -> bool:
    """Whether a node asked for an epoch after the latest one (it holds rows no epoch covers). Pure."""
    return epoch_wanted_after >= control.last_epoch


def epoch_interval(config: CoordinatorConfig, control: ControlState | None, quiet_epochs: int,
                   epoch_wanted_after: int) -> float:
    """The checkpoint interval the epoch timer waits now (seconds).

    ``config.quiet_checkpoint_interval`` once the last :data:`QUIET_AFTER_EPOCHS` committed epochs
    (``quiet_epochs``, counted by the leader) changed no cursor, unless a node asked for an epoch
    after the last one (``epoch_wanted_after`` >= ``control.last_epoch``: it holds rows no epoch
    covers); ``config.checkpoint_interval`` otherwise, or when the quiet interval is off (0).
    An idle pipeline then costs an epoch per quiet interval, and a trickle's first rows wait for
    the node's ask instead of the quiet interval. Pure."""
    quiet = config.quiet_checkpoint_interval
    if not quiet or quiet_epochs < QUIET_AFTER_EPOCHS or control is None:
        return config.checkpoint_interval
    if epoch_asked(control, epoch_wanted_after):
        return config.checkpoint_interval
    return quiet


def next_wakeup_ms(control: ControlState | None, config: CoordinatorConfig) -> int | None:
    """The wall-clock time (ms) at which :func:`next_step` may act without any new input (with a
    freshness target the epoch timer has no clock: only a node's ask, an input, opens an epoch)."""
    if control is None:
        return None
    times = []
    if control.round is not None:
        times.append(control.round.deadline_ms)
    if control.open_epoch == 0 and control.snapshot.nodes() and not config.freshness_target:
        times.append(control.last_commit_ms + int(config.checkpoint_interval * 1000))
    return min(times) if times else None
