"""The node runtime's values: its options, its phase, a drain round's progress, and pure helpers.

Everything here is a value or a pure function (no I/O, no clock): the state the runtime keeps is
named by these types instead of by combinations of flags.
"""
from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from laminar_kafka.cluster.lake.reconcile import OnLakeBehind
from laminar_kafka.connector.checkpoint import parse_key
from laminar_kafka.connector.protocol import ConnectorConfig, DeliveryGuarantee
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import partition_vnode

__all__ = [
    "ActiveRound",
    "RoundProgress",
    "HandoffRecord",
    "LeaveRequest",
    "RuntimeOptions",
    "RuntimePhase",
    "ack_cursors",
    "changed_cursors",
    "pinned_start_config",
]

#: seconds between two attempts to send an ack that failed transiently
ACK_RETRY_S = 0.5
#: seconds before a source start that failed transiently is tried again
START_RETRY_S = 1.0
#: how long past its own deadline a connector call may run before the runtime cancels it
CANCEL_GRACE_S = 0.5


@dataclass(frozen=True)
class FreshnessPolicy:
    """How soon a row must be visible (``target_s`` > 0) and the staged bytes (``target_bytes``, 0:
    none) that call for an epoch whatever the clock."""

    target_s: float
    target_bytes: int = 0


@dataclass(frozen=True)
class RuntimeOptions:
    """The settings of one node's runtime. Durations are in seconds."""

    node_id: int
    source_identity: str
    connector: ConnectorConfig
    max_batch_records: int = 10000
    vnode_mode: bool = True
    start_timeout_s: float = 30.0
    leave_timeout_s: float = 120.0
    #: consecutive source generations that may fail before the node gives up (reset by a commit)
    max_generation_failures: int = 5
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE
    #: how often the topics' metadata is read (new partitions, new matching topics); 0 = never
    topology_interval_s: float = 10.0
    #: a ``poll_batch`` running longer than this is cancelled (then the cancellation policy applies)
    poll_timeout_s: float = 30.0
    #: the deadline given to ``finish_drain``; the call is cancelled shortly after it
    finish_drain_timeout_s: float = 30.0
    #: how long a retired generation's detached tasks (``terminal_task_tracker``) may take to end
    retire_wait_s: float = 30.0
    #: connector properties known only once the pipeline's settings are pinned (e.g. the JSON schema
    #: a first node inferred): read at every generation start and laid over ``connector``'s
    pinned_properties: Callable[[], Mapping[str, str]] | None = None
    #: how many recent manifests the coordinator keeps (``manifests_to_keep``): publishing an epoch
    #: looks back at most that far for earlier epochs the lake does not show yet
    manifests_kept: int = 10
    #: the pipeline's name, as the lake's records carry it
    pipeline: str = "default"
    #: ask for an epoch (``Coordinator.request_epoch``) when holding rows and no epoch came this long
    #: after the last commit (the leader may wait a quiet interval); None: never ask
    epoch_ask_after_s: float | None = None
    #: the freshness target (``freshness-target-ms``): the node asks for epochs by need; None: off
    freshness: FreshnessPolicy | None = None
    #: what a start does when the lake is behind the control state (:mod:`laminar_kafka.cluster.lake.reconcile`)
    on_lake_behind: OnLakeBehind = OnLakeBehind.REWIND

    def connector_config(self) -> ConnectorConfig:
        """``connector`` with :attr:`pinned_properties` laid over it."""
        if self.pinned_properties is None:
            return self.connector
        return ConnectorConfig(self.connector.connector_type, {**self.connector.properties, **self.pinned_properties()})


class RuntimePhase(enum.Enum):
    """Where the node is in its membership. Transitions::

        JOINING -> RUNNING <-> REJOINING
        RUNNING -> STOPPING (a stop request) | LEFT (a planned leave completed)

    A planned leave is a request carried beside the phase (it survives a rejoin).
    """

    #: reading the topology, joining the pipeline, pinning the start, recovering the sink
    JOINING = "joining"
    #: serving: epochs, rounds, source generations
    RUNNING = "running"
    #: the session was lost (or an ack fenced): no generation runs until the rejoin succeeds
    REJOINING = "rejoining"
    #: stop requested: the loop ends at its next check, no generation starts
    STOPPING = "stopping"
    #: the planned leave completed: this node owns no vnode any more
    LEFT = "left"

    @property
    def is_final(self) -> bool:
        return self in (RuntimePhase.STOPPING, RuntimePhase.LEFT)


