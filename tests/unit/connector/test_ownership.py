"""Unit and property tests of the pure ownership / drain state machine (laminar_kafka.connector.ownership)."""
from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.connector.drain import DrainPhase
from laminar_kafka.connector.ownership import Ownership, route_partitions
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, PendingTarget
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.kafka_source import (
    DrainError,
    FatalError,
    SourceDrainOutcome,
    SourceDrainResolution,
    UnassignedVnodeError,
)

VNODES = 8
T = "t"
PARTS = [(T, p) for p in range(16)]
ROUTES = MappingProxyType({tp: tp[1] % VNODES for tp in PARTS})  # partition p -> vnode p % 8
COMMIT, ABORT = SourceDrainOutcome.COMMIT, SourceDrainOutcome.ABORT


def snap(*owner_maps: tuple[int, ...]) -> AssignmentSnapshot:
    snapshot = AssignmentSnapshot.initial(VNODES)
    for version, owners in enumerate(owner_maps, start=1):
        snapshot = snapshot.next(version, owners)
    return snapshot


ALL1 = (1,) * VNODES
HALF = (1, 1, 1, 1, 2, 2, 2, 2)


def started(snapshot: AssignmentSnapshot, node: int = 1) -> Ownership:
    own = Ownership.at(node, ROUTES, snapshot)
    return own.started(own.owned)


def round_to(snapshot: AssignmentSnapshot, target: tuple[int, ...]) -> tuple[AssignmentDrainId, PendingTarget]:
    drain_id = AssignmentDrainId.for_round(snapshot, target, 1)
    return drain_id, PendingTarget(drain_id, target)


def draining(
    snapshot: AssignmentSnapshot, target: tuple[int, ...], node: int = 1
) -> tuple[Ownership, AssignmentDrainId]:
    """Node ``node`` started at ``snapshot``, with the round to ``target`` begun (deadline 10, now 0)."""
    own = started(snapshot, node)
    drain_id, pending = round_to(snapshot, target)
    own, _ = own.begin_drain(drain_id, 10.0, 0.0, snapshot, pending)
    return own, drain_id


def cursor_of(own: Ownership, base: int = 100) -> dict[tuple[str, int], int]:
    return {tp: base + tp[1] for tp in own.live}


def test_route_partitions_uses_routing_abi() -> None:
    routes = route_partitions("orders_source", [("orders.v1", p) for p in range(8)], 256)
    assert [routes[("orders.v1", p)] for p in range(8)] == [106, 108, 234, 55, 225, 196, 217, 62]


def test_initial_state_and_readiness() -> None:
    s1 = snap(HALF)
    own = Ownership.at(1, ROUTES, s1)
    assert own.owned == {tp for tp in PARTS if tp[1] % 8 < 4}
    assert not own.is_ready(s1) and own.pending == own.owned
    own = own.started(own.owned)
    assert own.is_ready(s1) and own.phase is DrainPhase.IDLE
    assert not own.is_ready(snap(HALF, ALL1))  # published moved on


def test_commit_round_full_cycle() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    drain_id, pending = round_to(s1, HALF)
    own, began = own.begin_drain(drain_id, 10.0, 0.0, s1, pending)
    assert began and own.phase is DrainPhase.DRAINING
    revoked = {tp for tp in PARTS if tp[1] % 8 >= 4}
    assert own.drain is not None and own.drain.revoked == revoked
    assert own.begin_drain(drain_id, 10.0, 0.0, s1, pending) == (own, False)  # same request: no-op
    assert not own.ready(drain_id)
    cursor = cursor_of(own)
    own = own.boundary_paused(drain_id, {tp: cursor[tp] for tp in revoked})
    own = own.boundary_consumed(drain_id, cursor, 1.0)
    assert own.ready(drain_id) and dict(own.drain.cut) == {tp: cursor[tp] for tp in sorted(revoked)}
    assert own.check_cut(cursor) is own
    plan = own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 1.0, 5.0, {})
    assert plan is not None and plan.release == revoked and not plan.acquire
    own = own.finished(plan, {})
    assert own.version == 2 and own.owned == own.live == set(PARTS) - revoked
    assert own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 9.0, 5.0, None) is None  # idempotent
    with pytest.raises(DrainError, match="resolved"):
        own.plan_finish(SourceDrainResolution(drain_id, ABORT), 1.0, 5.0, None)
    assert not own.is_ready(s1)  # pinned ahead of the published predecessor
    assert own.plan_reconcile(s1, None) is None
    s2 = s1.next(2, HALF)
    assert own.is_ready(s2)


