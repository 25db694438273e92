from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.coordinator.errors import RegistryError, RoundError
from laminar_kafka.coordinator.vnodes.registry import (
    DEFAULT_VNODE_COUNT,
    UNASSIGNED,
    AssignmentSnapshot,
    PendingTarget,
    VnodeRegistry,
    moved_vnodes,
)
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

# ------------------------------------------------------------------------------------------ snapshots


def test_initial_snapshot() -> None:
    snap = AssignmentSnapshot.initial()
    assert snap.version == 0
    assert snap.vnode_count == DEFAULT_VNODE_COUNT == 256
    assert set(snap.owners) == {UNASSIGNED}
    assert set(snap.changed_at) == {0}
    assert snap.nodes() == frozenset()
    assert snap.vnodes_of(UNASSIGNED) == frozenset(range(256))


def test_snapshot_helpers() -> None:
    snap = AssignmentSnapshot(3, (1, 2, 1, 0), (1, 3, 2, 0))
    assert snap.vnode_count == 4
    assert snap.owner_of(0) == 1
    assert snap.owner_of(3) == UNASSIGNED
    assert snap.vnodes_of(1) == frozenset({0, 2})
    assert snap.vnodes_of(2) == frozenset({1})
    assert snap.vnodes_of(9) == frozenset()
    assert snap.nodes() == frozenset({1, 2})
    with pytest.raises(RegistryError):
        snap.owner_of(4)
    with pytest.raises(RegistryError):
        snap.owner_of(-1)


@pytest.mark.parametrize(
    ("version", "owners", "changed_at"),
    [
        (-1, (1,), (0,)),
        (True, (1,), (0,)),
        (1, (), ()),
        (1, (1, 2), (0,)),
        (1, (1, -2), (0, 0)),
        (1, (1, 2.0), (0, 0)),
        (1, (1,), (2,)),
        (1, (1,), (-1,)),
        (1, [1], (0,)),
    ],
)
def test_snapshot_validation(version: int, owners: tuple[int, ...], changed_at: tuple[int, ...]) -> None:
    with pytest.raises(RegistryError):
        AssignmentSnapshot(version, owners, changed_at)  # type: ignore[arg-type]


def test_snapshot_is_frozen() -> None:
    snap = AssignmentSnapshot.initial(2)
    with pytest.raises(AttributeError):
        snap.version = 5  # type: ignore[misc]


@pytest.mark.parametrize("count", [0, -1, True, 2.0])
def test_initial_rejects_bad_vnode_count(count: object) -> None:
    with pytest.raises(RegistryError):
        AssignmentSnapshot.initial(count)  # type: ignore[arg-type]


def test_moved_vnodes() -> None:
    a = AssignmentSnapshot(1, (1, 1, 2, 0), (1, 1, 1, 0))
    assert moved_vnodes(a, (1, 2, 2, 3)) == {1: (1, 2), 3: (0, 3)}
    assert moved_vnodes([1, 1], [1, 1]) == {}
    with pytest.raises(RegistryError):
        moved_vnodes(a, (1, 2))


# ------------------------------------------------------------------------------------------- registry


def test_registry_starts_empty() -> None:
    reg = VnodeRegistry(8)
    assert reg.vnode_count == 8
    assert reg.snapshot() == AssignmentSnapshot.initial(8)
    assert reg.pending() is None
    assert reg.state() == (AssignmentSnapshot.initial(8), None)


def test_publish_is_strictly_monotonic_and_atomic_on_failure() -> None:
    reg = VnodeRegistry(4)
    snap = reg.publish(1, [1, 1, 2, 2])
    assert reg.snapshot() is snap
    assert snap.version == 1 and snap.owners == (1, 1, 2, 2)
    for bad_version in (1, 0, -1):
        with pytest.raises(RegistryError, match="greater than the published 1"):
            reg.publish(bad_version, [2, 2, 2, 2])
    with pytest.raises(RegistryError):
        reg.publish(2, [1, 1, 2])
    with pytest.raises(RegistryError):
        reg.publish(2, [1, 1, 2, -1])
    assert reg.snapshot() is snap
    assert reg.publish(7, [1, 1, 2, 2]).version == 7  # gaps are allowed


