"""The coordinator interface shared by the ZooKeeper and local backends, and its value types.

A coordinator is the control plane of one pipeline. Every node runs one; at most one of them is the
leader at a time. The node runtime (package `cluster`) talks to it through this interface only.

Threading model (kazoo style): a coordinator is synchronous and thread-safe. Its methods may block
on the network (the runtime calls them in an executor, never on its event loop). Events are
delivered to the subscribed callbacks from a coordinator thread, in order; a callback must not
block (the runtime hands each event to its loop with `call_soon_threadsafe`).

The protocol, as the runtime sees it (DESIGN sections 4 and 5):

1. `start()` joins the pipeline (a member entry carrying node id, boot id and endpoint) and takes part
   in leader election. The leader publishes assignment versions; each version reaches every node
   as `AssignmentChanged`, in increasing version order.
2. Epoch barriers: the leader opens epoch E bound to exactly one assignment version V
   (`EpochOpened`). Each owner at V snapshots its sources, closes its staged output and calls
   `ack_epoch`. When every live owner at V has acked, the leader writes the durable manifest of E
   (`EpochCommitted`); nodes then publish their staged files and call `notify_epoch_committed`.
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

import enum
import json
import logging
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Union

from coordinator.errors import ConfigurationError, CoordinatorError
from coordinator.placement import DEFAULT_STRATEGY, STRATEGIES
from coordinator.registry import DEFAULT_VNODE_COUNT, AssignmentSnapshot, NodeId
from coordinator.rounds import AssignmentDrainId

logger = logging.getLogger(__name__)

# source identity -> "topic:partition" -> next offset to read
Cursors = Mapping[str, Mapping[str, int]]


#: A manifest larger than this is stored as a header plus chunk children (ZooKeeper nodes stay < 1 MB).
MANIFEST_CHUNK_BYTES: int = 512 * 1024


def _decode_cursors(raw: object) -> dict[str, dict[str, int]]:
    if not isinstance(raw, dict):
        raise TypeError("cursors must be an object")
    result: dict[str, dict[str, int]] = {}
    for source, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise TypeError(f"cursors of {source!r} must be an object")
        decoded: dict[str, int] = {}
        for tp, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise TypeError(f"cursor {source}/{tp} = {offset!r} is not an offset")
            decoded[str(tp)] = offset
        result[str(source)] = decoded
    return result


def _encode_cursors(cursors: Cursors) -> dict[str, dict[str, int]]:
    return {s: dict(sorted(c.items())) for s, c in sorted(cursors.items())}


@dataclass(frozen=True)
class CoordinatorConfig:
    """Settings of one pipeline's coordinator (identical on every node of the pipeline).

    `hosts` is a kazoo connection string, optionally with a chroot (`h1:2181,h2:2181/chroot`);
    the pipeline lives under `<root>/<pipeline>`. Durations are in seconds. `manifests_to_keep`
    (K >= 1) bounds garbage collection: the last K manifests, epochs and decided rounds are kept.
    Invalid values raise ConfigurationError on construction.
    """

    pipeline: str
    hosts: str = ""
    session_timeout: float = 10.0
    checkpoint_interval: float = 1.0
    round_deadline: float = 30.0
    vnode_count: int = DEFAULT_VNODE_COUNT
    placement: str = DEFAULT_STRATEGY
    manifests_to_keep: int = 10
    root: str = "/laminar"

    def __post_init__(self) -> None:
        if not self.pipeline or "/" in self.pipeline or self.pipeline in (".", ".."):
            raise ConfigurationError(f"pipeline name {self.pipeline!r} must be a non-empty path segment")
        if not self.root.startswith("/") or self.root.endswith("/") and self.root != "/":
            raise ConfigurationError(f"root {self.root!r} must be an absolute path without a trailing /")
        for name in ("session_timeout", "checkpoint_interval", "round_deadline"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"{name} = {value!r} must be a positive number of seconds")
        if not isinstance(self.vnode_count, int) or isinstance(self.vnode_count, bool) or self.vnode_count < 1:
            raise ConfigurationError(f"vnode_count = {self.vnode_count!r} must be an int >= 1")
        if self.placement not in STRATEGIES:
            raise ConfigurationError(f"placement {self.placement!r} is not one of {list(STRATEGIES)}")
        if not isinstance(self.manifests_to_keep, int) or self.manifests_to_keep < 1:
            raise ConfigurationError(f"manifests_to_keep = {self.manifests_to_keep!r} must be an int >= 1")

    @property
    def base_path(self) -> str:
        """The pipeline's ZooKeeper subtree."""
        return f"{self.root.rstrip('/')}/{self.pipeline}"


