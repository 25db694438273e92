"""The model's ack rules: commits fence the members they rely on, content rejections are recorded
once and reported, foreign partitions are rejected, and the pinned initial manifest is the base of
the first commit."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import EpochAck, Manifest, Member, initial_manifest
from laminar_kafka.coordinator.engine.acks import classify_ack, unowned_cursor
from laminar_kafka.coordinator.engine.model import (
    MemberFence,
    next_step,
    parse_rejection_name,
    rejection_name,
)
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import partition_vnode
from tests.unit.coordinator.engine.test_model import CONFIG, World
from tests.unit.coordinator.partitions import owned_keys, partition_table


def two_nodes_with_an_open_epoch() -> World:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    w.tick()
    assert w.settle() == ["open_epoch"]
    return w


def rejected_folder(w: World) -> str:
    return layout.rejected_folder(w.control.open_epoch)


# ---- 1. the commit checks the member entries it relies on ----------------------------------------


def test_a_commit_step_checks_the_member_entry_and_election_node_of_every_ack_it_relies_on() -> None:
    w = two_nodes_with_an_open_epoch()
    w.ack_all()
    view, _ = w.store.read_view(w.now)
    step = next_step(view, CONFIG, 99)
    assert step is not None and step.kind == "commit_epoch" and step.manifest is not None
    relied = {n for n, _ in step.manifest.acked_by}
    assert relied == {1, 2}
    seqs = {node: seq for seq, (node, _) in w.store.candidates.items()}
    assert step.fences == tuple(MemberFence(n, 0, w.store.candidate_name(seqs[n])) for n in sorted(relied))


@pytest.mark.parametrize("change", ["expire_and_rejoin", "planned_leave"])
def test_a_member_change_between_view_and_commit_rejects_the_commit(change: str) -> None:
    w = two_nodes_with_an_open_epoch()
    w.ack_all()
    term = w.store.leader()
    assert term is not None
    view, version = w.store.read_view(w.now)
    step = next_step(view, CONFIG, term.token)
    assert step is not None and step.kind == "commit_epoch"
    if change == "expire_and_rejoin":  # a new session: member data version 0 again, a new election node
        w.drop(2)
        w.join(2)
        assert w.store.member_versions[2] == 0
    else:
        w.store.update_member(Member(2, w.store.members[2].boot_id, leaving=True))
    with pytest.raises(FencedError):
        w.store.apply(term, step, version)
    assert w.control.open_epoch == 1  # nothing was committed; the next pass sees the new member
    old_boot = dict(view.control.boots)[2]
    assert w.settle()[0] == "commit_epoch"
    acked = dict(w.manifest(1).acked_by)
    if change == "expire_and_rejoin":  # the old boot is dead: the epoch commits without its ack
        assert 2 not in acked
    else:
        assert acked[2] == old_boot


def test_a_required_member_without_its_election_node_is_waited_for() -> None:
    w = two_nodes_with_an_open_epoch()
    w.ack_all()
    view, _ = w.store.read_view(w.now)
    fences = dict(view.member_fences or {})
    del fences[2]  # node 2 registered its member entry but not yet its election node
    assert next_step(replace(view, member_fences=fences), CONFIG, 99) is None
    unfenced = next_step(replace(view, member_fences=None), CONFIG, 99)
    assert unfenced is not None and unfenced.kind == "commit_epoch" and unfenced.fences == ()


# ---- 3. content rejections are recorded once and reported ----------------------------------------


def test_a_foreign_partition_is_rejected_recorded_once_and_a_replacement_commits() -> None:
    w = two_nodes_with_an_open_epoch()
    foreign = owned_keys(w.control.snapshot.owners, 2)[0]
    bad = w.ack(1, extra={foreign: 7}, outputs=("bad-output",))
    w.ack(2)
    view, _ = w.store.read_view(w.now)
    verdict = classify_ack(bad, view.control, view.members, view.latest_manifest)
    assert verdict.reason == f"cursor {foreign} is not owned by node 1 at version {w.control.version}"
    assert verdict.reportable
    assert w.settle() == ["reject_acks"]
    marker = f"{rejected_folder(w)}/{rejection_name(bad)}"
    assert json.loads(w.store.nodes[marker][0]) == {"reason": verdict.reason}
    assert w.settle() == []  # once: the marker exists, the epoch waits for node 1
    w.ack(1)  # the replacement (same boot, same ack node, new content)
    assert w.settle() == ["commit_epoch"]
    assert "bad-output" not in w.manifest(1).outputs and w.manifest(1).cursors["s"][foreign] == 5


def test_an_invalid_replacement_gets_its_own_marker() -> None:
    w = two_nodes_with_an_open_epoch()
    foreign = owned_keys(w.control.snapshot.owners, 2)
    first = w.ack(1, extra={foreign[0]: 1})
    assert w.settle() == ["reject_acks"]
    second = w.ack(1, extra={foreign[1]: 1})
    assert w.settle() == ["reject_acks"]
    assert w.store.children(rejected_folder(w)) == sorted([rejection_name(first), rejection_name(second)])


def test_identity_rejections_are_not_reported() -> None:
    """A zombie boot or a wrong version is not the live owner's current ack: no marker, no event."""
    w = two_nodes_with_an_open_epoch()
    w.ack(1, boot="zombie", offset=0)
    w.ack(2, version=w.control.version - 1)
    view, _ = w.store.read_view(w.now)
    verdicts = [classify_ack(a, view.control, view.members, None) for a in view.acks]
    assert [v.reportable for v in verdicts] == [False, False]
    assert w.settle() == []
    assert w.store.children(rejected_folder(w)) == []


