"""Vnode assignment: pure registry, routing, placement and round identities, plus coordinators.

The names re-exported here come from the pure modules (no I/O), which :mod:`kafka_source` may import:

- :mod:`coordinator.errors`: ``CoordinatorError`` and its subclasses.
- :mod:`coordinator.registry`: ``NodeId``, ``UNASSIGNED``, ``AssignmentSnapshot``, ``VnodeRegistry``, ...
- :mod:`coordinator.routing`: ``partition_vnode`` (LaminarDB routing ABI v1) and grouping helpers.
- :mod:`coordinator.placement`: ``rendezvous``, ``balanced``, ``place``.
- :mod:`coordinator.rounds`: ``AssignmentDrainId``, ``drain_digest``, ``round_id``.
- :mod:`coordinator.base`: the ``Coordinator`` interface, ``CoordinatorConfig``, events and values.

The backends are imported from their modules so that importing this package never pulls in kazoo:
``coordinator.zk.ZooKeeperCoordinator`` (with :mod:`coordinator.zk_leader`, the leader's reads and
fenced writes, and :mod:`coordinator.zk_store`, chunked nodes and create-once records) and
``coordinator.local.LocalCoordinator``. The pure round/epoch state machine they share is
:mod:`coordinator.model` (its register type and node names are in :mod:`coordinator.state`).
"""
from __future__ import annotations

from coordinator.base import (
    MANIFEST_CHUNK_BYTES,
    AckRejected,
    AssignmentChanged,
    Coordinator,
    CoordinatorConfig,
    CoordinatorEvent,
    CoordinatorMetrics,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    EventCallback,
    Manifest,
    Member,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
    SessionState,
    SessionStateChanged,
    check_initial_manifest,
    check_topic_ids,
    initial_manifest,
)
from coordinator.errors import (
    ConfigurationError,
    CoordinatorError,
    FencedError,
    PlacementError,
    RegistryError,
    RoundError,
    RoutingError,
    SessionLostError,
)
from coordinator.placement import DEFAULT_STRATEGY, STRATEGIES, balanced, place, rendezvous
from coordinator.registry import (
    DEFAULT_VNODE_COUNT,
    UNASSIGNED,
    AssignmentSnapshot,
    NodeId,
    PendingTarget,
    VnodeRegistry,
    moved_vnodes,
)
from coordinator.rounds import (
    AssignmentDrainId,
    drain_digest,
    parse_round_id,
    round_id,
)
from coordinator.routing import (
    TopicPartition,
    owned_partitions,
    partition_vnode,
    partitions_by_vnode,
    vnode_loads,
)

__all__ = [
    "AckRejected",
    "AssignmentChanged",
    "AssignmentDrainId",
    "AssignmentSnapshot",
    "ConfigurationError",
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorError",
    "CoordinatorEvent",
    "CoordinatorMetrics",
    "DEFAULT_STRATEGY",
    "DEFAULT_VNODE_COUNT",
    "EpochAck",
    "EpochCommitted",
    "EpochOpened",
    "EventCallback",
    "FencedError",
    "MANIFEST_CHUNK_BYTES",
    "Manifest",
    "Member",
    "NodeId",
    "PendingTarget",
    "PlacementError",
    "RegistryError",
    "RoundDecided",
    "RoundError",
    "RoundOutcome",
    "RoundStarted",
    "RoutingError",
    "STRATEGIES",
    "SessionLostError",
    "SessionState",
    "SessionStateChanged",
    "TopicPartition",
    "UNASSIGNED",
    "VnodeRegistry",
    "balanced",
    "check_initial_manifest",
    "check_topic_ids",
    "drain_digest",
    "initial_manifest",
    "moved_vnodes",
    "owned_partitions",
    "parse_round_id",
    "partition_vnode",
    "partitions_by_vnode",
    "place",
    "rendezvous",
    "round_id",
    "vnode_loads",
]
