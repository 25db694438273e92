"""The Redis Streams connector's errors: one root, :class:`RedisSourceError`.

It is a :class:`~laminar_kafka.kafka_source.errors.FatalError` (the generation ends; the node runtime
builds the next from the last durable checkpoint), except a bad configuration, which is the
protocol's :class:`~laminar_kafka.kafka_source.errors.ConfigurationError` as well.
"""
from __future__ import annotations

from laminar_kafka.kafka_source.errors import ConfigurationError, FatalError

__all__ = ["RedisConfigError", "RedisSourceError", "StreamIdError"]


class RedisSourceError(FatalError):
    """Root of the connector's errors."""


class StreamIdError(RedisSourceError):
    """A stream entry ID this connector cannot turn into an offset (malformed, or a sequence number
    past :data:`~laminar_kafka.redis_source.ids.MAX_SEQUENCE`)."""


class RedisConfigError(RedisSourceError, ConfigurationError):
    """A connector property is missing or invalid (the message names it)."""