def test_gaining_node_is_ready_at_once_and_acquires_at_handoff() -> None:
    s1 = snap(HALF)
    target = (1, 1, 2, 2, 2, 2, 2, 2)
    own, drain_id = draining(s1, target, 2)
    assert own.ready(drain_id) and not own.drain.revoked
    gained = {tp for tp in PARTS if tp[1] % 8 in (2, 3)}
    with pytest.raises(DrainError, match="no handoff cursor"):
        own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 0.0, 5.0, {})
    handoff = {tp: 7 for tp in PARTS}
    plan = own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 0.0, 5.0, handoff)
    assert plan is not None and dict(plan.acquire) == {tp: 7 for tp in sorted(gained)}
    own = own.finished(plan, {tp: 7 for tp in gained})
    assert own.is_ready(s1.next(2, target))


def test_commit_without_handoff_leaves_gained_pending_until_offered() -> None:
    s1 = snap(HALF)
    target = (1, 1, 2, 2, 2, 2, 2, 2)
    own, drain_id = draining(s1, target, 2)
    plan = own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 0.0, 5.0, None)
    own = own.finished(plan, {})
    s2 = s1.next(2, target)
    assert not own.is_ready(s2) and own.pending
    assert own.plan_reconcile(s2, None) is None
    step = own.plan_reconcile(s2, (2, {}))
    assert step is not None and set(step.acquire) == own.pending and set(step.acquire.values()) == {None}
    own = own.reconciled(step, dict.fromkeys(step.acquire, 0))
    assert own.is_ready(s2)


def test_commit_before_ready_deadline_and_contradicting_handoff_are_fatal() -> None:
    s1 = snap(ALL1)
    own, drain_id = draining(s1, HALF)
    with pytest.raises(FatalError, match="before the drain was ready"):
        own.plan_finish(SourceDrainResolution(drain_id, COMMIT), 1.0, 5.0, {})
    with pytest.raises(FatalError, match="deadline"):
        own.plan_finish(SourceDrainResolution(drain_id, ABORT), 6.0, 5.0, None)
    cursor = cursor_of(own)
    ready = own.boundary_consumed(drain_id, cursor, 1.0)
    bad = {tp: o + 1 for tp, o in ready.drain.cut.items()}
    with pytest.raises(FatalError, match="contradict"):
        ready.plan_finish(SourceDrainResolution(drain_id, COMMIT), 1.0, 5.0, bad)


def test_deadline_passes_before_the_boundary() -> None:
    s1 = snap(ALL1)
    own, drain_id = draining(s1, HALF)
    assert own.expire(9.0) is own
    failed = own.expire(10.5)
    assert failed.phase is DrainPhase.FAILED
    with pytest.raises(FatalError, match="deadline"):
        failed.ready(drain_id)
    late = own.boundary_consumed(drain_id, cursor_of(own), 11.0)
    assert late.phase is DrainPhase.FAILED
    with pytest.raises(FatalError):
        late.plan_finish(SourceDrainResolution(drain_id, ABORT), 11.0, 20.0, None)


def test_begin_drain_rejections() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    drain_id, pending = round_to(s1, HALF)
    with pytest.raises(DrainError, match="pending"):
        own.begin_drain(drain_id, 10.0, 0.0, s1, None)
    with pytest.raises(DrainError, match="deadline"):
        own.begin_drain(drain_id, 1.0, 2.0, s1, pending)
    s2 = s1.next(2, ALL1)
    with pytest.raises(DrainError, match="stale"):
        own.begin_drain(drain_id, 10.0, 0.0, s2, pending)
    unreconciled = Ownership.at(1, ROUTES, s1)
    with pytest.raises(DrainError, match="reconciled"):
        unreconciled.begin_drain(drain_id, 10.0, 0.0, s1, pending)
    active, _ = own.begin_drain(drain_id, 10.0, 0.0, s1, pending)
    other = AssignmentDrainId(1, 2, drain_id.digest ^ 1)
    with pytest.raises(DrainError, match="active"):
        active.begin_drain(other, 10.0, 0.0, s1, PendingTarget(other, HALF))
    with pytest.raises(DrainError, match="stale"):
        active.ready(other)


