"""The Redis Streams connector's typed configuration, parsed strictly from connector properties.

The properties (``ConnectorConfig.properties``, all strings) are declared once in :data:`SETTINGS`
(:class:`~laminar_kafka.connector.settings.Setting`: name, type, default, doc), spelled with dashes as
the ``laminar-kafka redis run`` flags spell them; the dotted spellings of 0.1.0 (``redis.url``) are still
read, with a :class:`DeprecationWarning` naming the new key. Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laminar_kafka.connector.errors import ConfigurationError
from laminar_kafka.connector.settings import Setting, by_name, renamed_keys
from laminar_kafka.redis_source.errors import RedisConfigError

__all__ = ["SETTINGS", "RedisStreamsConfig"]

REDIS_URL = Setting("redis-url", str, "redis://host:port/db (rediss:// for TLS; user and password in the URL when "
                    "the server asks for them)", required=True, old_names=("redis.url",))
STREAM = Setting("stream", str, "the stream family; its partitions are the streams <stream>:<n>", required=True)
PARTITIONS = Setting("partitions", int, "how many (<stream>:0 .. <stream>:<partitions - 1>)", required=True,
                     minimum=1)
VALUE_FIELD = Setting("value-field", str, "the entry field that becomes the value column (an entry without it lands "
                      "with a null value)", default="value", old_names=("value.field",))
COMMITTED_KEY = Setting("committed-key", str, "the hash where advisory offsets go after each committed epoch, field "
                        "<n> -> the last entry ID landed (never moved backwards)", default="",
                        shown_default="<stream>:committed", old_names=("committed.key",))
TIMEOUT_MS = Setting("timeout-ms", int, "socket timeout of every Redis call", default=5000, minimum=1, unit="ms",
                     old_names=("timeout.ms",))
#: every property of the connector
SETTINGS: Mapping[str, Setting] = by_name((REDIS_URL, STREAM, PARTITIONS, VALUE_FIELD, COMMITTED_KEY, TIMEOUT_MS))


@dataclass(frozen=True)
class RedisStreamsConfig:
    """Where the streams are and how they are read. ``stream`` is also the ``_topic`` of every row."""

    url: str
    stream: str
    partitions: int
    value_field: str = VALUE_FIELD.default
    committed_key: str = COMMITTED_KEY.default
    timeout_s: float = TIMEOUT_MS.default / 1000.0

    def __post_init__(self) -> None:
        if not self.url.startswith(("redis://", "rediss://", "unix://")):
            raise RedisConfigError(f"redis-url {self.url!r} must start with redis://, rediss:// or unix://")
        if not self.stream or any(c.isspace() for c in self.stream):
            raise RedisConfigError(f"stream {self.stream!r} must be a non-empty name without spaces")
        if self.partitions < 1:
            raise RedisConfigError(f"partitions {self.partitions} must be >= 1")
        if not self.value_field:
            raise RedisConfigError("value-field must not be empty")
        if self.timeout_s <= 0:
            raise RedisConfigError(f"timeout-ms must be > 0 (got {self.timeout_s * 1000:g})")

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
        try:
            props = renamed_keys(properties, SETTINGS.values())
        except ConfigurationError as exc:
            raise RedisConfigError(str(exc)) from None
        unknown = sorted(set(props) - set(SETTINGS))
        if unknown:
            raise RedisConfigError(f"unknown Redis Streams properties {unknown} (known: {sorted(SETTINGS)})")
        missing = [name for name, setting in SETTINGS.items() if setting.required and not props.get(name)]
        if missing:
            raise RedisConfigError(f"missing Redis Streams properties {missing}")
        return cls(
            url=_value(props, REDIS_URL),
            stream=_value(props, STREAM),
            partitions=_value(props, PARTITIONS),
            value_field=_value(props, VALUE_FIELD),
            committed_key=_value(props, COMMITTED_KEY),
            timeout_s=_value(props, TIMEOUT_MS) / 1000.0,
        )

    def properties(self) -> dict[str, str]:
        """The properties that parse back to this configuration."""
        return {REDIS_URL.name: self.url, STREAM.name: self.stream, PARTITIONS.name: str(self.partitions),
                VALUE_FIELD.name: self.value_field, COMMITTED_KEY.name: self.advisory_key,
                TIMEOUT_MS.name: str(round(self.timeout_s * 1000))}


def _value(properties: Mapping[str, str], setting: Setting) -> Any:
    """The typed value of ``setting`` in ``properties``, or its default; RedisConfigError names it."""
    if setting.name not in properties:
        return setting.default
    try:
        return setting.parse(properties[setting.name])
    except ConfigurationError as exc:
        raise RedisConfigError(str(exc)) from None