class RoundProgress(enum.Enum):
    """How far this node is in a round's drain."""

    #: the round started; ``begin_drain`` has not been accepted yet (retried every turn)
    ANNOUNCED = "announced"
    #: ``begin_drain`` accepted; ``poll_drain_ready`` is asked every turn
    BEGUN = "begun"
    #: drained and ``report_drain_ready`` sent: waiting for the decision
    REPORTED = "reported"


@dataclass(frozen=True)
class ActiveRound:
    """The round this node takes part in, from ``RoundStarted`` to ``RoundDecided``.

    ``deadline`` and ``started`` are :func:`time.monotonic` values.
    """

    drain_id: AssignmentDrainId
    deadline: float
    started: float
    progress: RoundProgress = RoundProgress.ANNOUNCED

    def advanced(self, progress: RoundProgress) -> ActiveRound:
        return replace(self, progress=progress)

    def for_next_generation(self) -> ActiveRound:
        """The round as a new source generation sees it: begun again unless already reported."""
        if self.progress is RoundProgress.BEGUN:
            return self.advanced(RoundProgress.ANNOUNCED)
        return self


@dataclass(frozen=True)
class LeaveRequest:
    """A planned leave: when it was asked for (:func:`time.monotonic`), and whether the leader was asked yet."""

    requested_at: float
    sent: bool = False


@dataclass(frozen=True)
class HandoffRecord:
    """One partition this node acquired: how long it was paused (round start to first row here)."""

    partition: str
    pause_s: float


def ack_cursors(
    offsets: Mapping[str, int], source_identity: str, snapshot: AssignmentSnapshot | None, node_id: int
) -> dict[str, int]:
    """The ``"topic:partition" -> next offset`` map of an ack: the ``offsets`` (a checkpoint's) of
    the partitions whose vnode ``node_id`` owns in ``snapshot`` (routed one by one, so a partition
    that appeared after start counts like any other); all of them when ``snapshot`` is None (the
    node reads everything). Pure."""
    if snapshot is None:
        return dict(offsets)
    owners, count = snapshot.owners, snapshot.vnode_count
    return {key: offset for key, offset in offsets.items() if owners[_key_vnode(source_identity, key, count)] == node_id}


@functools.lru_cache(maxsize=1 << 16)
def _key_vnode(source_identity: str, key: str, vnode_count: int) -> int:
    """The vnode of the partition ``key`` names (routing hashes; every epoch asks again for the same keys)."""
    topic, partition = parse_key(key)
    return partition_vnode(source_identity, topic, partition, vnode_count)


def changed_cursors(cursors: Mapping[str, int], base: Mapping[str, int]) -> dict[str, int]:
    """The cursors of ``cursors`` that differ from (or are missing in) ``base``: what an ack must carry
    when ``base`` is the cursors of the manifest the leader overlays it on. Pure.

    The leader merges an epoch's acks over the previous manifest (a partition no ack names keeps its
    cursor), so an ack of epoch E whose node saw manifest E-1 committed may leave out every partition
    whose cursor did not move since: the merged manifest is the same, and ZooKeeper writes follow what
    changed rather than every partition the node owns."""
    return {key: offset for key, offset in cursors.items() if base.get(key) != offset}


def pinned_start_config(connector: ConnectorConfig, cursors: dict[str, int]) -> ConnectorConfig:
    """``connector`` starting exactly at the pinned initial manifest's ``cursors``: startup mode
    ``specific-offsets`` with them (partitions they lack start at their first offset), or
    ``earliest`` when there are none (a pattern that matched no topic at start). Pure."""
    properties = {k: v for k, v in connector.properties.items() if not k.startswith(("startup-", "startup."))}
    if cursors:
        properties["startup-mode"] = "specific-offsets"
        properties["startup-specific-offsets"] = ",".join(f"{key}:{offset}" for key, offset in sorted(cursors.items()))
    else:
        properties["startup-mode"] = "earliest"
    return ConnectorConfig(connector.connector_type, properties)
