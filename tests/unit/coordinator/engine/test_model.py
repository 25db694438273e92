"""Deterministic scenarios for the pure round/epoch model (laminar_kafka.coordinator.engine.model), run against the
in-memory compare-and-set store."""
from __future__ import annotations

import pytest

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    CoordinatorConfig,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    Member,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
)
from laminar_kafka.coordinator.engine.acks import classify_ack, merge_manifest
from laminar_kafka.coordinator.engine.model import (
    ControlState,
    EventTracker,
    next_step,
    next_wakeup_ms,
    shed_owners,
)
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED
from tests.unit.coordinator.partitions import leader_step, owned_keys

CONFIG = CoordinatorConfig(pipeline="m", hosts="memory", checkpoint_interval=1.0, round_deadline=5.0, vnode_count=8)


class World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.now = 1_000_000
        self.steps: list[str] = []

    def join(self, node: int, boot: str | None = None) -> str:
        boot = boot or f"b{node}-{self.store.next_seq}"
        self.store.register(Member(node, boot))
        return boot

    def drop(self, node: int) -> None:
        self.store.unregister(node)

    def settle(self, limit: int = 20) -> list[str]:
        kinds = []
        for _ in range(limit):
            step = leader_step(self.store, CONFIG, self.now)
            if step is None:
                break
            kinds.append(step.kind + ("" if step.decision is None else f":{step.decision.outcome.value}"))
        self.steps += kinds
        return kinds

    @property
    def control(self) -> ControlState:
        control, _ = self.store.register_and_version()
        assert control is not None
        return control

    def ack(self, node: int, boot: str | None = None, version: int | None = None, offset: int = 5,
            outputs: tuple[str, ...] = (), extra: dict[str, int] | None = None) -> EpochAck:
        """Ack the open epoch with `offset` for every test partition `node` owns (plus `extra`)."""
        c = self.control
        boot = boot or self.store.members[node].boot_id
        cursors = {"s": {**{k: offset for k in owned_keys(c.snapshot.owners, node)}, **(extra or {})}}
        ack = EpochAck(node, boot, c.open_epoch, c.version if version is None else version, cursors,
                       outputs or (f"{node}-{boot}-{c.open_epoch}",))
        self.store.write_ack(ack)
        return ack

    def ack_all(self, offset: int = 5) -> None:
        for node in sorted(self.control.snapshot.nodes()):
            if node in self.store.members:
                self.ack(node, offset=offset)

    def ready(self, node: int) -> None:
        r = self.control.round
        assert r is not None
        boot = self.store.members[node].boot_id
        self.store.write_ready(r.drain_id, node, boot)

    def manifest(self, epoch: int) -> Manifest:
        manifest = self.store.read_manifest(epoch)
        assert manifest is not None
        return manifest

    def tick(self, seconds: float = 1.0) -> None:
        self.now += int(seconds * 1000)


def test_first_assignment_is_published_directly_over_non_leaving_members() -> None:
    w = World()
    assert w.settle() == []  # no member, nothing to publish
    w.join(1)
    w.join(2)
    assert w.settle() == ["publish"]
    c = w.control
    assert c.version == 1 and c.snapshot.nodes() == {1, 2} and c.round is None
    assert dict(c.boots) == {1: w.store.members[1].boot_id, 2: w.store.members[2].boot_id}


def test_epoch_opens_on_the_interval_and_commits_only_with_every_live_owner() -> None:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    assert w.settle() == []
    assert next_wakeup_ms(w.control, CONFIG) == w.now + 1000
    w.tick()
    assert w.settle() == ["open_epoch"]
    assert w.control.open_epoch == 1
    w.ack(1)
    assert w.settle() == []
    w.ack(2)
    assert w.settle() == ["commit_epoch"]
    m = w.manifest(1)
    assert m.assignment_version == 1 and len(m.cursors["s"]) == 24
    assert w.control.last_epoch == 1 and w.control.open_epoch == 0


def test_a_join_runs_a_round_drain_cut_epoch_commit_decision() -> None:
    w = World()
    w.join(1)
    w.settle()
    w.join(2)
    assert w.settle() == ["start_round"]
    r = w.control.round
    assert r is not None and r.participants == (1,) and r.drain_id.predecessor_version == 1
    w.tick()
    assert w.settle() == ["open_epoch"]  # ordinary epochs continue while draining
    assert w.control.round.cut_epoch == 0
    w.ack(1)
    assert w.settle() == ["commit_epoch"]
    w.ready(1)
    assert w.settle() == ["open_epoch"]  # the cut epoch, immediately
    assert w.control.round.cut_epoch == 2
    w.ack(1)
    assert w.settle() == ["commit_epoch:commit"]
    c = w.control
    assert c.version == 2 and c.snapshot.nodes() == {1, 2} and c.round is None
    assert c.manifest_epoch == 2 and c.decisions[-1].outcome is RoundOutcome.COMMIT
    assert layout.decision_path(2) in w.store.nodes