def test_abort_before_and_after_the_boundary() -> None:
    s1 = snap(ALL1)
    own, drain_id = draining(s1, HALF)
    with pytest.raises(DrainError, match="pause"):
        own.plan_finish(SourceDrainResolution(drain_id, ABORT), 1.0, 5.0, None)
    positions = {tp: 50 for tp in own.drain.revoked}
    paused = own.boundary_paused(drain_id, positions)
    plan = paused.plan_finish(SourceDrainResolution(drain_id, ABORT), 1.0, 5.0, None)
    assert dict(plan.resume) == positions and not plan.release and not plan.acquire
    aborted = paused.finished(plan, {})
    assert aborted.owned == aborted.live == set(PARTS) and aborted.version == 1
    # a boundary consumed after the abort changes nothing
    assert aborted.boundary_consumed(drain_id, cursor_of(aborted), 2.0) == aborted
    s2 = s1.next(2, ALL1)  # abort publishes v+1 with the predecessor owners: only the pin moves
    step = aborted.plan_reconcile(s2, None)
    assert step is not None and not step.needs_consumer
    assert aborted.reconciled(step, {}).is_ready(s2)


def test_cut_that_differs_from_the_pause_or_moves_later_fails() -> None:
    s1 = snap(ALL1)
    own, drain_id = draining(s1, HALF)
    cursor = cursor_of(own)
    paused = own.boundary_paused(drain_id, {tp: cursor[tp] + 1 for tp in own.drain.revoked})
    assert paused.boundary_consumed(drain_id, cursor, 1.0).phase is DrainPhase.FAILED
    ready = own.boundary_consumed(drain_id, cursor, 1.0)
    moved = dict(cursor)
    moved[next(iter(ready.drain.revoked))] += 1
    assert ready.check_cut(moved).phase is DrainPhase.FAILED


def test_self_other_self_between_two_looks_needs_an_explicit_cursor() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    away = (1, 1, 1, 1, 1, 1, 2, 1)
    s3 = s1.next(2, away).next(3, ALL1)  # vnode 6 left and came back
    step = own.plan_reconcile(s3, None)
    assert step is not None
    back = {tp for tp in PARTS if tp[1] % 8 == 6}
    assert step.release == back and not step.acquire and step.owned == set(PARTS)
    own = own.reconciled(step, {})
    assert not own.is_ready(s3) and own.pending == back
    step = own.plan_reconcile(s3, (3, {tp: 9 for tp in back}))
    assert dict(step.acquire) == {tp: 9 for tp in sorted(back)} and not step.release
    assert own.reconciled(step, {tp: 9 for tp in back}).is_ready(s3)


def test_conflicting_owner_maps_under_one_version_fail() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    other = AssignmentSnapshot(1, HALF, (1,) * VNODES)
    with pytest.raises(FatalError, match="conflict"):
        own.is_ready(other)


#: The coordinator assigns every vnode or none (see test_owner_maps_with_unassigned_vnodes_*).
assigned_maps = st.lists(st.integers(1, 3), min_size=VNODES, max_size=VNODES).map(tuple)
owner_maps = st.one_of(st.just((0,) * VNODES), assigned_maps)


@settings(max_examples=200, deadline=None)
@given(st.lists(owner_maps, min_size=1, max_size=6), st.integers(1, 3), st.data())
def test_reconciliation_reads_exactly_the_owned_partitions(maps, node, data) -> None:  # type: ignore[no-untyped-def]
    """Whatever versions are skipped, after reconciling with explicit cursors the live set is the owned
    set of the published map; no kept partition ever changed owner in between."""
    snapshot = AssignmentSnapshot.initial(VNODES).next(1, maps[0])
    own = started(snapshot, node)
    for owners in maps[1:]:
        previous = own
        snapshot = snapshot.next(snapshot.version + 1, owners)
        if data.draw(st.booleans()):
            continue  # this node does not look at this version
        step = own.plan_reconcile(snapshot, (snapshot.version, {}))
        if step is None:
            assert own.is_ready(snapshot)
            continue
        kept = previous.live - step.release
        for tp in kept:
            assert snapshot.changed_at[ROUTES[tp]] <= previous.version
        own = own.reconciled(step, {tp: 0 for tp in step.acquire})
        assert own.is_ready(snapshot)
        assert own.live == own.owned_at(snapshot.owners)
        assert not (step.release & set(step.acquire)) or all(
            snapshot.changed_at[ROUTES[tp]] > previous.version for tp in step.release & set(step.acquire)
        )


