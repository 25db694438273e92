"""Vnode assignment: pure registry, routing, placement and round identities, plus coordinators.

The names re-exported here come from the pure modules (no I/O), which :mod:`kafka_source` may import:

- :mod:`coordinator.errors`: ``CoordinatorError`` and its subclasses (``CodecError``, ...).
- :mod:`coordinator.codec`: strict decoding primitives and the cursor codec (``topic:partition`` keys).
- :mod:`coordinator.registry`: ``NodeId``, ``UNASSIGNED``, ``AssignmentSnapshot``, ``VnodeRegistry``, ...
- :mod:`coordinator.routing`: ``partition_vnode`` (LaminarDB routing ABI v1) and grouping helpers.
- :mod:`coordinator.placement`: ``rendezvous``, ``balanced``, ``place``.
- :mod:`coordinator.rounds`: ``AssignmentDrainId``, ``drain_digest``, ``round_id``.
- :mod:`coordinator.config`, :mod:`coordinator.values`, :mod:`coordinator.events`: the settings, the
  durable values (``Manifest``, ``EpochAck``, ``Member``) and the events; :mod:`coordinator.base`: the
  ``Coordinator`` interface (and every one of those names, re-exported).

The engine: :mod:`coordinator.state` (the register, ``ControlState``), :mod:`coordinator.steps` (the
leader's ``View`` and its typed ``Step`` intents), :mod:`coordinator.model` (``next_step``, the pure
state machine), :mod:`coordinator.tracker` (register values -> events), :mod:`coordinator.store` (the
one store interface), :mod:`coordinator.engine` and :mod:`coordinator.dispatch` (leader loop, event
dispatch, metrics and validation shared by both backends), :mod:`coordinator.layout` (the ZooKeeper
paths, record bytes and chunk codec).

The backends are imported from their modules so that importing this package never pulls in kazoo:
``coordinator.zk.ZooKeeperCoordinator`` (store: :mod:`coordinator.zk_store`, chunk I/O:
:mod:`coordinator.zk_chunks`) and ``coordinator.local.LocalCoordinator`` (store:
:mod:`coordinator.local_store`, built on :mod:`coordinator.memory_store`, which also drives the
stateful model tests).
"""
from __future__ import annotations

from coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`coordinator.versioning`)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