def test_rejection_names_are_keyed_by_content_and_parse_back() -> None:
    a = EpochAck(3, "boot", 4, 1, {"s": {"t:1": 5}})
    b = EpochAck(3, "boot", 4, 1, {"s": {"t:1": 6}})
    assert rejection_name(a) != rejection_name(b)
    assert rejection_name(a) == rejection_name(EpochAck.from_json(a.to_json()))
    node, boot, digest = parse_rejection_name(rejection_name(a))
    assert (node, boot) == (3, "boot") and len(digest) == 16
    with pytest.raises(CoordinatorError):
        parse_rejection_name("x.boot.abc")


# ---- 4. cursors must name partitions the node owns -----------------------------------------------


def test_unowned_cursor_routes_each_key_with_its_source_identity() -> None:
    snapshot = AssignmentSnapshot.initial(8).next(1, [1, 1, 1, 1, 2, 2, 2, 2])
    table = partition_table(8)
    mine = [k for v, keys in table.items() if v < 4 for k in keys]
    theirs = [k for v, keys in table.items() if v >= 4 for k in keys]
    assert unowned_cursor(EpochAck(1, "b", 1, 1, {"s": {k: 0 for k in mine}}), snapshot) == ""
    assert unowned_cursor(EpochAck(1, "b", 1, 1, {}), snapshot) == ""
    reason = unowned_cursor(EpochAck(1, "b", 1, 1, {"s": {mine[0]: 0, theirs[0]: 0}}), snapshot)
    assert reason == f"cursor {theirs[0]} is not owned by node 1 at version 1"
    # The same key under another source identity routes elsewhere: the identity is part of the route.
    topic, partition = "t", next(
        p for p in range(100)
        if (partition_vnode("s", "t", p, 8) < 4) != (partition_vnode("other", "t", p, 8) < 4)
    )
    owned_under_s = partition_vnode("s", topic, partition, 8) < 4
    verdict = unowned_cursor(EpochAck(1, "b", 1, 1, {"other": {f"{topic}:{partition}": 0}}), snapshot)
    assert (verdict == "") is (not owned_under_s)


@pytest.mark.parametrize("key", ["t", "t:", ":1", "t:x", "t:01", "t:-1", "t:١", "t:4294967296"])
def test_unowned_cursor_rejects_keys_that_are_not_topic_partition(key: str) -> None:
    snapshot = AssignmentSnapshot.initial(8).next(1, [1] * 8)
    reason = unowned_cursor(EpochAck(1, "b", 1, 1, {"s": {key: 0}}), snapshot)
    assert reason and ("is not topic:partition" in reason or "cannot be routed" in reason)


# ---- 6. the pinned initial manifest -----------------------------------------------------------


def test_the_first_manifest_carries_the_pinned_cursors_of_partitions_no_ack_named() -> None:
    w = World()
    pinned = w.store.pin_initial(initial_manifest({"s": {"t:0": 3, "t:1": 4}, "gone": {"x:0": 7}}))
    assert w.store.pin_initial(initial_manifest({"s": {"t:0": 99}})) == pinned  # create-once
    w.join(1)
    w.settle()
    w.tick()
    w.settle()
    view, _ = w.store.read_view(w.now)
    assert view.latest_manifest == pinned  # while last_epoch == 0
    w.ack(1, offset=2)  # below the pinned 3 of t:0 (and 4 of t:1): a regression
    assert w.settle() == ["reject_acks"]
    w.ack(1, offset=5)
    assert w.settle() == ["commit_epoch"]
    first = w.manifest(1)
    assert first.cursors["gone"] == {"x:0": 7}  # no ack named it: carried from the initial manifest
    assert first.cursors["s"]["t:0"] == 5 and len(first.cursors["s"]) == 24
    assert first.acked_by == ((1, w.store.members[1].boot_id),)


def test_without_a_pin_the_first_manifest_holds_only_acked_cursors() -> None:
    w = World()
    w.join(1)
    w.settle()
    w.tick()
    w.settle()
    assert w.store.read_view(w.now)[0].latest_manifest is None
    w.ack(1, offset=0)
    assert w.settle() == ["commit_epoch"]
    assert w.manifest(1).cursors == {"s": {k: 0 for k in owned_keys(w.control.snapshot.owners, 1)}}
    assert isinstance(w.manifest(1), Manifest)