class SessionState(enum.Enum):
    """Coordinator session states, as kazoo names them."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


class RoundOutcome(enum.Enum):
    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True)
class Member:
    """A live member of the pipeline."""

    node_id: NodeId
    boot_id: str
    endpoint: str = ""
    leaving: bool = False

    def to_json(self) -> bytes:
        """The member node's data (the node id is the node's name, not part of the data)."""
        return json.dumps(
            {"boot_id": self.boot_id, "endpoint": self.endpoint, "leaving": self.leaving},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, node_id: NodeId, raw: bytes) -> Member:
        """Strict decoding of a member node's data; CoordinatorError when malformed."""
        try:
            data = json.loads(raw)
            if not isinstance(data["boot_id"], str) or not isinstance(data["leaving"], bool):
                raise TypeError("boot_id must be a string and leaving a bool")
            return cls(node_id, data["boot_id"], str(data.get("endpoint", "")), data["leaving"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CoordinatorError(f"malformed member {node_id}: {exc}", cause=exc) from exc


@dataclass(frozen=True)
class EpochAck:
    """A node's answer to an epoch barrier.

    Valid only when `boot_id` is the node's live boot id and `assignment_version` equals the epoch's
    version; otherwise it is rejected (and counted). `cursors` hold exactly the partitions the node
    owned at that version; `outputs` are its staged output paths for this epoch.
    """

    node_id: NodeId
    boot_id: str
    epoch: int
    assignment_version: int
    cursors: Cursors
    outputs: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps({
            "node_id": self.node_id,
            "boot_id": self.boot_id,
            "epoch": self.epoch,
            "assignment_version": self.assignment_version,
            "cursors": _encode_cursors(self.cursors),
            "outputs": list(self.outputs),
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EpochAck:
        """Strict decoding: wrong types or missing fields raise CoordinatorError."""
        try:
            data = json.loads(raw)
            for key in ("node_id", "epoch", "assignment_version"):
                if not isinstance(data[key], int) or isinstance(data[key], bool):
                    raise TypeError(f"{key} must be an int")
            if not isinstance(data["boot_id"], str) or not isinstance(data["outputs"], list):
                raise TypeError("boot_id must be a string and outputs a list")
            return cls(
                node_id=data["node_id"],
                boot_id=data["boot_id"],
                epoch=data["epoch"],
                assignment_version=data["assignment_version"],
                cursors=_decode_cursors(data["cursors"]),
                outputs=tuple(str(o) for o in data["outputs"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CoordinatorError(f"malformed epoch ack: {exc}", cause=exc) from exc


@dataclass(frozen=True)
class Manifest:
    """The durable record of a committed epoch: the truth for recovery.

    `cursors` cover every partition ever owned (a partition missing from every ack keeps its cursor
    from the previous manifest); `outputs` list the staged files to publish for this epoch.
    """

    epoch: int
    assignment_version: int
    cursors: Cursors
    outputs: tuple[str, ...] = ()
    acked_by: tuple[tuple[NodeId, str], ...] = ()

    def to_json(self) -> bytes:
        return json.dumps({
            "epoch": self.epoch,
            "assignment_version": self.assignment_version,
            "cursors": _encode_cursors(self.cursors),
            "outputs": list(self.outputs),
            "acked_by": [list(a) for a in self.acked_by],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        """Strict decoding: wrong types or missing fields raise CoordinatorError."""
        try:
            data = json.loads(raw)
            cursors = {
                str(source): {str(tp): int(offset) for tp, offset in partitions.items()}
                for source, partitions in data["cursors"].items()
            }
            return cls(
                epoch=int(data["epoch"]),
                assignment_version=int(data["assignment_version"]),
                cursors=cursors,
                outputs=tuple(str(o) for o in data["outputs"]),
                acked_by=tuple((int(n), str(b)) for n, b in data["acked_by"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CoordinatorError(f"malformed manifest: {exc}", cause=exc) from exc


def initial_manifest(cursors: Cursors, assignment_version: int = 0) -> Manifest:
    """The pipeline's initial manifest for `pin_start`: epoch 0, no outputs, no acks, `cursors` = the
    start position resolved once (per source identity, `topic:partition` -> next offset to read)."""
    return Manifest(0, assignment_version, {s: dict(c) for s, c in cursors.items()})


def check_initial_manifest(manifest: Manifest) -> None:
    """Raise CoordinatorError unless `manifest` is an initial manifest (epoch 0, no outputs, no acks)."""
    if manifest.epoch != 0 or manifest.outputs or manifest.acked_by:
        raise CoordinatorError(
            f"an initial manifest has epoch 0, no outputs and no acks; got epoch {manifest.epoch}, "
            f"{len(manifest.outputs)} outputs, {len(manifest.acked_by)} acks"
        )


#: Kafka's legal topic names (what `pin_topic_ids` accepts as a path segment).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def check_topic_ids(ids: Mapping[str, str]) -> None:
    """Raise ConfigurationError unless every key is a legal Kafka topic name and every id a non-empty str."""
    for topic, topic_id in ids.items():
        if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise ConfigurationError(f"topic name {topic!r} is not a legal Kafka topic name")
        if not isinstance(topic_id, str) or not topic_id:
            raise ConfigurationError(f"topic id {topic_id!r} of {topic!r} must be a non-empty str")


# ---- events delivered to subscribers -----------------------------------------------------------


@dataclass(frozen=True)
class AssignmentChanged:
    """A new assignment version is published.

    `manifest_epoch`: for partitions this node acquires without a drain (a dead node's, or the very
    first assignment), the epoch of the manifest whose cursors they start from (0 = no epoch has
    committed yet: start from the pinned initial manifest, `manifest(0)`).
    """

    snapshot: AssignmentSnapshot
    manifest_epoch: int = 0


@dataclass(frozen=True)
class RoundStarted:
    """A live rebalance round: drain what you lose under `target_owners`, then `report_drain_ready`."""

    drain_id: AssignmentDrainId
    target_owners: tuple[int, ...]
    deadline_unix_ms: int


@dataclass(frozen=True)
class RoundDecided:
    """The create-once decision of a round. On COMMIT the handoff cursors are those of
    manifest `manifest_epoch`."""

    drain_id: AssignmentDrainId
    outcome: RoundOutcome
    manifest_epoch: int


@dataclass(frozen=True)
class EpochOpened:
    epoch: int
    assignment_version: int


@dataclass(frozen=True)
class EpochCommitted:
    manifest: Manifest


@dataclass(frozen=True)
class AckRejected:
    """The leader rejected this node's ack of the open epoch `epoch` (of this boot) for `reason`.

    Delivered once per rejected ack content. The epoch cannot commit until this node sends a valid
    replacement ack for it: retire the source generation, drop the staged output of `epoch`, restart
    from `latest_manifest()` and call `ack_epoch` again (see the module docstring, point 5).
    """

    epoch: int
    reason: str


@dataclass(frozen=True)
class SessionStateChanged:
    state: SessionState


CoordinatorEvent = Union[
    AssignmentChanged, RoundStarted, RoundDecided, EpochOpened, EpochCommitted, AckRejected,
    SessionStateChanged,
]
EventCallback = Callable[[CoordinatorEvent], None]


class Subscribers:
    """The event callbacks of one coordinator: thread-safe registration, and delivery in order
    where one failing subscriber is logged and never keeps an event from the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[EventCallback] = []

    def add(self, callback: EventCallback) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def deliver(self, events: Iterable[CoordinatorEvent]) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for event in events:
            for callback in callbacks:
                try:
                    callback(event)
                except Exception:  # noqa: BLE001 - one subscriber must not break the others
                    logger.exception("subscriber failed on %s", type(event).__name__)


@dataclass
class CoordinatorMetrics:
    """Counters a coordinator keeps; the cluster exports them on /metrics."""

    fenced_writes_rejected: int = 0
    stale_acks_rejected: int = 0
    stale_ready_rejected: int = 0
    epochs_committed: int = 0
    rounds_committed: int = 0
    rounds_aborted: int = 0
    nodes_shed: int = 0
    leader_elections_won: int = 0
    session_state: str = SessionState.CONNECTED.value
    extra: dict[str, int] = field(default_factory=dict)

    def bump(self, name: str, amount: int = 1) -> None:
        """Add `amount` to the counter `name` (a field, or else an entry of `extra`)."""
        if name in _METRIC_FIELDS:
            setattr(self, name, getattr(self, name) + amount)
        else:
            self.extra[name] = self.extra.get(name, 0) + amount


_METRIC_FIELDS: frozenset[str] = frozenset({
    "fenced_writes_rejected", "stale_acks_rejected", "stale_ready_rejected", "epochs_committed",
    "rounds_committed", "rounds_aborted", "nodes_shed", "leader_elections_won",
})


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
    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        """Tell the coordinator how many partitions each vnode carries (balanced placement input).

        Any node may call it; the leader uses the latest value for its next placement.
        """
