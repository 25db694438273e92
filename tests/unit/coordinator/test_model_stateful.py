"""Hypothesis stateful test: the pure model driven against an in-memory compare-and-set store under
random joins, crashes, session expiries, rejoins, planned leaves, leader changes, zombie leaders,
stale acks, drain receipts, decisions and time.

Invariants checked after every rule:
- at most one decision per round, and the register never records two outcomes for one round;
- the published vnode map is a partition of the vnodes (every vnode one owner; all unassigned only
  when no member could take them);
- no committed manifest holds an ack from a stale boot id or version;
- a committed manifest never goes backwards per partition; versions and epochs only grow.
"""
from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.base import CoordinatorConfig, EpochAck, Manifest, Member, RoundOutcome
from coordinator.model import ControlState, Step, ack_name, epoch_name, next_step
from coordinator.registry import UNASSIGNED
from coordinator.rounds import round_id
from tests.unit.coordinator.cas_store import MemoryStore, Rejected

NODES = st.integers(min_value=1, max_value=5)
VNODES = 8
CONFIG = CoordinatorConfig(
    pipeline="model", hosts="memory", checkpoint_interval=1.0, round_deadline=5.0, vnode_count=VNODES,
    manifests_to_keep=100,
)


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.now = 1_000_000
        self.boots: dict[int, str] = {}  # node -> boot of its live process (members may lag on expiry)
        self.zombie_boots: dict[int, list[str]] = {}
        self.stale: list[tuple[int, int, ControlState, tuple]] = []  # (seq, version, control, creates)
        self.manifests: dict[int, Manifest] = {}
        self.boots_at: dict[int, dict[int, str]] = {}
        self.decided: dict[str, bytes] = {}
        self.last_version = 0
        self.last_epoch = 0
        self.progress = 0
        self.boot_counter = 0

    # ---- membership ---------------------------------------------------------------------------

    def _enter(self, node: int, leaving: bool = False) -> None:
        self.boot_counter += 1
        boot = f"{10**8 - self.boot_counter:08d}"  # later boots sort first: a zombie ack lists last
        self.boots[node] = boot
        self.store.members[node] = Member(node, boot, leaving=leaving)
        self.store.candidates[self.store.next_seq] = (node, boot)
        self.store.next_seq += 1

    def _drop(self, node: int) -> None:
        member = self.store.members.pop(node, None)
        if member is not None:
            self.zombie_boots.setdefault(node, []).append(member.boot_id)
        for seq in [s for s, (n, _) in self.store.candidates.items() if n == node]:
            del self.store.candidates[seq]
        self.boots.pop(node, None)

    @rule(node=NODES)
    def join(self, node: int) -> None:
        if node not in self.store.members:
            self._enter(node)

    @rule(node=NODES)
    def crash_or_expire(self, node: int) -> None:
        self._drop(node)

    @rule(node=NODES)
    def expire_and_rejoin(self, node: int) -> None:
        """Session expiry followed by a quick rejoin with a new boot id (same node id)."""
        if node in self.store.members:
            self._drop(node)
            self._enter(node)

    @rule(node=NODES)
    def planned_leave(self, node: int) -> None:
        member = self.store.members.get(node)
        if member is not None:
            self.store.members[node] = Member(node, member.boot_id, leaving=True)

    @rule()
    def leader_changes(self) -> None:
        """The leader's election node goes (a session flap); it stands again at the back."""
        leader = self.store.leader()
        if leader is not None:
            seq, node, boot = leader
            del self.store.candidates[seq]
            self.store.candidates[self.store.next_seq] = (node, boot)
            self.store.next_seq += 1

    # ---- leader -------------------------------------------------------------------------------

    def _apply(self, step: Step) -> None:
        control = step.control
        event(f"step {step.kind}" + ("" if step.decision is None else f" {step.decision.outcome.value}"))
        if step.rejected_acks:
            event("stale ack rejected at commit")
        self.boots_at.setdefault(control.version, dict(control.boots))
        for path, data in step.creates:
            if path.endswith("/decision"):
                assert path not in self.decided, f"second decision for {path}"
                self.decided[path] = data
            if path.startswith("checkpoints/"):
                manifest = Manifest.from_json(data)
                self.manifests[manifest.epoch] = manifest

    @rule(steps=st.integers(min_value=1, max_value=6))
    def leader_acts(self, steps: int) -> None:
        for _ in range(steps):
            step = self.store.leader_step(CONFIG, self.now)
            if step is None:
                return
            self._apply(step)

    @rule()
    def capture_leader_intent(self) -> None:
        """Remember what the current leader would write now (a future zombie write)."""
        leader = self.store.leader()
        if leader is None:
            return
        view, version = self.store.view(self.now)
        step = next_step(view, CONFIG, leader[0] + 1)
        if step is not None:
            self.stale.append((leader[0], version, step.control, step.creates))

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data())
    def zombie_leader_writes(self, data: st.DataObject) -> None:
        seq, version, control, creates = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1)))
        current = self.store.control()[1]
        try:
            self.store.transaction(seq, version, control, creates)
        except Rejected:
            return
        event("zombie write accepted (not stale)")
        # Accepted only when it was not stale at all: same live election node, same register version.
        assert seq in self.store.candidates and current == version
        self._apply(Step("replay", control, creates))

    @rule(ms=st.sampled_from([100, 1000, 3000, 6000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    # ---- nodes --------------------------------------------------------------------------------

    def _ack(self, node: int, boot: str, epoch: int, version: int, cursors: dict, tag: str) -> None:
        ack = EpochAck(node, boot, epoch, version, cursors, (f"{tag}-{node}-{epoch}",))
        try:
            self.store.create(f"epochs/{epoch_name(epoch)}/acks/{ack_name(node, boot)}", ack.to_json(), overwrite=True)
        except Rejected:
            pass

    @rule(node=NODES)
    def node_acks(self, node: int) -> None:
        control, _ = self.store.control()
        if control is None or not control.open_epoch or node not in self.store.members:
            return
        if node not in control.snapshot.nodes() or control.boot_of(node) != self.boots.get(node):
            return
        latest = self.manifests.get(control.last_epoch)
        self.progress += 1
        cursors = {"s": {
            f"t:{v}": max((latest.cursors["s"].get(f"t:{v}", 0) if latest and "s" in latest.cursors else 0),
                          self.progress)
            for v in sorted(control.snapshot.vnodes_of(node))
        }}
        self._ack(node, self.boots[node], control.open_epoch, control.version, cursors, "live")

    @rule()
    def every_owner_acks(self) -> None:
        for node in sorted(self.store.members):
            self.node_acks(node)

    @rule()
    def every_node_reports_ready(self) -> None:
        for node in sorted(self.boots):
            self.node_reports_ready(node)

    @rule(node=NODES, kind=st.sampled_from(["zombie", "version"]))
    def stale_ack(self, node: int, kind: str) -> None:
        """A zombie (an old boot id of a node, maybe live again under a new one) or a live node with
        a wrong version acks the open epoch, with regressed cursors."""
        control, _ = self.store.control()
        if control is None or not control.open_epoch:
            return
        if kind == "version" and node in self.boots:
            boot, version = self.boots[node], control.version - 1
        elif kind == "zombie" and self.zombie_boots.get(node):
            boot, version = self.zombie_boots[node][-1], control.version
        else:
            return
        # Zombie ack names sort after the live one's, so a wrong "last wins" merge would pick them.
        cursors = {"s": {f"t:{v}": 0 for v in range(VNODES)}}
        self._ack(node, boot, control.open_epoch, version, cursors, "stale")

    @rule(node=NODES)
    def node_reports_ready(self, node: int) -> None:
        control, _ = self.store.control()
        if control is None or control.round is None or node not in self.boots:
            return
        prefix = f"rounds/{round_id(control.round.drain_id.target_version)}/ready"
        try:
            self.store.create(f"{prefix}/{ack_name(node, self.boots[node])}", b"")
        except Rejected:
            pass

    # ---- invariants ---------------------------------------------------------------------------

    @invariant()
    def one_decision_per_round(self) -> None:
        control, _ = self.store.control()
        if control is None:
            return
        outcomes: dict[object, RoundOutcome] = {}
        for decision in control.decisions:
            assert outcomes.setdefault(decision.drain_id, decision.outcome) == decision.outcome
            path = f"rounds/{round_id(decision.drain_id.target_version)}/decision"
            assert path in self.decided

    @invariant()
    def vnode_map_is_a_partition(self) -> None:
        control, _ = self.store.control()
        if control is None:
            return
        owners = control.snapshot.owners
        assert len(owners) == VNODES
        assert all(o != UNASSIGNED for o in owners) or all(o == UNASSIGNED for o in owners), owners
        if control.round is not None:
            target = control.round.target_owners
            assert len(target) == VNODES

    @invariant()
    def committed_manifests_are_valid_and_monotonic(self) -> None:
        control, _ = self.store.control()
        if control is None:
            return
        assert control.version >= self.last_version
        assert control.last_epoch >= self.last_epoch
        assert control.open_epoch in (0, control.last_epoch + 1)
        self.last_version, self.last_epoch = control.version, control.last_epoch
        previous: Manifest | None = None
        for epoch in sorted(self.manifests):
            manifest = self.manifests[epoch]
            if epoch > control.last_epoch:
                continue
            assert not any(o.startswith("stale") for o in manifest.outputs), manifest.outputs
            recorded = self.boots_at[manifest.assignment_version]
            for node, boot in manifest.acked_by:
                assert recorded.get(node) == boot, (node, boot, recorded)
            if previous is not None:
                assert previous.epoch == epoch - 1
                for source, parts in previous.cursors.items():
                    for tp, offset in parts.items():
                        assert manifest.cursors[source][tp] >= offset, (tp, offset, manifest.cursors[source][tp])
            previous = manifest


CoordinatorModel.TestCase.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)
TestCoordinatorModel = CoordinatorModel.TestCase
