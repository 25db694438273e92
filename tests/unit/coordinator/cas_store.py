"""An in-memory compare-and-set store with ZooKeeper's semantics for what the model needs:
versioned nodes, create-once, ephemeral members and sequential election candidates, atomic multi-ops."""
from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.base import CoordinatorConfig, EpochAck, Manifest, Member
from coordinator.model import ControlState, Step, View, epoch_name, next_step, parse_ack_name
from coordinator.rounds import round_id


class Rejected(Exception):
    """A transaction failed one of its checks; nothing was applied."""


@dataclass
class MemoryStore:
    nodes: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    candidates: dict[int, tuple[int, str]] = field(default_factory=dict)  # seq -> (node, boot)
    next_seq: int = 0

    def transaction(self, candidate_seq: int, expected_version: int, control: ControlState,
                    creates: tuple[tuple[str, bytes], ...]) -> None:
        """check(candidate) + set/create(assignment, version) + creates, all or nothing."""
        if candidate_seq not in self.candidates:
            raise Rejected("election node gone")
        current = self.nodes.get("assignment")
        if expected_version < 0:
            if current is not None:
                raise Rejected("assignment exists")
        elif current is None or current[1] != expected_version:
            raise Rejected("assignment version moved")
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

    def view(self, now_ms: int, load: dict[int, int] | None = None) -> tuple[View, int]:
        control, version = self.control()
        acks: list[EpochAck] = []
        ready: set[tuple[int, str]] = set()
        latest = None
        if control is not None:
            if control.open_epoch:
                prefix = f"epochs/{epoch_name(control.open_epoch)}/acks"
                acks = [EpochAck.from_json(self.nodes[f"{prefix}/{n}"][0]) for n in self.children(prefix)]
            if control.round is not None:
                prefix = f"rounds/{round_id(control.round.drain_id.target_version)}/ready"
                ready = {parse_ack_name(n) for n in self.children(prefix)}
            if control.last_epoch:
                latest = Manifest.from_json(self.nodes[f"checkpoints/{epoch_name(control.last_epoch)}"][0])
        return View(control, dict(self.members), now_ms, tuple(acks), frozenset(ready), load or {}, latest), version

    def leader_step(self, config: CoordinatorConfig, now_ms: int) -> Step | None:
        """Run one step of the current leader; returns the applied step (None: nothing to do)."""
        leader = self.leader()
        if leader is None:
            return None
        seq, _, _ = leader
        view, version = self.view(now_ms)
        step = next_step(view, config, seq + 1)
        if step is not None:
            self.transaction(seq, version, step.control, step.creates)
        return step