@settings(max_examples=200, deadline=None)
@given(assigned_maps, owner_maps, st.integers(1, 3), st.booleans(), st.booleans())
def test_drain_partitions_nodes_cleanly(before, after, node, commit, abort_early) -> None:  # type: ignore[no-untyped-def]
    """A round revokes exactly owned-now minus owned-under-target; commit yields the target set, abort
    the predecessor set, and the cut covers exactly the revoked partitions."""
    s1 = AssignmentSnapshot.initial(VNODES).next(1, before)
    own, drain_id = draining(s1, after, node)
    target_owned = own.owned_at(after)
    assert own.drain.revoked == own.owned - target_owned
    cursor = cursor_of(own)
    own = own.boundary_paused(drain_id, {tp: cursor[tp] for tp in own.drain.revoked}) if own.drain.revoked else own
    if not (abort_early and not commit):
        own = own.boundary_consumed(drain_id, cursor, 1.0)
        assert set(own.drain.cut) == own.drain.revoked
    outcome = COMMIT if commit else ABORT
    handoff = {**{tp: 3 for tp in PARTS}, **dict(own.drain.cut)}  # the durable manifest holds the cut
    plan = own.plan_finish(SourceDrainResolution(drain_id, outcome), 1.0, 5.0, handoff)
    own = own.finished(plan, dict(plan.acquire))  # type: ignore[arg-type]
    s2 = s1.next(2, after if commit else before)
    if not commit:
        own = own.reconciled(own.plan_reconcile(s2, None), {})
    assert own.is_ready(s2)
    assert own.live == own.owned_at(s2.owners)


# -- owner maps that leave routed vnodes unassigned -------------------------------------------------

PARTIAL = (1, 1, 0, 1, 2, 2, 2, 2)  # vnode 2 (partitions 2 and 10) has no owner; the others do


def test_owner_maps_with_unassigned_vnodes_are_rejected_at_start() -> None:
    with pytest.raises(UnassignedVnodeError, match="version 1") as caught:
        Ownership.at(1, ROUTES, snap(PARTIAL))
    assert caught.value.vnodes == (2,) and caught.value.version == 1


def test_all_unassigned_maps_are_accepted_and_give_nothing() -> None:
    before_first = AssignmentSnapshot.initial(VNODES)  # version 0: nothing published yet
    assert Ownership.at(1, ROUTES, before_first).owned == frozenset()
    nobody = snap(ALL1, (0,) * VNODES)  # no live member: nobody reads
    own = started(snap(ALL1))
    step = own.plan_reconcile(nobody, None)
    assert step is not None and step.release == own.live and not step.owned


def test_owner_maps_with_unassigned_vnodes_are_rejected_when_published() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    with pytest.raises(UnassignedVnodeError):
        own.plan_reconcile(snap(ALL1, PARTIAL), (2, {}))
    # a vnode that routes none of the known partitions may be unassigned only if no vnode has an owner
    sparse = MappingProxyType({(T, 0): 0})
    assert Ownership.at(1, sparse, snap((1,) + (0,) * (VNODES - 1))).owned == {(T, 0)}


def test_round_targets_with_unassigned_vnodes_are_refused() -> None:
    s1 = snap(ALL1)
    own = started(s1)
    drain_id, pending = round_to(s1, PARTIAL)
    with pytest.raises(DrainError, match="unassigned"):
        own.begin_drain(drain_id, 10.0, 0.0, s1, pending)


def test_new_partitions_on_unassigned_vnodes_are_rejected() -> None:
    published = snap((1, 1, 0, 1, 1, 1, 1, 1))  # vnode 2 routes no known partition yet
    own = Ownership.at(1, {tp: v for tp, v in ROUTES.items() if v != 2}, published).started(frozenset())
    with pytest.raises(UnassignedVnodeError):
        own.with_partitions({(T, 2): 2}, published)


# -- topology growth -------------------------------------------------------------------------------

NEW = {(T, p): p % VNODES for p in range(16, 24)}  # partitions added to the topic later


