"""The one exception tree of ``kafka_source``.

Every error raised by the package is a :class:`ConnectorError`. When the error was caused by the
Kafka client (a ``confluent_kafka.KafkaError`` / ``KafkaException``) or another library, that
object is kept in :attr:`ConnectorError.cause` so callers can inspect codes without parsing text.
"""
from __future__ import annotations

from typing import Any


class ConnectorError(Exception):
    """Root of every error raised by ``kafka_source``.

    ``cause`` holds the underlying library error (``KafkaError``, ``KafkaException``,
    ``pyarrow.ArrowInvalid``, ...) or ``None`` when the error originates here.
    """

    def __init__(self, message: str, *, cause: Any = None) -> None:
        super().__init__(message)
        self.cause: Any = cause


class ConfigurationError(ConnectorError):
    """The configuration, a startup request or a protocol call is invalid for this connector."""


class CheckpointError(ConnectorError):
    """A checkpoint cannot be decoded, or cannot be honoured exactly by the broker."""


class OffsetOutOfRangeError(CheckpointError):
    """A requested offset lies outside the partition's retained range ``[low, high]``.

    Raised under guaranteed delivery instead of silently resetting the position.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        offset: int,
        low: int | None = None,
        high: int | None = None,
        cause: Any = None,
    ) -> None:
        super().__init__(message, cause=cause)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.low = low
        self.high = high


class DrainError(ConnectorError):
    """A drain round cannot be started, observed or resolved."""


class TransientError(ConnectorError):
    """A retryable failure (broker unavailable, timeout); the connector state is unchanged."""


class FatalError(ConnectorError):
    """The connector generation cannot continue and must be retired."""


class DecodeError(ConnectorError):
    """A record's payload does not decode under the configured format and schema.

    ``topic``, ``partition`` and ``offset`` identify the first offending record.
    """

    def __init__(
        self, message: str, *, topic: str, partition: int, offset: int, cause: Any = None
    ) -> None:
        super().__init__(message, cause=cause)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class UnassignedVnodeError(FatalError):
    """A published owner map leaves vnodes that route partitions of this source unassigned while
    other vnodes have owners.

    The coordinator assigns every vnode or none (none: before the first publication, or with no
    live member), so such a map is a control-plane bug; reading it would silently leave the
    partitions of ``vnodes`` unread. ``version`` is the map's assignment version.
    """

    def __init__(self, message: str, *, version: int, vnodes: tuple[int, ...]) -> None:
        super().__init__(message)
        self.version = version
        self.vnodes = vnodes


class ErrorRateExceededError(FatalError):
    """Best-effort delivery skipped more bad records than ``max.error.rate`` allows."""


__all__ = [
    "CheckpointError",
    "ConfigurationError",
    "ConnectorError",
    "DecodeError",
    "DrainError",
    "ErrorRateExceededError",
    "FatalError",
    "OffsetOutOfRangeError",
    "TransientError",
    "UnassignedVnodeError",
]
