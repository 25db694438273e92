"""The coordinator interface shared by the ZooKeeper and local backends, and its value types.

A coordinator is the control plane of one pipeline. Every node runs one; at most one of them is the
leader at a time. The node runtime (package `cluster`) talks to it through this interface only.

Threading model (kazoo style): a coordinator is synchronous and thread-safe. Its methods may block
on the network (the runtime calls them in an executor, never on its event loop). Events are
delivered to the subscribed callbacks from a coordinator thread, in order; a callback must not
block (the runtime hands each event to its loop with `call_soon_threadsafe`).

The protocol, as the runtime sees it:

1. `start()` joins the pipeline (a member entry carrying node id, boot id and endpoint) and takes part
   in leader election. The leader publishes assignment versions; each version reaches every node
   as `AssignmentChanged`, in increasing version order.
2. Epoch barriers: the leader opens epoch E bound to exactly one assignment version V
   (`EpochOpened`). Each owner at V snapshots its sources, closes its staged output and calls
   `ack_epoch`. When every live owner at V has acked, the leader writes the durable manifest of E
   (`EpochCommitted`); nodes then publish their staged files and call `notify_epoch_committed`.
   The manifest of E overlays the acks' cursors on manifest E-1's (the latest committed while E is
   open), so an ack may leave out a partition whose cursor has not moved since manifest E-1.
   Epochs never straddle versions: a new version is published only while no epoch is open, so
   an epoch's acks all speak of one ownership map. Epochs are opened one at a time, in order.
3. Live rebalance (join, planned leave): `RoundStarted(drain_id, target)` asks every predecessor
   owner to drain the vnodes it loses; each node calls `report_drain_ready` when its sources are
   drained. The leader then opens an epoch at the predecessor version whose manifest contains the
   cut, and decides create-once: commit publishes version V+1 = target; abort (deadline, failure,
   death of a participant) publishes V+1 = predecessor owners. `RoundDecided` carries the outcome
   and the epoch of the manifest whose cursors are the handoff cursors.
4. A dead node (session expired): the leader completes the open epoch without it (its partitions
   carry their last durable cursor; its ack, if any, and its staged output are dropped), then
   publishes a version that moves its vnodes without a drain. New owners start from the cursors
   of the manifest named in `AssignmentChanged.manifest_epoch`.
5. A rejected ack: when the leader rejects an ack of a node's live, current boot (a cursor below the
   previous manifest's, or a cursor of a partition the node does not own at the epoch's version), it
   records the rejection durably and the node receives `AckRejected(epoch, reason)`, once per rejected
   ack content. The epoch cannot commit while that owner is required: the node retires its source
   generation, drops its staged output of that epoch, restarts from `latest_manifest()` and sends a
   replacement ack for the same open epoch (`ack_epoch` overwrites its previous ack). The leader
   classifies the latest ack content on every pass, so a valid replacement lets the epoch commit.
6. Pinned start: before any node reads, the runtime resolves the start position once and calls
   `pin_start` with it; every node uses the manifest it returns (the first one pinned wins). Until an
   epoch commits, `latest_manifest()` is that initial manifest (epoch 0), and the first real manifest
   carries its cursors for every partition no ack named. `pin_topic_ids` records each topic's Kafka id
   once, so a topic deleted and re-created under the same name is detected.
7. Session states: `SessionStateChanged(SUSPENDED)` means stop admitting new epochs;
   `LOST` means the node's membership is gone: the runtime retires its source generations and drops
   unstaged output, then calls `rejoin()`, which registers again with a new boot id.
   `SessionStateChanged(CONNECTED)` follows a SUSPENDED that ended on the same session, and a rejoin.

Event order (watches may coalesce register changes; the backends still deliver a causal order):
for one observed change, EpochCommitted of epochs bound to older versions, then RoundDecided
(only for rounds whose RoundStarted this node saw), then AssignmentChanged of the new version, then
EpochCommitted of epochs at the new version, then RoundStarted, then EpochOpened. So a round's
RoundDecided always immediately precedes the AssignmentChanged of its target version, and the cut
epoch's EpochCommitted precedes both. An AckRejected follows the EpochOpened of its epoch.
Intermediate versions may be skipped (versions only grow).

Which nodes must answer: `ack_epoch` from every owner at the epoch's version (an owner that dies
is excused, its partitions keep their last durable cursor); `report_drain_ready` from every
predecessor owner that loses at least one vnode (nodes that only gain vnodes never drain).
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ContextManager

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.events import (
    AckRejected,
    AssignmentChanged,
    CoordinatorEvent,
    CoordinatorMetrics,
    EpochCommitted,
    EpochOpened,
    EventCallback,
    RoundDecided,
    RoundStarted,
    SessionState,
    SessionStateChanged,
    Subscribers,
)
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.layout import MANIFEST_CHUNK_BYTES
from laminar_kafka.coordinator.values import (
    Cursors,
    EpochAck,
    Manifest,
    Member,
    RoundOutcome,
    check_initial_manifest,
    check_topic_ids,
    initial_manifest,
)
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, NodeId
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

# The values, events and config are defined in their own modules and re-exported here (the names
# every importer of this module has always used).
__all__ = [
    "MANIFEST_CHUNK_BYTES", "AckRejected", "AssignmentChanged", "Coordinator", "CoordinatorConfig",
    "CoordinatorEvent", "CoordinatorMetrics", "Cursors", "EpochAck", "EpochCommitted", "EpochOpened",
    "EventCallback", "Manifest", "Member", "RoundDecided", "RoundOutcome", "RoundStarted", "SessionState",
    "SessionStateChanged", "Subscribers", "check_initial_manifest", "check_topic_ids", "initial_manifest",
]


class Coordinator(ABC):
    """The control plane of one pipeline, seen from one node. See the module docstring."""

    node_id: NodeId

    @property
    @abstractmethod
    def boot_id(self) -> str:
        """The boot id of the current membership (changes on `rejoin`)."""

    @property
    @abstractmethod
    def metrics(self) -> CoordinatorMetrics: ...

    @abstractmethod
    def subscribe(self, callback: EventCallback) -> None:
        """Deliver every later event to `callback` (from a coordinator thread, in order)."""

    @abstractmethod
    def start(self, timeout: float = 30.0) -> None:
        """Connect, register membership and join leader election.

        After it returns, the current published assignment (if any) has been delivered as an
        `AssignmentChanged` event. Raises CoordinatorError when the backend is unreachable in time.
        """

    @abstractmethod
    def stop(self) -> None:
        """Leave: remove the membership entry and close the session. Idempotent."""

    @abstractmethod
    def rejoin(self) -> None:
        """After LOST: register again with a new boot id (the old one is fenced forever)."""

    @abstractmethod
    def is_leader(self) -> bool: ...

    @abstractmethod
    def members(self) -> tuple[Member, ...]: ...

    @abstractmethod
    def assignment(self) -> AssignmentSnapshot:
        """The latest published assignment this node has seen."""

    @abstractmethod
    def request_leave(self) -> None:
        """Planned leave: ask the leader to move this node's vnodes away with a drain round.

        The node keeps serving until an `AssignmentChanged` leaves it no vnode; then it calls `stop()`.
        """

    @abstractmethod
    def report_drain_ready(self, drain_id: AssignmentDrainId) -> None:
        """Record that this node's sources consumed the drain boundary of `drain_id`.

        Raises RoundError when the round is not the running one (stale or superseded).
        """

    @abstractmethod
    def ack_epoch(self, ack: EpochAck) -> None:
        """Record this node's barrier ack for the open epoch, replacing an earlier ack of this boot.

        Idempotent: if `ack.epoch` already committed and its manifest's `acked_by` holds
        `(ack.node_id, ack.boot_id)`, it returns normally (a retry whose first answer was lost).
        Raises FencedError when the boot id is not this live membership, the version is not the open
        epoch's, or the epoch closed (committed without this boot's ack, or gone). Raises
        CoordinatorError when the write may or may not have happened (retry it).
        """

    @abstractmethod
    def latest_manifest(self) -> Manifest | None:
        """The newest committed manifest; before the first commit the pinned initial manifest
        (epoch 0); None when neither exists."""

    @abstractmethod
    def manifest(self, epoch: int) -> Manifest:
        """The committed manifest of `epoch`, or for 0 the pinned initial manifest (CoordinatorError
        if absent or garbage-collected; the initial manifest is never collected)."""

    @abstractmethod
    def pin_start(self, manifest: Manifest) -> Manifest:
        """Create-once the pipeline's durable initial manifest and return the stored one.

        `manifest` must be an initial manifest (see `initial_manifest`; else CoordinatorError): its
        cursors are the start position the caller resolved once. If an initial manifest is already
        stored, it is returned unchanged and `manifest` is discarded: the caller must use what this
        returns, never its own. Call after `start()`.
        """

    @abstractmethod
    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        """Create-once a durable record of each topic's Kafka topic id; return the durable id of
        every topic in `ids` (an existing record wins over the given id).

        The caller compares the result with the ids it sees and fails loudly when a topic's id changed
        (the topic was deleted and re-created). Topic names must be legal Kafka names and ids non-empty
        (ConfigurationError otherwise). Call after `start()`.
        """

    @abstractmethod
    def pin_setting(self, name: str, value: str | None) -> str | None:
        """Create-once the pipeline-wide setting ``name`` (e.g. a record schema discovered from a
        sample, which every node and every restart must share) and return the stored value: the first
        value pinned wins, later ones are discarded. ``value`` None only reads: the stored value, or
        None when nothing is pinned. ``name`` is ``[a-z0-9._-]+`` (ConfigurationError otherwise).
        Never pin a secret. Call after `start()`.
        """

    def connect(self, timeout: float = 30.0) -> None:
        """Reach the control state without joining (no membership, no election), so a node can
        reconcile it with the lake before it takes part (`reconcile_lock`, `latest_manifest`, `manifest`,
        `members`, `rebase` work after it). `start()` connects when this was not called. Idempotent;
        `stop()` disconnects. Raises CoordinatorError when the backend is unreachable in time. The
        default does nothing, for a backend with nothing to reach before `start()`."""
        return None

    def reconcile_lock(self) -> ContextManager[None]:
        """A block that at most one node of the pipeline is in at a time (the start-up reconciliation
        with the lake). Raises CoordinatorError when it is not acquired in a bounded time."""
        return contextlib.nullcontext()

    def rebase(self, seed: Manifest) -> None:
        """Replace the pipeline's epoch state by ``seed`` (an initial manifest whose epoch S is above
        every epoch used before): no register, no manifest but ``seed`` (also the pinned initial
        manifest), no epoch or round. The next leader publishes version 1 with epochs continuing after
        S, and every generation starts from ``seed``'s cursors. Pinned topic ids and settings stay.
        Only inside `reconcile_lock`, after `connect()` and before `start()`, while no other member
        is live (the caller checks `members()`)."""
        raise CoordinatorError(f"{type(self).__name__} cannot rebase its control state")

    def request_epoch(self, after_epoch: int) -> None:
        """Ask the leader for the epoch after ``after_epoch`` (the latest this node saw committed):
        the node holds rows no epoch covers. Advisory: a leader waiting the quiet checkpoint
        interval (``CoordinatorConfig.quiet_checkpoint_interval``) opens the next epoch at the
        ordinary interval instead; otherwise nothing changes. A coordinator without quiet
        intervals ignores it. Raises :class:`CoordinatorError` when the ask was not written
        (the caller asks again later)."""
        return None

    @abstractmethod
    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        """Tell the coordinator how many partitions each vnode carries (balanced placement input).

        Any node may call it; the leader uses the latest value for its next placement.
        """
