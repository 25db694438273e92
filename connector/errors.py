"""The exception tree of the source-connector protocol.

Every error a connector raises through the protocol is a :class:`ConnectorError` or the
distribution's one :class:`~laminar_kafka.errors.ConfigurationError` (re-exported here; not a
ConnectorError: a caller that handles every protocol error catches both); its class says what the
caller may do: :class:`TransientError` is worth a retry (a new generation), after a
:class:`FatalError` the generation is never called again, :class:`ConfigurationError`,
:class:`CheckpointError` and :class:`DrainError` reject one call or value. A connector's own errors
subclass these (Kafka's in ``laminar_kafka.kafka_source.errors``, Redis's in
``laminar_kafka.redis_source.errors``). When the error was caused by a client library,
that object is kept in :attr:`ConnectorError.cause` so callers can inspect codes without parsing text.
"""
from __future__ import annotations

from laminar_kafka.errors import ConfigurationError, LaminarError


class ConnectorError(LaminarError):
    """Root of the protocol's errors (a :class:`~laminar_kafka.errors.LaminarError`).

    ``cause`` holds the underlying library error (``KafkaError``, ``KafkaException``,
    ``pyarrow.ArrowInvalid``, ...) or ``None`` when the error originates here.
    """


class CheckpointError(ConnectorError):
    """A checkpoint cannot be decoded, or cannot be honoured exactly by the broker."""


class DrainError(ConnectorError):
    """A drain round cannot be started, observed or resolved."""


class TransientError(ConnectorError):
    """A retryable failure (broker unavailable, timeout); the connector state is unchanged."""


class FatalError(ConnectorError):
    """The connector generation cannot continue and must be retired."""


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


__all__ = [
    "CheckpointError",
    "ConfigurationError",
    "ConnectorError",
    "DrainError",
    "FatalError",
    "TransientError",
    "UnassignedVnodeError",
]
