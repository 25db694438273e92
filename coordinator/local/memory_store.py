"""MemoryStore: the :class:`~laminar_kafka.coordinator.store.ControlStore` with ZooKeeper's semantics, in memory.

Records live at the paths of :mod:`laminar_kafka.coordinator.layout` in a dict of versioned nodes; member entries
are ephemeral (data version 0 on every creation) and election candidates sequential, as in
ZooKeeper. A step is checked completely (term, register version, fences, create-once, parents) before
anything is written, so it applies all-or-nothing. The stateful model tests drive the pure model
through it, and :class:`laminar_kafka.coordinator.local.store.LocalStore` adds durable files on top of it.
Thread-safe (one lock).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.engine.steps import MemberFence, Step, View
from laminar_kafka.coordinator.errors import FencedError, RoundError
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.store import ControlStore, EpochGone, Leadership, StoredManifest
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

__all__ = ["MemoryStore"]


class MemoryStore(ControlStore):
    """See the module docstring. ``nodes``: path -> (data, data version)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, tuple[bytes, int]] = {folder: (b"", 0) for folder in layout.FOLDERS}
        self.members: dict[int, Member] = {}
        self.member_versions: dict[int, int] = {}
        self.candidates: dict[int, tuple[int, str]] = {}  # seq -> (node, boot)
        self.next_seq = 0

    # ---- membership (ephemeral member entries and election candidates) --------------------------

    def register(self, member: Member) -> Leadership:
        """A new session's member entry (data version 0) and election candidate; returns the term it
        would lead with."""
        with self.lock:
            self.members[member.node_id] = member
            self.member_versions[member.node_id] = 0
            seq = self.next_seq
            self.candidates[seq] = (member.node_id, member.boot_id)
            self.next_seq += 1
            return Leadership(seq + 1, self.candidate_name(seq))

    def update_member(self, member: Member) -> None:
        """set_data on the member entry (a planned leave): its version grows."""
        with self.lock:
            self.members[member.node_id] = member
            self.member_versions[member.node_id] = self.member_versions.get(member.node_id, 0) + 1

    def unregister(self, node: int) -> None:
        """The session ends: its member entry and election candidates are gone."""
        with self.lock:
            self.members.pop(node, None)
            self.member_versions.pop(node, None)
            for seq in [s for s, (n, _) in self.candidates.items() if n == node]:
                del self.candidates[seq]

    @staticmethod
    def candidate_name(seq: int) -> str:
        return f"{layout.CANDIDATE_PREFIX}{seq:010d}"

    def leader(self) -> Leadership | None:
        """The term of the lowest candidate (None when nobody stands)."""
        with self.lock:
            if not self.candidates:
                return None
            seq = min(self.candidates)
            return Leadership(seq + 1, self.candidate_name(seq))

    def member_fences(self) -> dict[int, MemberFence]:
        """As the ZooKeeper store reads them: member data version + the election node of its boot."""
        result = {}
        for node, member in self.members.items():
            seqs = [s for s, (n, b) in self.candidates.items() if (n, b) == (node, member.boot_id)]
            if seqs:
                result[node] = MemberFence(node, self.member_versions.get(node, 0), self.candidate_name(max(seqs)))
        return result

    def children(self, folder: str) -> list[str]:
        prefix = folder + "/"
        return sorted(p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    # ---- the leader's side ------------------------------------------------------------------------

    def _check(self, path: str, version: int) -> None:
        if path.startswith(layout.MEMBERS + "/"):
            node = int(path.split("/", 1)[1])
            if node not in self.members or self.member_versions.get(node, 0) != version:
                raise FencedError(f"check {path} at {version} failed")
        elif path.startswith(layout.LEADER + "/"):
            if layout.candidate_seq(path) not in self.candidates or version != 0:
                raise FencedError(f"check {path} at {version} failed")
        elif path not in self.nodes or self.nodes[path][1] != version:
            raise FencedError(f"check {path} at {version} failed")

    def validate(self, term: Leadership, step: Step, expected_version: int) -> list[tuple[str, bytes]]:
        """Every check of :meth:`apply`, without writing; returns the records to create."""
        with self.lock:
            if layout.candidate_seq(term.candidate) not in self.candidates:
                raise FencedError(f"leader write rejected ({step.kind}): election node gone")
            current = self.nodes.get(layout.ASSIGNMENT)
            if (current is not None) != (expected_version >= 0) \
                    or current is not None and current[1] != expected_version:
                raise FencedError(f"leader write rejected ({step.kind}): the register moved")
            for fence in step.fences:
                for path, version in layout.fence_checks(fence):
                    self._check(path, version)
            creates = [record for intent in step.intents for record in layout.intent_records(intent)]
            pending: set[str] = set()
            for path, _ in creates:
                parent = path.rsplit("/", 1)[0]
                if path in self.nodes or path in pending:
                    raise FencedError(f"leader write rejected ({step.kind}): {path} exists")
                if "/" in path and parent not in self.nodes and parent not in pending:
                    raise FencedError(f"leader write rejected ({step.kind}): no parent for {path}")
                pending.add(path)
            return creates

    def apply(self, term: Leadership, step: Step, expected_version: int) -> None:
        with self.lock:
            self.write(self.validate(term, step, expected_version), step)

    def write(self, creates: list[tuple[str, bytes]], step: Step) -> None:
        """The writes of a validated step (caller holds the lock)."""
        current = self.nodes.get(layout.ASSIGNMENT)
        self.nodes[layout.ASSIGNMENT] = (step.control.to_json(), 0 if current is None else current[1] + 1)
        for path, data in creates:
            self.nodes[path] = (data, 0)

    def collect_garbage(self, term: Leadership, control: ControlState, keep: int) -> None:
        with self.lock:
            for folder, limit in ((layout.CHECKPOINTS, control.last_epoch - keep),
                                  (layout.EPOCHS, control.last_epoch - keep), (layout.ROUNDS, control.version - keep)):
                for name in self.children(folder):
                    if name.isdigit() and 0 < int(name) <= limit:
                        doomed = f"{folder}/{name}"
                        for path in [p for p in self.nodes if p == doomed or p.startswith(doomed + "/")]:
                            del self.nodes[path]

    def read_view(self, now_ms: int) -> tuple[View, int]:
        with self.lock:
            control, version = self._register()
            acks: list[EpochAck] = []
            ready: set[tuple[int, str]] = set()
            rejections: set[str] = set()
            latest = None
            if control is not None:
                if control.open_epoch:
                    folder = layout.acks_folder(control.open_epoch)
                    acks = [EpochAck.from_json(self.nodes[f"{folder}/{n}"][0]) for n in self.children(folder)]
                    rejections = set(self.children(layout.rejected_folder(control.open_epoch)))
                if control.round is not None:
                    ready = {layout.parse_ack_name(n)
                             for n in self.children(layout.ready_folder(control.round.drain_id.target_version))}
                if control.last_epoch:
                    latest = self.read_manifest(control.last_epoch)
            if latest is None:
                latest = self.read_manifest(0)
            load = self.nodes.get(layout.VNODE_LOAD)
            wanted = self.nodes.get(layout.EPOCH_WANTED)
            view = View(control, dict(self.members), now_ms, tuple(acks), frozenset(ready),
                        layout.parse_vnode_load(load[0]) if load else {}, latest, self.view_fences(),
                        frozenset(rejections), layout.parse_epoch_wanted(wanted[0]) if wanted else 0)
            return view, version

    def view_fences(self) -> Mapping[int, MemberFence] | None:
        """The member fences a view carries (None: this store does not fence members)."""
        return self.member_fences()

    # ---- the nodes' side ------------------------------------------------------------------------

    def _register(self) -> tuple[ControlState | None, int]:
        current = self.nodes.get(layout.ASSIGNMENT)
        return (None, -1) if current is None else (ControlState.from_json(current[0]), current[1])

    def register_and_version(self) -> tuple[ControlState | None, int]:
        """The register and its data version (-1: none yet)."""
        with self.lock:
            return self._register()

    def read_register(self) -> ControlState | None:
        with self.lock:
            return self._register()[0]

    def read_manifest(self, epoch: int) -> Manifest | None:
        with self.lock:
            node = self.nodes.get(layout.checkpoint_path(epoch))
        return None if node is None else Manifest.from_json(node[0])

    def read_rejection(self, epoch: int, name: str) -> str | None:
        with self.lock:
            node = self.nodes.get(layout.rejection_path(epoch, name))
        return None if node is None else layout.parse_rejection(node[0])

    # ---- an observer's side (read only) ---------------------------------------------------------

    def read_members(self) -> dict[int, Member]:
        with self.lock:
            return dict(self.members)

    def read_leader(self) -> int | None:
        with self.lock:
            return self.candidates[min(self.candidates)][0] if self.candidates else None

    def read_stored_manifest(self, epoch: int) -> StoredManifest | None:
        """As :meth:`read_manifest`; this store keeps no write time (``written_at`` None)."""
        manifest = self.read_manifest(epoch)
        return None if manifest is None else StoredManifest(manifest, None)

    def create(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """A non-leader write: FencedError if the parent is gone, or if it exists unless ``overwrite``."""
        with self.lock:
            if path.rsplit("/", 1)[0] not in self.nodes:
                raise EpochGone(f"{path}: parent gone")
            if path in self.nodes:
                if not overwrite:
                    raise FencedError(f"{path} exists")
                self.nodes[path] = (data, self.nodes[path][1] + 1)
                return
            self.nodes[path] = (data, 0)

    def write_ack(self, ack: EpochAck) -> None:
        self.create(layout.ack_path(ack.epoch, ack.node_id, ack.boot_id), ack.to_json(), overwrite=True)

    def write_ready(self, drain_id: AssignmentDrainId, node_id: int, boot_id: str) -> None:
        try:
            self.create(layout.ready_path(drain_id.target_version, node_id, boot_id), b"", overwrite=True)
        except EpochGone as exc:
            raise RoundError(f"round {drain_id} no longer exists", cause=exc) from exc

    def pin_initial(self, manifest: Manifest) -> Manifest:
        path = layout.checkpoint_path(0)
        with self.lock:
            if path not in self.nodes:
                self.nodes[path] = (manifest.to_json(), 0)
            return Manifest.from_json(self.nodes[path][0])

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        with self.lock:
            self.nodes.setdefault(layout.TOPICS, (b"", 0))
            for topic, topic_id in ids.items():
                self.nodes.setdefault(layout.topic_path(topic), (topic_id.encode(), 0))
            return {t: self.nodes[layout.topic_path(t)][0].decode() for t in ids}

    def pin_setting(self, name: str, value: str | None) -> str | None:
        with self.lock:
            if value is not None:
                self.nodes.setdefault(layout.SETTINGS, (b"", 0))
                self.nodes.setdefault(layout.setting_path(name), (value.encode(), 0))
            stored = self.nodes.get(layout.setting_path(name))
            return None if stored is None else stored[0].decode()

    def reset(self, seed: Manifest) -> None:
        with self.lock:
            folders = tuple(f"{folder}/" for folder in (layout.EPOCHS, layout.ROUNDS, layout.CHECKPOINTS))
            for path in [p for p in self.nodes if p == layout.ASSIGNMENT or p.startswith(folders)]:
                del self.nodes[path]
            if seed.epoch:
                self.nodes[layout.checkpoint_path(seed.epoch)] = (seed.to_json(), 0)
            self.nodes[layout.checkpoint_path(0)] = (seed.to_json(), 0)

    def write_epoch_wanted(self, after_epoch: int) -> None:
        with self.lock:
            current = self.nodes.get(layout.EPOCH_WANTED)
            if current is None or layout.parse_epoch_wanted(current[0]) < after_epoch:
                self.nodes[layout.EPOCH_WANTED] = (layout.epoch_wanted_data(after_epoch),
                                                   0 if current is None else current[1] + 1)

    def write_vnode_load(self, load: Mapping[int, int]) -> None:
        with self.lock:
            current = self.nodes.get(layout.VNODE_LOAD)
            self.nodes[layout.VNODE_LOAD] = (layout.vnode_load_data(load), 0 if current is None else current[1] + 1)
