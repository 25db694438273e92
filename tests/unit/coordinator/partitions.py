"""An in-memory compare-and-set store with ZooKeeper's semantics for what the model needs:
versioned nodes, create-once, ephemeral members (data version 0 on every creation) and sequential
election candidates, atomic multi-ops with version checks."""
from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.base import CoordinatorConfig, EpochAck, Manifest, Member
from coordinator.model import ControlState, Step, View, epoch_name, next_step, parse_ack_name
from coordinator.rounds import round_id

INITIAL = f"checkpoints/{epoch_name(0)}"


class Rejected(Exception):
    """A transaction failed one of its checks; nothing was applied."""


def candidate_path(seq: int) -> str:
    return f"leader/candidate-{seq:010d}"


@dataclass
class MemoryStore:
    nodes: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    member_versions: dict[int, int] = field(default_factory=dict)
    candidates: dict[int, tuple[int, str]] = field(default_factory=dict)  # seq -> (node, boot)
    next_seq: int = 0

    # ---- membership (ephemeral member entries and election candidates) --------------------------

    def register(self, member: Member) -> int:
        """A new session's member entry (data version 0) and election candidate; returns its seq."""
        self.members[member.node_id] = member
        self.member_versions[member.node_id] = 0
        seq = self.next_seq
        self.candidates[seq] = (member.node_id, member.boot_id)
        self.next_seq += 1
        return seq

    def update_member(self, member: Member) -> None:
        """set_data on the member entry (a planned leave): its version grows."""
        self.members[member.node_id] = member
        self.member_versions[member.node_id] = self.member_versions.get(member.node_id, 0) + 1

    def unregister(self, node: int) -> None:
        """The session ends: its member entry and election candidates are gone."""
        self.members.pop(node, None)
        self.member_versions.pop(node, None)
        for seq in [s for s, (n, _) in self.candidates.items() if n == node]:
            del self.candidates[seq]

    # ---- writes ---------------------------------------------------------------------------------

    def _check(self, path: str, version: int) -> None:
        if path.startswith("members/"):
            node = int(path.split("/", 1)[1])
            if node not in self.members or self.member_versions.get(node, 0) != version:
                raise Rejected(f"check {path} at {version} failed")
        elif path.startswith("leader/candidate-"):
            if int(path[len("leader/candidate-"):]) not in self.candidates or version != 0:
                raise Rejected(f"check {path} at {version} failed")
        elif path not in self.nodes or self.nodes[path][1] != version:
            raise Rejected(f"check {path} at {version} failed")

    def transaction(self, candidate_seq: int, expected_version: int, control: ControlState,
                    creates: tuple[tuple[str, bytes], ...], checks: tuple[tuple[str, int], ...] = ()) -> None:
        """check(candidate) + set/create(assignment, version) + checks + creates, all or nothing."""
        if candidate_seq not in self.candidates:
            raise Rejected("election node gone")
        current = self.nodes.get("assignment")
        if expected_version < 0:
            if current is not None:
                raise Rejected("assignment exists")
        elif current is None or current[1] != expected_version:
            raise Rejected("assignment version moved")
        for path, version in checks:
            self._check(path, version)
        pending: set[str] = set()
        for path, _ in creates:
            if path in self.nodes or path in pending:
                raise Rejected(f"{path} exists")
            parent = path.rsplit("/", 1)[0]
            if parent.count("/") > 0 and parent not in self.nodes and parent not in pending:
                raise Rejected(f"no parent for {path}")
            pending.add(path)
        self.nodes["assignment"] = (control.to_json(), 0 if current is None else current[1] + 1)
        for path, data in creates:
            self.nodes[path] = (data, 0)

    def create(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """A non-leader write (acks, receipts): fails if the parent is gone, or if it exists unless
        `overwrite` (the ZooKeeper backend re-acks under the same boot id with a set)."""
        if path.rsplit("/", 1)[0] not in self.nodes:
            raise Rejected(path)
        if path in self.nodes:
            if not overwrite:
                raise Rejected(path)
            self.nodes[path] = (data, self.nodes[path][1] + 1)
            return
        self.nodes[path] = (data, 0)

    def pin_start(self, manifest: Manifest) -> Manifest:
        """Create-once the initial manifest; returns the stored one."""
        if INITIAL not in self.nodes:
            self.nodes[INITIAL] = (manifest.to_json(), 0)
        return Manifest.from_json(self.nodes[INITIAL][0])

    # ---- reads ----------------------------------------------------------------------------------

    def control(self) -> tuple[ControlState | None, int]:
        current = self.nodes.get("assignment")
        if current is None:
            return None, -1
        return ControlState.from_json(current[0]), current[1]

    def children(self, prefix: str) -> list[str]:
        return sorted(p[len(prefix) + 1:] for p in self.nodes if p.startswith(prefix + "/") and "/" not in p[len(prefix) + 1:])

    def leader(self) -> tuple[int, int, str] | None:
        if not self.candidates:
            return None
        seq = min(self.candidates)
        return seq, *self.candidates[seq]

    def member_checks(self) -> dict[int, tuple[tuple[str, int], ...]]:
        """As the ZooKeeper backend reads them: member data version + the election node of its boot."""
        result = {}
        for node, member in self.members.items():
            seqs = [s for s, (n, b) in self.candidates.items() if (n, b) == (node, member.boot_id)]
            if seqs:
                result[node] = ((f"members/{node}", self.member_versions.get(node, 0)),
                                (candidate_path(max(seqs)), 0))
        return result

    def view(self, now_ms: int, load: dict[int, int] | None = None) -> tuple[View, int]:
        control, version = self.control()
        acks: list[EpochAck] = []
        ready: set[tuple[int, str]] = set()
        rejections: set[str] = set()
        latest = None
        if control is not None:
            if control.open_epoch:
                prefix = f"epochs/{epoch_name(control.open_epoch)}/acks"
                acks = [EpochAck.from_json(self.nodes[f"{prefix}/{n}"][0]) for n in self.children(prefix)]
                rejections = set(self.children(f"epochs/{epoch_name(control.open_epoch)}/rejected"))
            if control.round is not None:
                prefix = f"rounds/{round_id(control.round.drain_id.target_version)}/ready"
                ready = {parse_ack_name(n) for n in self.children(prefix)}
            if control.last_epoch:
                latest = Manifest.from_json(self.nodes[f"checkpoints/{epoch_name(control.last_epoch)}"][0])
        if latest is None and INITIAL in self.nodes:
            latest = Manifest.from_json(self.nodes[INITIAL][0])
        view = View(control, dict(self.members), now_ms, tuple(acks), frozenset(ready), load or {}, latest,
                    self.member_checks(), frozenset(rejections))
        return view, version

    def leader_step(self, config: CoordinatorConfig, now_ms: int) -> Step | None:
        """Run one step of the current leader; returns the applied step (None: nothing to do)."""
        leader = self.leader()
        if leader is None:
            return None
        seq, _, _ = leader
        view, version = self.view(now_ms)
        step = next_step(view, config, seq + 1)
        if step is not None:
            self.transaction(seq, version, step.control, step.creates, step.checks)
        return step


#: The test pipeline's partitions: topic "t" of source identity "s" (24 partitions cover all 8 vnodes).
SOURCE, TOPIC, PARTITIONS = "s", "t", range(24)


def partition_table(vnode_count: int) -> dict[int, tuple[str, ...]]:
    """``{vnode: ("t:p", ...)}`` for the test partitions, routed by the routing ABI."""
    from coordinator.routing import partitions_by_vnode

    groups = partitions_by_vnode(SOURCE, [(TOPIC, p) for p in PARTITIONS], vnode_count)
    return {v: tuple(f"{t}:{p}" for t, p in tps) for v, tps in groups.items()}


def owned_keys(owners: tuple[int, ...], node: int) -> list[str]:
    """The test partitions whose vnode `node` owns under `owners`."""
    table = partition_table(len(owners))
    return sorted(k for v, keys in table.items() if owners[v] == node for k in keys)
