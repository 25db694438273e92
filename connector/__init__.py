"""The source-connector protocol: what a connector implements and everything it is built from.

One import for an implementer (``from laminar_kafka.connector import ...``), and nothing of Kafka:
Kafka (:mod:`laminar_kafka.kafka_source`) and Redis Streams (:mod:`laminar_kafka.redis_source`) are
two implementations of it, run by the same node runtime.

- The protocol and its values: :class:`SourceConnector` (the abstract connector: start, poll,
  checkpoint, vnode ownership, drains), :class:`SourceStart`, :class:`SourceBatch`, the policies
  and the drain values (:mod:`laminar_kafka.connector.protocol` states each call's contract).
- The checkpoint: :class:`SourceCheckpoint`, the exact cursor a batch is bound to, stamped with its
  connector's name; :class:`CursorFormat`, the hook by which a connector names itself and checks
  the cursors it is given.
- The errors: :class:`ConnectorError` and its tree.
- Where a new connector starts: :class:`PartitionedLogSource` implements the whole protocol, vnode
  mode included, over a partitioned log with integer positions; a subclass gives its partitions
  (:meth:`~PartitionedLogSource.log_partitions`), reads (:meth:`~PartitionedLogSource.read_records`,
  returning :class:`PartitionRead` values) and advisory commits.
- Vnode ownership and drains as pure state machines (:class:`Ownership`, :class:`DrainProgress`),
  used by every connector here.
- The conformance kit, :mod:`laminar_kafka.connector.conformance` (needs the ``kit`` extra:
  ``pip install 'laminar-kafka[kit]'``): the protocol's contract as pytest tests.

A partition is a :data:`TopicPartitionId`, ``(name, partition)``: the name of the partitioned
log (a Kafka topic, a Redis stream family) and the partition number; the vnode it routes to is
:func:`partition_vnode` of the source identity, the name and the partition.

``docs/connector-guide.md`` walks through a complete connector and its conformance test.
"""
from __future__ import annotations

from laminar_kafka.connector.checkpoint import CHECKPOINT_FORMAT_VERSION, UNNAMED, CursorFormat, SourceCheckpoint
from laminar_kafka.connector.drain import DrainPhase, DrainProgress, FinishPlan
from laminar_kafka.connector.errors import (
    CheckpointError,
    ConfigurationError,
    ConnectorError,
    DrainError,
    FatalError,
    TransientError,
    UnassignedVnodeError,
)
from laminar_kafka.connector.log_source import PartitionedLogSource, PartitionRead, row_schema
from laminar_kafka.connector.ownership import Ownership, Reconcile
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    ConnectorCancellationPolicy,
    ConnectorConfig,
    DeliveryGuarantee,
    InitialPosition,
    ResumePosition,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourceContract,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceOrdering,
    SourcePosition,
    SourceStart,
    SourceTopology,
)
from laminar_kafka.connector.tasks import ConnectorTaskTracker
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "UNNAMED",
    "CheckpointAttempt",
    "CheckpointError",
    "ConfigurationError",
    "ConnectorCancellationPolicy",
    "ConnectorConfig",
    "ConnectorError",
    "ConnectorTaskTracker",
    "CursorFormat",
    "DeliveryGuarantee",
    "DrainError",
    "DrainPhase",
    "DrainProgress",
    "FatalError",
    "FinishPlan",
    "InitialPosition",
    "Ownership",
    "PartitionRead",
    "PartitionedLogSource",
    "Reconcile",
    "ResumePosition",
    "SourceBatch",
    "SourceCheckpoint",
    "SourceCheckpointUnavailablePolicy",
    "SourceConnector",
    "SourceContract",
    "SourceDrainOutcome",
    "SourceDrainRequest",
    "SourceDrainResolution",
    "SourceOrdering",
    "SourcePosition",
    "SourceStart",
    "SourceTopology",
    "TopicPartitionId",
    "TransientError",
    "UnassignedVnodeError",
    "partition_vnode",
    "row_schema",
]
