"""Vnode assignment: pure registry, routing, placement and round identities, plus coordinators.

The names re-exported here come from the pure modules (no I/O), which :mod:`kafka_source` may import:

- :mod:`laminar_kafka.coordinator.errors`: ``CoordinatorError`` and its subclasses (``CodecError``, ...).
- :mod:`laminar_kafka.coordinator.codec`: strict decoding primitives and the cursor codec (``topic:partition`` keys).
- :mod:`laminar_kafka.coordinator.vnodes.registry`: ``NodeId``, ``UNASSIGNED``, ``AssignmentSnapshot``, ``VnodeRegistry``, ...
- :mod:`laminar_kafka.coordinator.vnodes.routing`: ``partition_vnode`` (LaminarDB routing ABI v1) and grouping helpers.
- :mod:`laminar_kafka.coordinator.vnodes.placement`: ``rendezvous``, ``balanced``, ``place``.
- :mod:`laminar_kafka.coordinator.vnodes.rounds`: ``AssignmentDrainId``, ``drain_digest``, ``round_id``.
- :mod:`laminar_kafka.coordinator.config`, :mod:`laminar_kafka.coordinator.values`, :mod:`laminar_kafka.coordinator.engine.events`: the settings, the
  durable values (``Manifest``, ``EpochAck``, ``Member``) and the events; :mod:`laminar_kafka.coordinator.base`: the
  ``Coordinator`` interface (and every one of those names, re-exported).

The engine: :mod:`laminar_kafka.coordinator.state` (the register, ``ControlState``), :mod:`laminar_kafka.coordinator.engine.steps` (the
leader's ``View`` and its typed ``Step`` intents), :mod:`laminar_kafka.coordinator.engine.model` (``next_step``, the pure
state machine), :mod:`laminar_kafka.coordinator.engine.tracker` (register values -> events), :mod:`laminar_kafka.coordinator.store` (the
one store interface), :mod:`laminar_kafka.coordinator.engine.core` and :mod:`laminar_kafka.coordinator.engine.dispatch` (leader loop, event
dispatch, metrics and validation shared by both backends), :mod:`laminar_kafka.coordinator.layout` (the ZooKeeper
paths, record bytes and chunk codec).

The backends are imported from their modules so that importing this package never pulls in kazoo:
``laminar_kafka.coordinator.zk.coordinator.ZooKeeperCoordinator`` (store: :mod:`laminar_kafka.coordinator.zk.store`, chunk I/O:
:mod:`laminar_kafka.coordinator.zk.chunks`) and ``laminar_kafka.coordinator.local.coordinator.LocalCoordinator`` (store:
:mod:`laminar_kafka.coordinator.local.store`, built on :mod:`laminar_kafka.coordinator.local.memory_store`, which also drives the
stateful model tests).
"""
from __future__ import annotations

from laminar_kafka.coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`laminar_kafka.coordinator.versioning`)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

from laminar_kafka.coordinator.base import (
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
from laminar_kafka.coordinator.errors import (
    CodecError,
    ConfigurationError,
    CoordinatorError,
    FencedError,
    PlacementError,
    RegistryError,
    RoundError,
    RoutingError,
    SessionLostError,
)
from laminar_kafka.coordinator.vnodes.placement import DEFAULT_STRATEGY, STRATEGIES, balanced, place, rendezvous
from laminar_kafka.coordinator.vnodes.registry import (
    DEFAULT_VNODE_COUNT,
    UNASSIGNED,
    AssignmentSnapshot,
    NodeId,
    PendingTarget,
    VnodeRegistry,
    moved_vnodes,
)
from laminar_kafka.coordinator.vnodes.rounds import (
    AssignmentDrainId,
    drain_digest,
    parse_round_id,
    round_id,
)
from laminar_kafka.coordinator.vnodes.routing import (
    TopicPartitionId,
    owned_partitions,
    partition_vnode,
    partitions_by_vnode,
    vnode_loads,
)

__all__ = [
    "__version__",
    "AckRejected",
    "AssignmentChanged",
    "AssignmentDrainId",
    "AssignmentSnapshot",
    "CodecError",
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
    "TopicPartitionId",
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
