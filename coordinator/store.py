"""The one store interface every coordinator backend adapts: :class:`ControlStore`.

A store holds one pipeline's durable control state (the register, manifests, acks, drain receipts,
decisions, rejection markers, pins, vnode loads) and offers exactly the operations the engine
(:mod:`laminar_kafka.coordinator.engine.core`) needs:

- the leader's side: :meth:`~ControlStore.read_view` (the :class:`~laminar_kafka.coordinator.engine.steps.View` and the
  register version it was read at) and :meth:`~ControlStore.apply`, which executes a
  :class:`~laminar_kafka.coordinator.engine.steps.Step` as ONE compare-and-set: it checks the leader's term (its election
  is still held), the register version and the step's member fences, then replaces the register and
  creates the step's intents (a decision is create-once), or raises :class:`FencedError` and changes
  nothing;
- the nodes' side: versioned reads of the register and of manifests, the writes of acks and drain
  receipts, and the create-once pins;
- an observer's side (``laminar-kafka status``, which never joins the pipeline): the live members,
  the elected leader, and a manifest with the time it was stored. These only read.

Three adapters: :class:`laminar_kafka.coordinator.zk.store.ZooKeeperStore` (kazoo), :class:`laminar_kafka.coordinator.local.store.
LocalStore` (files with fsync, one process) and :class:`laminar_kafka.coordinator.local.memory_store.MemoryStore` (ZooKeeper's
semantics in memory: the stateful model tests).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from laminar_kafka.coordinator.engine.steps import Step, View
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

__all__ = ["Leadership", "EpochGone", "StoredManifest", "ControlStore"]


@dataclass(frozen=True)
class Leadership:
    """A leader's term: its fencing token and its election candidate (a name under ``leader/``,
    or an absolute path for the ZooKeeper store)."""

    token: int
    candidate: str


class EpochGone(FencedError):
    """An ack was written for an epoch whose records no longer exist (committed and collected)."""


@dataclass(frozen=True)
class StoredManifest:
    """A manifest as the store holds it, and when it was written there: seconds since the epoch
    (ZooKeeper's modification time of its node, a file's mtime), None when the store keeps no time."""

    manifest: Manifest
    written_at: float | None


class ControlStore(ABC):
    """See the module docstring. Implementations are thread-safe."""

    # ---- the leader's side ------------------------------------------------------------------------

    @abstractmethod
    def read_view(self, now_ms: int) -> tuple[View, int]:
        """The leader's view at wall-clock ``now_ms`` and the register version it was read at
        (-1: no register yet)."""

    @abstractmethod
    def apply(self, term: Leadership, step: Step, expected_version: int) -> None:
        """Execute ``step`` all-or-nothing (see the module docstring); FencedError when rejected."""

    @abstractmethod
    def collect_garbage(self, term: Leadership, control: ControlState, keep: int) -> None:
        """Delete manifests, epochs and decided rounds older than the last ``keep`` (never the pinned
        initial manifest). Best effort: a failure is logged and retried after a later commit."""

    # ---- the nodes' side ------------------------------------------------------------------------

    @abstractmethod
    def read_register(self) -> ControlState | None:
        """The register as stored now (None before the first publication)."""

    @abstractmethod
    def read_manifest(self, epoch: int) -> Manifest | None:
        """Manifest ``epoch`` (0: the pinned initial manifest), or None when absent or still being
        written; CodecError when malformed."""

    @abstractmethod
    def read_rejection(self, epoch: int, name: str) -> str | None:
        """The reason of the rejection marker ``name`` of ``epoch`` (None when absent)."""

    @abstractmethod
    def write_ack(self, ack: EpochAck) -> None:
        """Create or overwrite the ack of ``(ack.node_id, ack.boot_id)`` for ``ack.epoch``.

        EpochGone when the epoch's records are gone; CoordinatorError when the write may or may not
        have happened.
        """

    @abstractmethod
    def write_ready(self, drain_id: AssignmentDrainId, node_id: int, boot_id: str) -> None:
        """Record a drain receipt (idempotent); RoundError when the round's records are gone."""

    @abstractmethod
    def pin_initial(self, manifest: Manifest) -> Manifest:
        """Create-once the pinned initial manifest; return the stored one."""

    @abstractmethod
    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """Create-once one record per topic; return the stored id of every topic in ``ids``."""

    @abstractmethod
    def pin_setting(self, name: str, value: str | None) -> str | None:
        """Create-once one pipeline setting (``value`` None: only read); return the stored value."""

    @abstractmethod
    def write_vnode_load(self, load: Mapping[int, int]) -> None:
        """Replace the vnode load (placement input)."""

    @abstractmethod
    def write_epoch_wanted(self, after_epoch: int) -> None:
        """Ask for the epoch after ``after_epoch`` (``View.epoch_wanted_after``); never lowers it."""

    # ---- an observer's side (read only) ---------------------------------------------------------

    @abstractmethod
    def read_members(self) -> dict[int, Member]:
        """The members with a live session, by node id (an ended session's entry is gone); empty
        before the first member joined."""

    @abstractmethod
    def read_leader(self) -> int | None:
        """The node id of the elected leader: the lowest election candidate. None when nobody
        stands, or when that candidate's entry vanished or is malformed while it was read."""

    @abstractmethod
    def read_stored_manifest(self, epoch: int) -> StoredManifest | None:
        """Manifest ``epoch`` (0: the pinned initial manifest) as stored now, with its write time;
        None when absent. Strict, for an observer: where :meth:`read_manifest` answers None for a
        chunked manifest whose chunks do not match its header (being written), this raises
        :class:`~laminar_kafka.coordinator.layout.ChunkPending` (a committed manifest is never being
        written: the commit that names it publishes its header). CodecError when malformed."""

    # ---- recovery -------------------------------------------------------------------------------

    @abstractmethod
    def reset(self, seed: Manifest) -> None:
        """Replace the pipeline's epoch state with ``seed`` (see :meth:`laminar_kafka.coordinator.base.Coordinator.rebase`):
        delete the register, every manifest, epoch and round; then store ``seed`` as manifest
        ``seed.epoch`` and as the pinned initial manifest (slot 0). Pinned topic ids and settings,
        members and the vnode load stay. Each step is idempotent: a reset interrupted by a crash leaves
        no register, so the next start reconciles again. Only while no leader runs (the caller's
        own is paused, and no other member is live)."""


def require_manifest(store: ControlStore, epoch: int) -> Manifest:
    """Manifest ``epoch`` from ``store``; CoordinatorError when absent (never written, or collected)."""
    manifest = store.read_manifest(epoch)
    if manifest is None:
        raise CoordinatorError(f"manifest {epoch} does not exist (never committed or pinned, or collected)")
    return manifest