def test_changed_at_tracks_the_last_owner_change() -> None:
    reg = VnodeRegistry(3)
    reg.publish(1, [1, 1, 1])
    assert reg.snapshot().changed_at == (1, 1, 1)
    reg.publish(2, [1, 2, 1])
    assert reg.snapshot().changed_at == (1, 2, 1)
    reg.publish(3, [1, 2, 1])
    assert reg.snapshot().changed_at == (1, 2, 1)


def test_self_other_self_is_detectable_between_two_looks() -> None:
    reg = VnodeRegistry(2)
    first = reg.publish(1, [1, 1])
    reg.publish(2, [2, 1])  # node 1 loses vnode 0 ...
    second = reg.publish(3, [1, 1])  # ... and gets it back
    assert second.owners == first.owners
    assert second.changed_at[0] == 3 > first.version  # held at both looks, but not throughout
    assert second.changed_at[1] <= first.version  # held throughout


def test_a_mirror_that_skips_versions_keeps_the_origin_changed_at() -> None:
    origin = VnodeRegistry(2)
    first = origin.publish(1, [1, 1])
    origin.publish(2, [2, 1])  # never seen by the mirror
    third = origin.publish(3, [1, 1])
    mirror = VnodeRegistry(2)
    mirror.publish_snapshot(first)
    adopted = mirror.publish_snapshot(third)
    assert mirror.snapshot() is adopted is third
    assert adopted.changed_at[0] == 3 > first.version  # the self -> other -> self move stays visible
    recomputed = VnodeRegistry(2)
    recomputed.publish(1, [1, 1])
    assert recomputed.publish(3, [1, 1]).changed_at[0] == 1  # what publish() would have hidden


def test_publish_snapshot_preconditions_and_round_clearing() -> None:
    reg = VnodeRegistry(2)
    snap = reg.publish(2, [1, 1])
    for bad in (snap, AssignmentSnapshot.initial(2).next(1, [1, 2]), AssignmentSnapshot.initial(3).next(5, [1, 1, 1])):
        with pytest.raises(RegistryError):
            reg.publish_snapshot(bad)
    with pytest.raises(RegistryError):
        reg.publish_snapshot("not a snapshot")  # type: ignore[arg-type]
    assert reg.snapshot() is snap
    reg.begin_round(AssignmentDrainId.for_round(snap, (1, 2), leader_token=1), [1, 2])
    later = snap.next(3, [1, 2])
    assert reg.publish_snapshot(later) is later
    assert reg.pending() is None


@given(st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=20))
def test_changed_at_property(maps: list[list[int]]) -> None:
    reg = VnodeRegistry(4)
    history = [reg.snapshot()]
    for version, owners in enumerate(maps, start=1):
        history.append(reg.publish(version, owners))
    last = history[-1]
    for vnode in range(4):
        at = last.changed_at[vnode]
        # the owner has been the same from version `at` on, and (if at > 0) differed just before
        assert all(s.owners[vnode] == last.owners[vnode] for s in history[at:])
        if at > 0:
            assert history[at - 1].owners[vnode] != last.owners[vnode]


