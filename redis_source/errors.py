"""The Redis Streams connector's errors: one root, :class:`RedisSourceError`, each also the
protocol's error that tells the node runtime what to do:

- :class:`RedisUnavailable` (a TransientError): the server does not answer (refused, reset, timed
  out, loading its data after a restart). The generation is retired and the next starts from the
  last durable checkpoint about a second later, for as long as the outage lasts, never counted
  as a failure.
- :class:`RedisCommandError` and :class:`StreamIdError` (FatalErrors): the server answered with an
  error (a key that is not a stream, a script refused, no permission) or an entry ID cannot be an
  offset. Counted: past ``max_generation_failures`` in a row the node stops, naming it.
- :class:`RedisConfigError` (a ConfigurationError): a property is missing or invalid.
"""
from __future__ import annotations

from laminar_kafka.connector.errors import ConnectorError, FatalError, TransientError
from laminar_kafka.errors import ConfigurationError

__all__ = ["RedisCommandError", "RedisConfigError", "RedisSourceError", "RedisUnavailable", "StreamIdError"]


class RedisSourceError(ConnectorError):
    """Root of the connector's errors."""


class RedisUnavailable(RedisSourceError, TransientError):
    """The server did not answer (the message names it and the call)."""


class RedisCommandError(RedisSourceError, FatalError):
    """The server answered a call with an error."""


class StreamIdError(RedisSourceError, FatalError):
    """A stream entry ID this connector cannot turn into an offset (malformed, or a sequence number
    past :data:`~laminar_kafka.redis_source.ids.MAX_SEQUENCE`)."""


class RedisConfigError(RedisSourceError, ConfigurationError):
    """A connector property is missing or invalid (the message names it)."""
