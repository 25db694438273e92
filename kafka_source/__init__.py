"""The splittable Kafka source: :class:`KafkaSource`, an implementation of the source-connector
protocol (:mod:`laminar_kafka.connector`), whose names a Kafka user needs are re-exported here."""
from __future__ import annotations

from laminar_kafka.coordinator.versioning import installed_version


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (:mod:`laminar_kafka.coordinator.versioning`)."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import (
    CheckpointError,
    ConfigurationError,
    ConnectorError,
    DrainError,
    FatalError,
    TransientError,
    UnassignedVnodeError,
)
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    ConnectorCancellationPolicy,
    ConnectorConfig,
    ConnectorTaskTracker,
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
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from laminar_kafka.kafka_source.config.source_config import Format, IsolationLevel, KafkaSourceConfig, StartupMode
from laminar_kafka.kafka_source.errors import DecodeError, ErrorRateExceededError, OffsetOutOfRangeError
from laminar_kafka.kafka_source.source import KafkaSource, SourceMetrics

__all__ = [
    "__version__",
    "CheckpointAttempt",
    "CheckpointError",
    "ConfigurationError",
    "ConnectorCancellationPolicy",
    "ConnectorConfig",
    "ConnectorError",
    "ConnectorTaskTracker",
    "DecodeError",
    "DeliveryGuarantee",
    "DrainError",
    "ErrorRateExceededError",
    "FatalError",
    "Format",
    "InitialPosition",
    "IsolationLevel",
    "KafkaClientConfig",
    "KafkaSource",
    "KafkaSourceConfig",
    "OffsetOutOfRangeError",
    "ResumePosition",
    "SourceBatch",
    "SourceCheckpoint",
    "SourceCheckpointUnavailablePolicy",
    "SourceConnector",
    "SourceContract",
    "SourceDrainOutcome",
    "SourceDrainRequest",
    "SourceDrainResolution",
    "SourceMetrics",
    "SourceOrdering",
    "SourcePosition",
    "SourceStart",
    "SourceTopology",
    "StartupMode",
    "TransientError",
    "UnassignedVnodeError",
]
