"""Hypothesis stateful test: the pure model driven against an in-memory compare-and-set store under
random joins, crashes, session expiries, rejoins, planned leaves, leader changes, zombie leaders,
stale acks, drain receipts, decisions and time.

Also: a pinned initial manifest (before the first commit), acks whose content is invalid (a
regressing cursor, a partition the node does not own) from live owners, acks that carry only the
cursors that moved since the latest committed manifest (as a node does once it saw that manifest),
and commits racing a member change (a session expiry and rejoin, or a planned leave) between the
leader's view and its write.

Invariants checked after every rule:
- at most one decision per round, and the register never records two outcomes for one round;
- the published vnode map is a partition of the vnodes (every vnode one owner; all unassigned only
  when no member could take them);
- no committed manifest holds an ack from a stale boot id or version, or an invalid ack's output;
- a committed manifest never goes backwards per partition (the first one not below the pinned
  initial manifest, whose cursors it carries); versions and epochs only grow;
- a committed manifest holds every cursor each ack it commits stood for: all of the node's owned
  cursors, the ones a "what changed" ack left out included;
- every commit step checks the member entry and election node of each node whose ack it relies on,
  and a commit computed before such a member changed is rejected;
- once the leader is idle, every content rejection of a live owner's current ack is recorded (a
  marker), and only such rejections are.
"""
from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import CoordinatorConfig, EpochAck, Manifest, Member, RoundOutcome, initial_manifest
from laminar_kafka.coordinator.engine.acks import classify_ack
from laminar_kafka.coordinator.engine.model import Step, next_step, rejection_name
from laminar_kafka.coordinator.errors import FencedError
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.store import Leadership
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED
from tests.unit.coordinator.partitions import leader_step, owned_keys, partition_table

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
        self.stale: list[tuple[Leadership, int, Step]] = []  # (term, version, step)
        self.manifests: dict[int, Manifest] = {}
        self.boots_at: dict[int, dict[int, str]] = {}
        self.decided: dict[str, bytes] = {}
        self.last_version = 0
        self.last_epoch = 0
        self.progress = 0
        #: (epoch, node, boot) -> for each content the node acked, every owned cursor it stood for
        #: (None: an invalid content). A node of this model may ack an epoch again with new content,
        #: and a leader (or a zombie's write) may commit any valid one it read.
        self.stood_for: dict[tuple[int, int, str], list[dict[str, int] | None]] = {}
        self.boot_counter = 0
        self.initial: Manifest | None = None
        self.all_keys = sorted(k for keys in partition_table(VNODES).values() for k in keys)

    @initialize(nodes=st.integers(min_value=0, max_value=3))
    def some_nodes_start(self, nodes: int) -> None:
        """Most runs start with a few members, so epochs and rounds happen early."""
        for node in range(1, nodes + 1):
            self._enter(node)

    # ---- membership ---------------------------------------------------------------------------

    def _enter(self, node: int, leaving: bool = False) -> None:
        self.boot_counter += 1
        boot = f"{10**8 - self.boot_counter:08d}"  # later boots sort first: a zombie ack lists last
        self.boots[node] = boot
        self.store.register(Member(node, boot, leaving=leaving))

    def _drop(self, node: int) -> None:
        member = self.store.members.get(node)
        if member is not None:
            self.zombie_boots.setdefault(node, []).append(member.boot_id)
        self.store.unregister(node)
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
            self.store.update_member(Member(node, member.boot_id, leaving=True))

    @precondition(lambda self: self.initial is None)
    @rule(offset=st.integers(min_value=0, max_value=4))
    def pin_start(self, offset: int) -> None:
        """The runtime pins the resolved start position before any node reads (so before a commit)."""
        control = self.store.read_register()
        if control is not None and control.last_epoch:
            return
        pinned = initial_manifest({"s": {k: offset for k in self.all_keys}, "gone": {"x:0": 7}})
        self.initial = self.store.pin_initial(pinned)
        assert self.store.pin_initial(initial_manifest({"s": {}})) == self.initial  # create-once
        self.manifests[0] = self.initial

    @rule()
    def leader_changes(self) -> None:
        """The leader's election node goes (a session flap); it stands again at the back."""
        leader = self.store.leader()
        if leader is not None:
            seq = leader.token - 1
            node, boot = self.store.candidates.pop(seq)
            self.store.candidates[self.store.next_seq] = (node, boot)
            self.store.next_seq += 1

    # ---- leader -------------------------------------------------------------------------------

    def _apply(self, step: Step, *, computed_now: bool = True) -> None:
        """Check ``step`` and record what it wrote. ``computed_now``: from the store as it is now;
        False for a zombie's step accepted later (the register unchanged, but members may have
        changed meanwhile, which the register's version does not see)."""
        control = step.control
        event(f"step {step.kind}" + ("" if step.decision is None else f" {step.decision.outcome.value}"))
        if step.rejected_acks:
            event("stale ack rejected at commit")
        self.boots_at.setdefault(control.version, dict(control.boots))
        if step.kind == "commit_epoch" and step.manifest is not None:
            fenced = {fence.node for fence in step.fences}
            assert fenced == {node for node, _boot in step.manifest.acked_by}, (step.fences, step.manifest.acked_by)
            assert len(step.fences) == len(step.manifest.acked_by)
        for ack, _reason in step.reported:
            assert ack.boot_id == control.boot_of(ack.node_id), ack
            if ack.boot_id != self.boots.get(ack.node_id):
                # only a zombie's step: the ack's boot was live when the step was computed and has
                # been replaced since; the marker is keyed by that boot, which no successor reads
                assert not computed_now, ack
                event("content rejection recorded for a boot replaced since")
            event("content rejection recorded")
        for path, data in (r for intent in step.intents for r in layout.intent_records(intent)):
            if path.endswith("/decision"):
                assert path not in self.decided, f"second decision for {path}"
                self.decided[path] = data
            if path.startswith("checkpoints/"):
                manifest = Manifest.from_json(data)
                self.manifests[manifest.epoch] = manifest

    @rule(steps=st.integers(min_value=1, max_value=6))
    def leader_acts(self, steps: int) -> None:
        for _ in range(steps):
            step = leader_step(self.store, CONFIG, self.now)
            if step is None:
                self._check_rejections_recorded()
                return
            self._apply(step)

    def _check_rejections_recorded(self) -> None:
        """The leader is idle: each reportable rejection in the open epoch has its marker."""
        view, _ = self.store.read_view(self.now)
        if view.control is None or not view.control.open_epoch or self.store.leader() is None:
            return
        for ack in view.acks:
            verdict = classify_ack(ack, view.control, view.members, view.latest_manifest)
            assert (rejection_name(ack) in view.rejections) >= verdict.reportable, verdict

    @rule(data=st.data(), change=st.sampled_from(["expire_and_rejoin", "planned_leave"]))
    def commit_races_a_member_change(self, data: st.DataObject, change: str) -> None:
        """The leader computes a commit relying on a node's ack; that node changes before the write."""
        self.every_owner_acks()
        leader = self.store.leader()
        if leader is None:
            return
        view, version = self.store.read_view(self.now)
        step = next_step(view, CONFIG, leader.token)
        if step is None or step.kind != "commit_epoch" or step.manifest is None or not step.manifest.acked_by:
            return
        node = data.draw(st.sampled_from(sorted(n for n, _ in step.manifest.acked_by)))
        if change == "expire_and_rejoin":
            self._drop(node)
            self._enter(node)
        else:
            self.planned_leave(node)
            if self.store.member_versions.get(node) == view.member_fences[node].member_version:  # type: ignore[index]
                return  # already leaving: no change
        try:
            self.store.apply(leader, step, version)
        except FencedError:
            event(f"commit raced {change}: rejected")
            return
        raise AssertionError(f"a commit relying on node {node} survived its {change}")

    @rule()
    def capture_leader_intent(self) -> None:
        """Remember what the current leader would write now (a future zombie write)."""
        leader = self.store.leader()
        if leader is None:
            return
        view, version = self.store.read_view(self.now)
        step = next_step(view, CONFIG, leader.token)
        if step is not None:
            self.stale.append((leader, version, step))

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data())
    def zombie_leader_writes(self, data: st.DataObject) -> None:
        term, version, step = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1)))
        current = self.store.register_and_version()[1]
        try:
            self.store.apply(term, step, version)
        except FencedError:
            return
        event("zombie write accepted (not stale)")
        # Accepted only when it was not stale at all: same live election node, same register version.
        assert term.token - 1 in self.store.candidates and current == version
        self._apply(step, computed_now=False)

    @rule(ms=st.sampled_from([100, 1000, 3000, 6000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule()
    def an_epoch_goes_by(self) -> None:
        """The common case in one rule: the interval passes, the leader opens, owners ack, it commits."""
        self.time_passes(1000)
        self.leader_acts(3)
        self.every_node_reports_ready()
        self.every_owner_acks()
        self.leader_acts(3)

    # ---- nodes --------------------------------------------------------------------------------

    def _ack(self, node: int, boot: str, epoch: int, version: int, cursors: dict, tag: str) -> None:
        ack = EpochAck(node, boot, epoch, version, cursors, (f"{tag}-{node}-{epoch}",))
        try:
            self.store.write_ack(ack)
        except FencedError:  # the epoch's records are gone
            pass

    @rule(node=NODES, only_changed=st.booleans())
    def node_acks(self, node: int, only_changed: bool = False) -> None:
        """A live owner acks its owned cursors: all of them, or (``only_changed``, once it has seen
        the latest committed manifest) those that differ from that manifest's."""
        control, _ = self.store.register_and_version()
        if control is None or not control.open_epoch or node not in self.store.members:
            return
        if node not in control.snapshot.nodes() or control.boot_of(node) != self.boots.get(node):
            return
        latest = self.manifests.get(control.last_epoch)
        base = latest.cursors.get("s", {}) if latest is not None else {}
        self.progress += 1
        full = {k: max(base.get(k, 0), self.progress - (hash(k) % 3) * 2)  # some cursors stay where they were
                for k in owned_keys(control.snapshot.owners, node)}
        sent = {k: v for k, v in full.items() if base.get(k) != v} if only_changed and latest is not None else full
        event(f"ack left out {len(full) - len(sent)} of {len(full)} cursor(s)" if len(sent) < len(full)
              else "ack carried every cursor")
        self.stood_for.setdefault((control.open_epoch, node, self.boots[node]), []).append(full)
        self._ack(node, self.boots[node], control.open_epoch, control.version, {"s": sent}, "live")

    @rule(node=NODES, kind=st.sampled_from(["regress", "foreign"]))
    def invalid_ack(self, node: int, kind: str) -> None:
        """A live owner's current boot acks with invalid content (it must be told, and must replace it)."""
        control, _ = self.store.register_and_version()
        if control is None or not control.open_epoch or node not in self.boots:
            return
        if node not in control.snapshot.nodes() or control.boot_of(node) != self.boots[node]:
            return
        mine = owned_keys(control.snapshot.owners, node)
        latest = self.manifests.get(control.last_epoch)
        cursors = {k: (latest.cursors.get("s", {}).get(k, 0) if latest else 0) + 1 for k in mine}
        if kind == "regress":
            below = [k for k in mine if latest is not None and latest.cursors.get("s", {}).get(k, 0) > 0]
            if not below:
                return
            cursors[below[0]] = latest.cursors["s"][below[0]] - 1  # type: ignore[union-attr]
        else:
            foreign = [k for k in self.all_keys if k not in mine]
            if not foreign:
                return
            cursors[foreign[0]] = 10**9
        self.stood_for.setdefault((control.open_epoch, node, self.boots[node]), []).append(None)
        self._ack(node, self.boots[node], control.open_epoch, control.version, {"s": cursors}, "bad")

    @rule(only_changed=st.booleans())
    def every_owner_acks(self, only_changed: bool = False) -> None:
        for node in sorted(self.store.members):
            self.node_acks(node, only_changed)

    @rule()
    def every_node_reports_ready(self) -> None:
        for node in sorted(self.boots):
            self.node_reports_ready(node)

    @rule(node=NODES, kind=st.sampled_from(["zombie", "version"]))
    def stale_ack(self, node: int, kind: str) -> None:
        """A zombie (an old boot id of a node, maybe live again under a new one) or a live node with
        a wrong version acks the open epoch, with regressed cursors."""
        control, _ = self.store.register_and_version()
        if control is None or not control.open_epoch:
            return
        if kind == "version" and node in self.boots:
            boot, version = self.boots[node], control.version - 1
        elif kind == "zombie" and self.zombie_boots.get(node):
            boot, version = self.zombie_boots[node][-1], control.version
        else:
            return
        # Zombie ack names sort after the live one's, so a wrong "last wins" merge would pick them.
        cursors = {"s": {k: 0 for k in self.all_keys}}
        self._ack(node, boot, control.open_epoch, version, cursors, "stale")

    @rule(node=NODES)
    def node_reports_ready(self, node: int) -> None:
        control, _ = self.store.register_and_version()
        if control is None or control.round is None or node not in self.boots:
            return
        self.store.write_ready(control.round.drain_id, node, self.boots[node])

    # ---- invariants ---------------------------------------------------------------------------

    @invariant()
    def one_decision_per_round(self) -> None:
        control, _ = self.store.register_and_version()
        if control is None:
            return
        outcomes: dict[object, RoundOutcome] = {}
        for decision in control.decisions:
            assert outcomes.setdefault(decision.drain_id, decision.outcome) == decision.outcome
            path = layout.decision_path(decision.drain_id.target_version)
            assert path in self.decided

    @invariant()
    def vnode_map_is_a_partition(self) -> None:
        control, _ = self.store.register_and_version()
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
        control, _ = self.store.register_and_version()
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
            assert not any(o.startswith(("stale", "bad")) for o in manifest.outputs), manifest.outputs
            if epoch == 0:
                previous = manifest
                continue
            recorded = self.boots_at[manifest.assignment_version]
            for node, boot in manifest.acked_by:
                assert recorded.get(node) == boot, (node, boot, recorded)
                contents = [c for c in self.stood_for.get((epoch, node, boot), []) if c is not None]
                if contents:  # a live ack made the epoch: every cursor one of its contents stood for is there
                    held = manifest.cursors.get("s", {})
                    assert any(all(held.get(k) == v for k, v in full.items()) for full in contents), \
                        (epoch, node, contents, held)
            if epoch == 1 and self.initial is not None:
                assert manifest.cursors["gone"] == {"x:0": 7}  # carried: no ack ever names it
            if previous is not None:
                assert previous.epoch == epoch - 1
                for source, parts in previous.cursors.items():
                    for tp, offset in parts.items():
                        assert manifest.cursors[source][tp] >= offset, (tp, offset, manifest.cursors[source][tp])
            previous = manifest


CoordinatorModel.TestCase.settings = settings(max_examples=200, stateful_step_count=80, deadline=None)
TestCoordinatorModel = CoordinatorModel.TestCase
