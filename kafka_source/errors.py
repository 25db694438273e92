"""Kafka's errors: subclasses of the protocol's tree (:mod:`laminar_kafka.connector.errors`).

When the error was caused by the Kafka client (a ``confluent_kafka.KafkaError`` /
``KafkaException``) or another library, that object is kept in ``cause``.
"""
from __future__ import annotations

from typing import Any

from laminar_kafka.connector.errors import CheckpointError, ConnectorError, FatalError

__all__ = ["DecodeError", "ErrorRateExceededError", "OffsetOutOfRangeError"]


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


class ErrorRateExceededError(FatalError):
    """Best-effort delivery skipped more bad records than ``max-error-rate`` allows."""
