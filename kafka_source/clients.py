"""One Kafka client configuration for every client of a pipeline, and the clients built from it.

A :class:`KafkaClientConfig` is the bootstrap servers plus the librdkafka properties every client of a
pipeline shares (security: ``security.protocol``, ``sasl.*``, ``ssl.*``; timeouts...). The source's
consumer, the node's admin and watermark clients, ``status``, ``verify``, the demo and the chaos
campaign all build their clients here, so a setting given once (``[kafka]`` in the TOML file,
``LAMINAR_KAFKA__<KEY>``) reaches every one of them.

Every client is created with ``logger=``: librdkafka's own log lines go through Python
:mod:`logging` (logger ``laminar_kafka.kafka_source.clients.librdkafka``), never as raw ``%3|...|FAIL|`` lines
on stderr. A coordinator a broker is still loading or moving (a fresh broker's first idempotent
producer: "Coordinator load in progress: retrying") is a line librdkafka logs as a warning and retries
on its own: it is logged at INFO (:func:`librdkafka_level`). Secrets never leave this module in clear: :meth:`KafkaClientConfig.redacted` and
:func:`redact` replace them with ``***``.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from laminar_kafka.errors import ConfigurationError

__all__ = [
    "KafkaClientConfig",
    "KafkaTarget",
    "LIBRDKAFKA_LOGGER",
    "client_config",
    "consumer_properties",
    "is_secret_key",
    "librdkafka_level",
    "make_admin",
    "make_consumer",
    "make_producer",
    "redact",
]

#: The logger every client's librdkafka log lines go to.
LIBRDKAFKA_LOGGER = logging.getLogger(__name__ + ".librdkafka")

#: librdkafka errors of a coordinator (group or transaction) that is loading, not elected yet or
#: moving: the client retries on its own, the next answer usually succeeds
TRANSIENT_COORDINATOR_ERRORS = ("Coordinator load in progress", "Coordinator not available", "Not coordinator")


def librdkafka_level(level: int, message: str) -> int:
    """The :mod:`logging` level of a librdkafka log line of ``level`` (confluent_kafka's mapping of
    librdkafka's syslog levels): ``level``, but at most INFO for a transient coordinator error
    (:data:`TRANSIENT_COORDINATOR_ERRORS`). Pure."""
    if level > logging.INFO and any(error in message for error in TRANSIENT_COORDINATOR_ERRORS):
        return logging.INFO
    return level


class _LibrdkafkaLog:
    """The ``logger=`` every client is given: confluent_kafka calls :meth:`log` for each librdkafka
    line, which goes to :data:`LIBRDKAFKA_LOGGER` at :func:`librdkafka_level`."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        if not LIBRDKAFKA_LOGGER.isEnabledFor(min(level, logging.INFO)):
            return
        LIBRDKAFKA_LOGGER.log(librdkafka_level(level, msg % args if args else msg), msg, *args)


_CLIENT_LOG = _LibrdkafkaLog()

_SECRET_MARKERS = ("password", "secret", "key.pem", "ssl_key", "user.info", "token", "jaas", "oauthbearer.config")
_REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether the value of property ``key`` is a secret (never printed, logged or stored)."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(properties: Mapping[str, Any]) -> dict[str, Any]:
    """``properties`` with every secret value replaced by ``***`` (for logs and reports)."""
    return {k: (_REDACTED if is_secret_key(k) else v) for k, v in properties.items()}


@dataclass(frozen=True)
class KafkaClientConfig:
    """The bootstrap servers and shared librdkafka ``properties`` of every client of a pipeline.

    ``bootstrap`` is required (surrounding blanks are dropped); ``properties`` may not set
    ``bootstrap.servers`` (that is :attr:`bootstrap`): both raise :class:`ConfigurationError`, here
    and nowhere else. Values are strings (librdkafka's own spelling). The ``repr`` shows no secret.
    """

    bootstrap: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The one place the bootstrap servers are checked: every entry point (flag, file,
        # environment, the source's bootstrap.servers property) builds this value and adds to a
        # ConfigurationError only where the setting is given.
        object.__setattr__(self, "bootstrap", str(self.bootstrap).strip())
        object.__setattr__(self, "properties", MappingProxyType({str(k): str(v) for k, v in self.properties.items()}))
        if not self.bootstrap:
            raise ConfigurationError("bootstrap is required")
        if "bootstrap.servers" in self.properties:
            raise ConfigurationError("set the bootstrap servers once, as bootstrap, not as the client property "
                                     "bootstrap.servers")

    def __repr__(self) -> str:
        return f"KafkaClientConfig(bootstrap={self.bootstrap!r}, properties={self.redacted()!r})"

    def check_files(self) -> None:
        """Raise :class:`ConfigurationError` naming the property when a file it names (``*.location``:
        CA, certificate, key, keystore, CRL) does not exist or cannot be read; librdkafka's own error
        for it is an OpenSSL code that names neither."""
        for key, value in self.properties.items():
            if not key.endswith(".location") or value in ("", "probe"):
                continue
            path = Path(value)
            if not path.exists():
                raise ConfigurationError(f"{key}: {value} does not exist")
            if not os.access(path, os.R_OK):
                raise ConfigurationError(f"{key}: {value} is not readable")

    def redacted(self) -> dict[str, str]:
        """The properties with secrets replaced by ``***``."""
        return redact(self.properties)

    def client_properties(
        self, overrides: Mapping[str, Any] | None = None, *, defaults: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The librdkafka configuration of one client, later layers winning: ``defaults`` (a
        client's own choices the shared properties may change), bootstrap, the shared properties,
        then ``overrides`` (librdkafka keys the client owns, e.g. ``{"group.id": ...}``)."""
        return {**dict(defaults or {}), "bootstrap.servers": self.bootstrap, **self.properties, **dict(overrides or {})}


#: What a helper that talks to Kafka accepts: bootstrap servers alone (a plain cluster) or a whole
#: client configuration (security and every other shared property).
KafkaTarget: TypeAlias = str | KafkaClientConfig


def client_config(target: KafkaTarget) -> KafkaClientConfig:
    """``target`` as a :class:`KafkaClientConfig` (bootstrap servers alone mean no other property)."""
    return target if isinstance(target, KafkaClientConfig) else KafkaClientConfig(target)


def consumer_properties(
    config: KafkaClientConfig,
    group_id: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The librdkafka configuration :func:`make_consumer` gives its consumer (pure): ``defaults``
    below the shared properties; ``group.id``, ``enable.auto.commit=false`` and ``overrides`` above."""
    owned = {"group.id": group_id, "enable.auto.commit": False, **dict(overrides or {})}
    return config.client_properties(owned, defaults=defaults)


def make_consumer(
    config: KafkaClientConfig,
    group_id: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> Consumer:
    """A consumer in ``group_id`` that never commits on its own (``enable.auto.commit=false``), its
    configuration :func:`consumer_properties`. Raises ``KafkaException`` when the client rejects it."""
    return Consumer(consumer_properties(config, group_id, overrides, defaults=defaults), logger=_CLIENT_LOG)


def make_admin(config: KafkaClientConfig, overrides: Mapping[str, Any] | None = None) -> AdminClient:
    """An admin client of ``config`` with ``overrides`` on top."""
    return AdminClient(config.client_properties(overrides), logger=_CLIENT_LOG)


def make_producer(config: KafkaClientConfig, overrides: Mapping[str, Any] | None = None) -> Producer:
    """A producer of ``config`` with ``overrides`` on top."""
    return Producer(config.client_properties(overrides), logger=_CLIENT_LOG)