def test_a_round_aborts_at_its_deadline_publishing_the_predecessor_owners() -> None:
    w = World()
    w.join(1)
    w.settle()
    before = w.control.snapshot.owners
    w.join(2)
    w.settle()
    w.tick(5.0)
    w.now -= 1  # just before the deadline: the interval epoch opens, no abort
    assert w.settle() == ["open_epoch"]
    w.ack(1)
    w.tick(0.001)
    assert w.settle()[:2] == ["commit_epoch", "decide:abort"]
    c = w.control
    assert c.version == 2 and c.snapshot.owners == before and c.decisions[-1].outcome is RoundOutcome.ABORT


def test_a_participant_death_aborts_then_sheds_without_a_drain() -> None:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    w.join(3)
    assert w.settle() == ["start_round"]
    w.drop(2)
    kinds = w.settle()
    assert kinds[:2] == ["decide:abort", "shed"]
    c = w.control
    assert 2 not in c.snapshot.nodes() and all(o != UNASSIGNED for o in c.snapshot.owners)


def test_a_dead_owner_does_not_block_the_open_epoch_and_its_partitions_keep_their_cursor() -> None:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    w.tick()
    w.settle()
    w.ack_all(offset=5)
    w.settle()
    w.tick()
    w.settle()
    w.ack(1, offset=9)
    mine = set(owned_keys(w.control.snapshot.owners, 1))
    w.drop(2)
    assert w.settle()[:2] == ["commit_epoch", "shed"]
    m = w.manifest(2)
    owners_v1 = w.manifest(1).cursors["s"]
    assert m.cursors["s"].keys() == owners_v1.keys()
    for tp, offset in m.cursors["s"].items():
        assert offset == (9 if tp in mine else owners_v1[tp])
    assert [n for n, _ in m.acked_by] == [1]
    assert w.control.manifest_epoch == 2 and w.control.snapshot.nodes() == {1}


def test_stale_acks_are_rejected_and_never_merged() -> None:
    w = World()
    old = w.join(1, "old")
    w.settle()
    w.drop(1)
    w.join(1, "new")
    w.join(2)
    kinds = w.settle()
    assert kinds[0] == "shed"  # the restarted node counts as dead: its vnodes are re-published
    w.tick()
    assert "open_epoch" in w.settle()
    w.ack(1, boot=old, offset=0, outputs=("zombie",))
    w.ack(1)
    w.ack(2, version=w.control.version - 1, offset=0, outputs=("wrong-version",))
    view = w.store.read_view(w.now)[0]
    assert [classify_ack(a, view.control, view.members, None).reason for a in view.acks] == [
        "", "boot id is not the one recorded at the epoch's version",
        f"version {w.control.version - 1} is not the epoch's {w.control.version}",
    ]
    assert w.settle() == []  # node 2 has no valid ack yet
    w.ack(2)  # the same boot re-acks correctly (overwrites)
    step = next_step(w.store.read_view(w.now)[0], CONFIG, 99)
    assert step is not None and step.kind == "commit_epoch"
    assert [reason for _, reason in step.rejected_acks] == [
        "boot id is not the one recorded at the epoch's version"]
    assert step.manifest is not None and step.manifest.outputs == tuple(sorted(
        f"{n}-{w.store.members[n].boot_id}-{w.control.open_epoch}" for n in (1, 2)))


def test_a_regressing_cursor_is_rejected() -> None:
    w = World()
    w.join(1)
    w.settle()
    w.tick()
    w.settle()
    w.ack(1, offset=10)
    w.settle()
    w.tick()
    w.settle()
    w.ack(1, offset=3)
    view, _ = w.store.read_view(w.now)
    verdict = classify_ack(view.acks[0], view.control, view.members, view.latest_manifest)
    assert "regresses" in verdict.reason and verdict.reportable
    assert w.settle() == ["reject_acks"]  # recorded once, then the epoch waits for a replacement
    assert w.settle() == []
    w.ack(1, offset=12)  # the replacement overwrites the ack; the leader classifies the latest content
    assert w.settle() == ["commit_epoch"]
    assert set(w.manifest(2).cursors["s"].values()) == {12}