def test_thread_safety_smoke() -> None:
    """Writers race to publish version+1; readers never see a torn or regressing snapshot."""
    reg = VnodeRegistry(64)
    target = 400
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        while not stop.is_set():
            version = reg.snapshot().version + 1
            if version > target:
                return
            try:
                reg.publish(version, [version] * 64)  # owners all equal the version: checkable
            except RegistryError:
                continue

    def reader() -> None:
        last = -1
        while not stop.is_set():
            snap, pending = reg.state()
            if snap.version < last:
                errors.append(f"version went back {last} -> {snap.version}")
            if snap.version and set(snap.owners) != {snap.version}:
                errors.append(f"torn snapshot at {snap.version}")
            if pending is not None:
                errors.append("unexpected pending round")
            last = snap.version
            if snap.version >= target:
                return

    threads = [threading.Thread(target=writer) for _ in range(4)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    stop.set()
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert reg.snapshot().version == target
    assert reg.snapshot().changed_at == (target,) * 64


# ------------------------------------------------------------------------------------- pending rounds


def _registry_at_v1() -> VnodeRegistry:
    reg = VnodeRegistry(4)
    reg.publish(1, [1, 1, 2, 2])
    return reg


def test_round_lifecycle_commit() -> None:
    reg = _registry_at_v1()
    target = (1, 3, 2, 3)
    drain_id = AssignmentDrainId.for_round(reg.snapshot(), target, leader_token=5)
    pending = reg.begin_round(drain_id, target)
    assert pending == PendingTarget(drain_id, target)
    assert pending.predecessor_version == 1 and pending.target_version == 2
    assert reg.pending() == pending
    assert reg.state() == (reg.snapshot(), pending)
    assert reg.begin_round(drain_id, list(target)) == pending  # idempotent
    reg.publish(2, target)
    assert reg.pending() is None
    assert reg.snapshot().owners == target
    assert reg.clear_round(drain_id) is False


def test_round_lifecycle_abort_publishes_predecessor_owners() -> None:
    reg = _registry_at_v1()
    before = reg.snapshot()
    drain_id = AssignmentDrainId.for_round(before, (2, 2, 2, 2), leader_token=1)
    reg.begin_round(drain_id, (2, 2, 2, 2))
    aborted = reg.publish(2, before.owners)
    assert reg.pending() is None
    assert aborted.version == 2 and aborted.owners == before.owners
    assert aborted.changed_at == before.changed_at


def test_clear_round() -> None:
    reg = _registry_at_v1()
    drain_id = AssignmentDrainId.for_round(reg.snapshot(), (2, 2, 2, 2), leader_token=1)
    other = AssignmentDrainId.for_round(reg.snapshot(), (1, 1, 1, 1), leader_token=1)
    reg.begin_round(drain_id, (2, 2, 2, 2))
    assert reg.clear_round(other) is False
    assert reg.pending() is not None
    assert reg.clear_round(drain_id) is True
    assert reg.pending() is None
    assert reg.clear_round(drain_id) is False
    assert reg.snapshot().version == 1


def test_second_round_while_pending_is_rejected() -> None:
    reg = _registry_at_v1()
    first = AssignmentDrainId.for_round(reg.snapshot(), (2, 2, 2, 2), leader_token=1)
    second = AssignmentDrainId.for_round(reg.snapshot(), (2, 2, 2, 2), leader_token=2)
    reg.begin_round(first, (2, 2, 2, 2))
    with pytest.raises(RoundError, match="is pending"):
        reg.begin_round(second, (2, 2, 2, 2))
    with pytest.raises(RoundError, match="is pending"):
        reg.begin_round(first, (1, 1, 1, 1))  # same id, different owners
    assert reg.pending().drain_id == first  # type: ignore[union-attr]


def test_stale_and_non_canonical_rounds_are_rejected() -> None:
    reg = _registry_at_v1()
    stale = AssignmentDrainId.for_round(reg.snapshot(), (2, 2, 2, 2), leader_token=1)
    reg.publish(2, [2, 2, 1, 1])
    with pytest.raises(RoundError, match="stale"):
        reg.begin_round(stale, (2, 2, 2, 2))
    with pytest.raises(RoundError, match="non-canonical"):
        reg.begin_round(AssignmentDrainId(2, 4, 9), (2, 2, 2, 2))
    with pytest.raises(RoundError, match="non-canonical"):
        reg.begin_round(AssignmentDrainId(2, 3, 0), (2, 2, 2, 2))
    fresh = AssignmentDrainId.for_round(reg.snapshot(), (1, 1, 1, 1), leader_token=1)
    with pytest.raises(RegistryError):
        reg.begin_round(fresh, (1, 1, 1))
    assert reg.pending() is None


def test_publishing_past_a_pending_round_ends_it() -> None:
    reg = _registry_at_v1()
    drain_id = AssignmentDrainId.for_round(reg.snapshot(), (2, 2, 2, 2), leader_token=1)
    reg.begin_round(drain_id, (2, 2, 2, 2))
    reg.publish(5, [1, 1, 1, 1])  # e.g. a mirror that missed versions 2..4
    assert reg.pending() is None