def test_new_partitions_become_owned_pending_and_are_acquired_at_offered_cursors() -> None:
    s1 = snap(HALF)
    own = started(s1, node=1)
    grown = own.with_partitions({**NEW, (T, 0): 0}, s1)  # a known partition is ignored
    mine = {tp for tp, v in NEW.items() if HALF[v] == 1}
    assert grown.owned == own.owned | mine and grown.pending == mine and grown.live == own.live
    assert grown.routes[(T, 16)] == 0 and len(grown.routes) == 24
    assert not grown.is_ready(s1)  # intake held until they are acquired
    assert grown.plan_reconcile(s1, None) is None  # waits for explicit cursors
    step = grown.plan_reconcile(s1, (1, {(T, 16): 42}))
    assert step is not None and step.version == 1 and not step.release
    assert dict(step.acquire) == {tp: (42 if tp == (T, 16) else None) for tp in sorted(mine)}
    done = grown.reconciled(step, {tp: 0 for tp in step.acquire})
    assert done.is_ready(s1) and done.owned == done.live
    assert grown.with_partitions(NEW, s1) == grown  # idempotent


def test_new_partitions_wait_while_a_round_runs_or_the_pin_lags() -> None:
    s1 = snap(HALF)
    own = started(s1, node=1)
    in_round, _ = draining(s1, ALL1)
    assert not in_round.can_route_more(s1)
    with pytest.raises(DrainError):
        in_round.with_partitions(NEW, s1)
    s2 = s1.next(2, ALL1)
    assert not own.can_route_more(s2)  # pinned to 1 while 2 is published: reconcile first
    assert own.can_route_more(s1)
    assert not own.fail("x").can_route_more(s1)


def test_a_node_that_owns_none_of_the_new_partitions_stays_ready() -> None:
    s1 = snap((1,) * 4 + (2,) * 4)
    own = started(s1, node=1)
    grown = own.with_partitions({(T, 40): 5, (T, 41): 6}, s1)
    assert grown.owned == own.owned and grown.is_ready(s1)
    later = s1.next(2, (2,) * 4 + (1,) * 4)  # the vnodes of the new partitions move here later
    step = grown.plan_reconcile(later, (2, {}))
    assert step is not None and {(T, 40), (T, 41)} <= set(step.acquire)


def test_a_settled_source_plans_nothing_at_its_version_and_an_unsettled_one_still_does() -> None:
    s1 = snap(HALF)
    own = started(s1)
    assert own.settled and own.plan_reconcile(s1, None) is None
    assert own._settled_memo is True  # computed once per value
    # live partitions the source lost (e.g. released but not re-acquired): at the same version the
    # plan still acquires them back when an offer for the version is there
    lost = next(iter(own.live))
    partial = Ownership.at(1, ROUTES, s1).started(own.owned - {lost})
    assert not partial.settled
    step = partial.plan_reconcile(s1, (1, {lost: 7}))
    assert step is not None and dict(step.acquire) == {lost: 7} and not step.release
    # an owner map that disagrees with the pinned ownership is still refused
    other = AssignmentSnapshot.initial(VNODES).next(1, ALL1)
    with pytest.raises(FatalError, match="two owner maps"):
        own.plan_reconcile(other, None)


def test_acquisition_needed_names_the_gained_partitions_of_the_published_version() -> None:
    s1 = snap(HALF)
    own = started(s1, 2)
    assert own.acquisition_needed(s1) is None  # reconciled: nothing waits
    s2 = snap(HALF, ALL1)  # node 2 loses everything: a release, no acquisition
    assert own.acquisition_needed(s2) is None
    gained = snap(HALF, (2,) * VNODES)
    version, partitions = own.acquisition_needed(gained)  # type: ignore[misc]
    assert version == 2 and partitions == {tp for tp in PARTS if tp[1] % 8 < 4}
    assert own.acquisition_needed(gained) == (version, partitions)  # a query: nothing changed
    step = own.plan_reconcile(gained, (2, {}))
    assert step is not None
    assert own.reconciled(step, dict.fromkeys(step.acquire, 0)).acquisition_needed(gained) is None


def test_acquisition_needed_is_none_while_failed_draining_or_given_a_rejected_map() -> None:
    s1 = snap(HALF)
    own = started(s1, 2)
    gained = snap(HALF, (2,) * VNODES)
    assert own.fail("boom").acquisition_needed(gained) is None
    in_round, _ = draining(s1, (2,) * VNODES, 2)
    assert in_round.acquisition_needed(gained) is None
    partial = snap(HALF, (2, 0, 2, 2, 2, 2, 2, 2))  # a routed vnode unassigned: plan_reconcile raises
    with pytest.raises(UnassignedVnodeError):
        own.plan_reconcile(partial, (2, {}))
    assert own.acquisition_needed(partial) is None