def test_a_planned_leave_drains_and_moves_every_vnode_away() -> None:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    w.store.update_member(Member(2, w.store.members[2].boot_id, leaving=True))
    assert w.settle() == ["start_round"]
    assert w.control.round.participants == (2,)
    w.ready(2)
    assert w.settle() == ["open_epoch"]
    w.ack_all()
    assert w.settle() == ["commit_epoch:commit"]
    assert w.control.snapshot.nodes() == {1}


def test_a_deposed_leaders_step_is_rejected_and_a_decision_is_create_once() -> None:
    w = World()
    w.join(1)
    w.join(2)
    w.settle()
    w.join(3)
    w.settle()
    w.tick(6)
    view, version = w.store.read_view(w.now)
    old_term = w.store.leader()
    assert old_term is not None
    abort = next_step(view, CONFIG, old_term.token)
    assert abort is not None and abort.kind == "decide"
    w.drop(1)  # the leader's session expires; node 2 leads
    with pytest.raises(FencedError):
        w.store.apply(old_term, abort, version)
    # The new leader with the same view decides; a second contender with its own view cannot.
    new_term = w.store.leader()
    assert new_term is not None
    w.store.apply(new_term, abort, version)
    with pytest.raises(FencedError):
        w.store.apply(new_term, abort, version + 1)  # decision exists


def test_shed_moves_only_dead_vnodes() -> None:
    members = {1: Member(1, "a"), 2: Member(2, "b"), 4: Member(4, "d", leaving=True)}
    owners = (1, 3, 2, 3, 1, 3, 2, 4)
    result = shed_owners(owners, frozenset({3}), members, "balanced", {})
    assert [o for o, r in zip(owners, result, strict=True) if o != 3] == [r for o, r in zip(owners, result, strict=True) if o != 3]
    assert {result[1], result[3], result[5]} <= {1, 2}
    hrw = shed_owners(owners, frozenset({3}), members, "rendezvous", {})
    assert all(r in (1, 2, 4) for r in hrw)
    assert shed_owners(owners, frozenset({1, 2, 3, 4}), {}, "balanced", {}) == (0,) * 8


def test_merge_overlays_cursors_and_unions_outputs() -> None:
    prev = Manifest(1, 1, {"s": {"t:0": 5, "t:1": 7}}, ("x",))
    acks = [EpochAck(2, "b", 2, 1, {"s": {"t:1": 9}}, ("o2",)), EpochAck(1, "a", 2, 1, {"s": {"t:2": 1}}, ("o1",))]
    m = merge_manifest(2, 1, prev, acks)
    assert m.cursors == {"s": {"t:0": 5, "t:1": 9, "t:2": 1}}
    assert m.outputs == ("o1", "o2") and m.acked_by == ((1, "a"), (2, "b"))


def test_control_state_round_trips_and_decoding_is_strict() -> None:
    w = World()
    w.join(1)
    w.settle()
    w.join(2)
    w.settle()
    c = w.control
    assert ControlState.from_json(c.to_json()) == c
    with pytest.raises(CoordinatorError):
        ControlState.from_json(b'{"version": 1}')
    with pytest.raises(CoordinatorError):
        ControlState.from_json(b"not json")


def test_event_tracker_orders_events_causally_even_when_changes_coalesce() -> None:
    w = World()
    w.join(1)
    w.settle()
    tracker = EventTracker()
    first = tracker.advance(w.control, {})
    assert [type(e) for e in first] == [AssignmentChanged]
    w.join(2)
    w.settle()
    events = tracker.advance(w.control, {})
    assert [type(e) for e in events] == [RoundStarted]
    w.ready(1)
    w.settle()
    assert [type(e) for e in tracker.advance(w.control, {})] == [EpochOpened]
    w.ack(1)
    w.settle()  # cut commit + decision + version 2
    w.tick()
    w.settle()  # epoch 2 opens at version 2
    c = w.control
    manifests = {e: w.manifest(e) for e in tracker.committed_range(c)}
    events = tracker.advance(c, manifests)
    assert [type(e) for e in events] == [EpochCommitted, RoundDecided, AssignmentChanged, EpochOpened]
    assert events[1].manifest_epoch == 1 and events[2].manifest_epoch == 1
    assert tracker.advance(c, manifests) == []  # idempotent
