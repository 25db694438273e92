"""The Redis Streams connector's typed configuration, parsed strictly from connector properties.

Properties (``ConnectorConfig.properties``, all strings):

===================  =========================================================================
``redis.url``        required: ``redis://host:port/db`` (``rediss://`` for TLS; user and password
                     in the URL when the server asks for them)
``stream``           required: the stream family; its partitions are the streams ``<stream>:<n>``
``partitions``       required: how many (``<stream>:0`` .. ``<stream>:<partitions - 1>``)
``value.field``      the entry field that becomes the ``value`` column (default ``value``; an
                     entry without it lands with a null value)
``committed.key``    the hash where advisory offsets go after each committed epoch, field
                     ``<n>`` -> the last entry ID landed (``XREAD`` from it continues; default
                     ``<stream>:committed``; never moved backwards)
``timeout.ms``       socket timeout of every Redis call (default 5000)
===================  =========================================================================
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from laminar_kafka.redis_source.errors import RedisConfigError

__all__ = ["RedisStreamsConfig"]

_KNOWN = frozenset({"redis.url", "stream", "partitions", "value.field", "committed.key", "timeout.ms"})


@dataclass(frozen=True)
class RedisStreamsConfig:
    """Where the streams are and how they are read. ``stream`` is also the ``_topic`` of every row."""

    url: str
    stream: str
    partitions: int
    value_field: str = "value"
    committed_key: str = ""
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise RedisConfigError(f"redis.url {self.url!r} must start with redis://, rediss:// or unix://")
        if not self.stream or any(c.isspace() for c in self.stream):
            raise RedisConfigError(f"stream {self.stream!r} must be a non-empty name without spaces")
        if self.partitions < 1:
            raise RedisConfigError(f"partitions {self.partitions} must be >= 1")
        if not self.value_field:
            raise RedisConfigError("value.field must not be empty")
        if self.timeout_s <= 0:
            raise RedisConfigError(f"timeout.ms must be > 0 (got {self.timeout_s * 1000:g})")

    @property
    def advisory_key(self) -> str:
        """The hash of advisory offsets."""
        return self.committed_key or f"{self.stream}:committed"

    def stream_key(self, partition: int) -> str:
        """The Redis key of ``partition``'s stream."""
        return f"{self.stream}:{partition}"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RedisStreamsConfig:
        """Parse connector properties; RedisConfigError names an unknown, missing or invalid one."""
        unknown = sorted(set(properties) - _KNOWN)
        if unknown:
            raise RedisConfigError(f"unknown Redis Streams properties {unknown} (known: {sorted(_KNOWN)})")
        missing = [name for name in ("redis.url", "stream", "partitions") if not properties.get(name)]
        if missing:
            raise RedisConfigError(f"missing Redis Streams properties {missing}")
        return cls(
            url=properties["redis.url"],
            stream=properties["stream"],
            partitions=_integer(properties, "partitions", "1"),
            value_field=properties.get("value.field", "value"),
            committed_key=properties.get("committed.key", ""),
            timeout_s=_integer(properties, "timeout.ms", "5000") / 1000.0,
        )

    def properties(self) -> dict[str, str]:
        """The properties that parse back to this configuration."""
        return {"redis.url": self.url, "stream": self.stream, "partitions": str(self.partitions),
                "value.field": self.value_field, "committed.key": self.advisory_key,
                "timeout.ms": str(round(self.timeout_s * 1000))}


def _integer(properties: Mapping[str, str], name: str, default: str) -> int:
    text = properties.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise RedisConfigError(f"{name} {text!r} is not an integer") from None
