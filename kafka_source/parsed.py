"""A source's properties parsed once: the typed configuration of the properties parsed last is
given again without a second parse (a node's source is asked for its contract, its identity
options and then started with the same properties)."""
from __future__ import annotations

from collections.abc import Mapping

from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig, as_kafka_config

__all__ = ["ParsedConfigs"]


class ParsedConfigs:
    """Parses properties with ``kafka``, the client configuration of properties that carry none
    (:func:`as_kafka_config`), remembering the last properties parsed and their typed value."""

    def __init__(self, kafka: KafkaClientConfig | None) -> None:
        self.kafka = kafka
        #: the last properties parsed (with the connector type) and their typed value
        self._last: tuple[tuple[str, dict[str, str]], KafkaSourceConfig] | None = None

    def typed(self, config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str]) -> KafkaSourceConfig:
        """``config`` as a typed configuration; a typed one as it is. Raises
        :class:`~laminar_kafka.connector.errors.ConfigurationError` for an invalid one."""
        if isinstance(config, KafkaSourceConfig):
            return config
        if isinstance(config, ConnectorConfig):
            key = (config.connector_type, dict(config.properties))
        else:
            key = (CONNECTOR_NAME, dict(config))
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        typed = as_kafka_config(config, self.kafka)
        self._last = (key, typed)
        return typed
