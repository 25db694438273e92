"""Typed, validated configuration of :class:`~laminar_kafka.kafka_source.KafkaSource`, built from properties.

The properties (all values strings, as in a SQL ``WITH (...)`` clause) are declared once in
:mod:`laminar_kafka.kafka_source.config.definitions`, with their types, defaults, bounds and docs
(``docs/settings.md`` lists them, generated from there), and parsed by concern in
:mod:`laminar_kafka.kafka_source.config.parsing`. ``bootstrap.servers`` and ``kafka.*`` make the
:class:`~laminar_kafka.kafka_source.clients.KafkaClientConfig` the source builds every client from
(:attr:`KafkaSourceConfig.kafka`); a node gives that value itself instead (its ``bootstrap`` setting
and ``[kafka]`` table), so it is never written out as properties and parsed back. Unknown keys raise
:class:`ConfigurationError` naming the nearest valid key. This module does no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.clients import KafkaClientConfig, consumer_properties
from laminar_kafka.kafka_source.config import definitions as d
from laminar_kafka.kafka_source.config import parsing
from laminar_kafka.kafka_source.config.choices import (
    METADATA_COLUMNS,
    BadRecordPolicy,
    Format,
    IsolationLevel,
    KeyFormat,
    StartupMode,
    TombstonePolicy,
)
from laminar_kafka.kafka_source.config.definitions import BATCH_MIN_BYTES, VALID_KEYS
from laminar_kafka.kafka_source.config.parsing import CLIENT_QUEUE_KEY
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.decode.required_fields import RequiredField

__all__ = [
    "as_kafka_config",
    "METADATA_COLUMNS",
    "Format",
    "KeyFormat",
    "BadRecordPolicy",
    "IsolationLevel",
    "KafkaSourceConfig",
    "StartupMode",
    "TombstonePolicy",
    "VALID_KEYS",
    "BATCH_MIN_BYTES",
]

#: librdkafka's pause before fetching again for a partition whose queue was full (default 1000 ms)
FETCH_BACKOFF_KEY = "fetch.queue.backoff.ms"
FETCH_BACKOFF_MS = 10
#: the source's ``max.partition.fetch.bytes`` unless ``kafka.*`` sets it
PARTITION_FETCH_BYTES = 524288
#: The catch-up consumer's ``fetch.wait.max.ms`` (``laminar_kafka.kafka_source.read.catch_up``):
#: with ``fetch.min.bytes`` 1 a fetch is answered as soon as one of its partitions has records, so
#: this bounds only how long a fetch of idle partitions holds back a partition taken meanwhile.
CATCH_UP_WAIT_MS = 20


@dataclass(frozen=True)
class KafkaSourceConfig:
    """Validated source configuration. Build it with :meth:`from_properties`.

    :attr:`kafka` is the Kafka client configuration every client of the source is built from
    (:func:`~laminar_kafka.kafka_source.clients.make_consumer`); the rest is the source's own.
    """

    kafka: KafkaClientConfig
    #: the named topics; empty when ``topic_pattern`` selects them (see :attr:`selector`)
    topics: tuple[str, ...]
    group_id: str
    format: Format = d.FORMAT.default
    json_schema: pa.Schema | None = None
    startup_mode: StartupMode = d.STARTUP_MODE.default
    startup_timestamp_ms: int | None = None
    startup_specific_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    include_metadata: tuple[str, ...] = ()
    isolation_level: IsolationLevel = d.ISOLATION_LEVEL.default
    max_fetched_bytes: int = d.MAX_FETCHED_BYTES.default
    consume_chunk_records: int = d.CONSUME_CHUNK_RECORDS.default
    #: how long a fetch may wait for :data:`BATCH_MIN_BYTES` (``batch-wait-ms``); 0: no wait
    batch_wait_ms: int = d.BATCH_WAIT_MS.default
    partition_discovery_interval_ms: int = d.PARTITION_DISCOVERY_INTERVAL_MS.default
    max_error_rate: float = d.MAX_ERROR_RATE.default
    #: None: ``fail`` under guaranteed delivery, ``skip`` under best-effort (:meth:`bad_record_policy`)
    on_bad_record: BadRecordPolicy | None = None
    #: None: ``bad``, or in upsert mode (:attr:`upsert_keys`) a delete of the record key's key
    on_tombstone: TombstonePolicy | None = None
    #: False: a cursor below the low watermark (records deleted by retention) resumes there, the loss logged
    fail_on_data_loss: bool = d.FAIL_ON_DATA_LOSS.default
    #: a regular expression selecting topics (``topic=re:<regex>``); None for named topics
    topic_pattern: str | None = None
    key_format: KeyFormat = d.KEY_FORMAT.default
    schema_registry_url: str | None = None
    #: ``schema.registry.<key>`` pass-through (may hold credentials: not in the repr)
    schema_registry_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: columns every record must have non-null (``required-fields``); a record that lacks one is bad
    required_fields: tuple[RequiredField, ...] = ()
    #: upsert mode (``upsert-keys``): the key fields every row carries, beside its ``_op`` column;
    #: empty: append mode (``format=debezium-json`` always has them)
    upsert_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "startup_specific_offsets", MappingProxyType(dict(self.startup_specific_offsets))
        )
        object.__setattr__(
            self, "schema_registry_properties", MappingProxyType(dict(self.schema_registry_properties))
        )
        TopicSelector(self.topics, self.topic_pattern)  # exactly one of them (ConfigurationError)

    @property
    def selector(self) -> TopicSelector:
        """The topics this source reads: the named ones, or every topic the pattern matches."""
        return TopicSelector(self.topics, self.topic_pattern)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, str], kafka: KafkaClientConfig | None = None
    ) -> KafkaSourceConfig:
        """Validate ``properties``; raises :class:`ConfigurationError` naming the first problem.

        The Kafka client configuration comes from ``bootstrap.servers`` and ``kafka.*`` when the
        properties set ``bootstrap.servers`` (they are then authoritative and ``kafka`` is not
        used); else it is ``kafka``, given as a value, and ``kafka.*`` may not be set beside it.
        Either way its properties may not set a key the source owns (``group.id``...).
        """
        props, kafka_props, registry_props = parsing.split_keys(properties)
        client = parsing.client_config(props, kafka_props, kafka)
        selector = TopicSelector.parse(parsing.required(props, "topic"))
        group_id = parsing.required(props, "group.id")
        include_metadata = parsing.include_metadata(props)
        formats = parsing.formats(props, registry_props, include_metadata)
        startup = parsing.startup(props, selector)
        policies = parsing.policies(props)
        max_fetched, client = parsing.fetch_bound(props, client)
        return cls(
            kafka=client,
            topics=selector.names,
            topic_pattern=selector.pattern,
            group_id=group_id,
            format=formats.format,
            json_schema=formats.json_schema,
            key_format=formats.key_format,
            schema_registry_url=formats.registry_url,
            schema_registry_properties=registry_props,
            required_fields=formats.required_fields,
            upsert_keys=formats.upsert_keys,
            include_metadata=include_metadata,
            startup_mode=startup.mode,
            startup_timestamp_ms=startup.timestamp_ms,
            startup_specific_offsets=startup.specific_offsets,
            isolation_level=parsing.value(props, d.ISOLATION_LEVEL),
            max_fetched_bytes=max_fetched,
            consume_chunk_records=parsing.value(props, d.CONSUME_CHUNK_RECORDS),
            batch_wait_ms=parsing.value(props, d.BATCH_WAIT_MS),
            partition_discovery_interval_ms=parsing.value(props, d.PARTITION_DISCOVERY_INTERVAL_MS),
            max_error_rate=policies.max_error_rate,
            on_bad_record=policies.on_bad_record,
            on_tombstone=policies.on_tombstone,
            fail_on_data_loss=policies.fail_on_data_loss,
        )

    def bad_record_policy(self, *, guaranteed: bool) -> BadRecordPolicy:
        """``on-bad-record``, or its default for the delivery guarantee (fail when guaranteed)."""
        if self.on_bad_record is not None:
            return self.on_bad_record
        return BadRecordPolicy.FAIL if guaranteed else BadRecordPolicy.SKIP

    @property
    def client_queue_bytes(self) -> int:
        """librdkafka's share of :attr:`max_fetched_bytes` (``queued.max.messages.kbytes``):
        ``kafka.queued.max.messages.kbytes`` when set, else half."""
        explicit = self.kafka.properties.get(CLIENT_QUEUE_KEY)
        if explicit is not None:
            return int(explicit) * 1024
        return max(1024, self.max_fetched_bytes // 2)

    @property
    def batch_min_bytes(self) -> int:
        """``fetch.min.bytes`` for ``batch-wait-ms``: :data:`BATCH_MIN_BYTES`, at most half the
        partition fetch limit (the broker counts no more per partition); 1 when ``batch-wait-ms=0``."""
        if not self.batch_wait_ms:
            return 1
        partition_limit = int(self.kafka.properties.get("max.partition.fetch.bytes", PARTITION_FETCH_BYTES))
        return max(1, min(BATCH_MIN_BYTES, partition_limit // 2))

    @property
    def catch_up_queue_bytes(self) -> int:
        """The catch-up consumer's share of :attr:`max_fetched_bytes` (its ``queued.max.messages.kbytes``):
        1 MiB, at most a quarter of what the client queue leaves; 0 without ``batch-wait-ms`` (no
        catch-up consumer). It holds only partitions just taken, for about a second."""
        if not self.batch_wait_ms:
            return 0
        return max(1024, min(1024 * 1024, (self.max_fetched_bytes - self.client_queue_bytes) // 4))

    @property
    def fifo_bytes(self) -> int:
        """The FIFO's share of :attr:`max_fetched_bytes`: what librdkafka's queues (the batching and
        the catch-up consumer's) leave."""
        return self.max_fetched_bytes - self.client_queue_bytes - self.catch_up_queue_bytes

    def consumer_defaults(self) -> dict[str, str | int | bool]:
        """The source's choices for its consumer that the shared client properties may change."""
        return {
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            # librdkafka's own prefetch (default 64 MiB) is a share of max-fetched-bytes.
            CLIENT_QUEUE_KEY: self.client_queue_bytes // 1024,
            # When that queue is full librdkafka postpones the partition's next fetch by this
            # much (default 1000 ms): with a bounded queue a fast reader then sat idle most of
            # the time (bench_landing: 2M records in 12.6 s instead of 2.6 s at the same CPU).
            FETCH_BACKOFF_KEY: FETCH_BACKOFF_MS,
            # The per-partition fetch limit counts compressed bytes, so with compressible payloads
            # 1 MiB (the default) per partition inflates to far more in memory; 512 KiB keeps a
            # reader of 8 partitions under 500 MB RSS without slowing it (bench/bench_source.py).
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            # A trickle is fetched a batch at a time (batch-wait-ms), not a record at a time.
            "fetch.min.bytes": self.batch_min_bytes,
            **({"fetch.wait.max.ms": self.batch_wait_ms} if self.batch_wait_ms else {}),
        }

    def catch_up_overrides(self, *, guaranteed: bool) -> dict[str, str | int | bool]:
        """:meth:`consumer_overrides` of the catch-up consumer, which fetches the partitions a
        reader just took without the batch wait: ``fetch.min.bytes`` 1 and ``fetch.wait.max.ms``
        :data:`CATCH_UP_WAIT_MS`, whatever ``kafka.*`` sets (a batch wait there is the delay it
        avoids), and its queue :attr:`catch_up_queue_bytes`."""
        return {**self.consumer_overrides(guaranteed=guaranteed), "fetch.min.bytes": 1,
                "fetch.wait.max.ms": CATCH_UP_WAIT_MS, CLIENT_QUEUE_KEY: max(1, self.catch_up_queue_bytes // 1024)}

    def consumer_overrides(self, *, guaranteed: bool) -> dict[str, str | int | bool]:
        """What the source owns of its consumer, over the shared client properties (besides the
        ``group.id`` and ``enable.auto.commit=false`` every consumer gets): the isolation level, no
        auto offset store, and under guaranteed delivery ``auto.offset.reset=error`` (an
        out-of-range position is reported instead of being reset silently)."""
        owned: dict[str, str | int | bool] = {
            "isolation.level": self.isolation_level.value,
            "enable.auto.offset.store": False,
        }
        if guaranteed:
            owned["auto.offset.reset"] = "error"
        return owned

    def consumer_config(self, *, guaranteed: bool) -> dict[str, Any]:
        """The librdkafka configuration of the source's consumer, as
        :func:`~laminar_kafka.kafka_source.clients.make_consumer` builds it from
        :meth:`consumer_defaults`, :attr:`kafka` and :meth:`consumer_overrides` (pure)."""
        return consumer_properties(
            self.kafka, self.group_id, self.consumer_overrides(guaranteed=guaranteed), defaults=self.consumer_defaults()
        )

    def identity_options(self) -> dict[str, str]:
        """Semantic identity: topics, format, schema and startup; no endpoints or credentials."""
        options = {
            "connector": "kafka",
            "topic": str(self.selector),
            "format": self.format.value,
            "startup-mode": self.startup_mode.value,
            "include-metadata": ",".join(self.include_metadata),
            "isolation.level": self.isolation_level.value,
        }
        if self.key_format is not KeyFormat.RAW:
            options["key-format"] = self.key_format.value
        if self.upsert_keys:
            options["upsert-keys"] = ",".join(self.upsert_keys)
        if self.json_schema is not None:
            options["json-schema"] = ",".join(f"{f.name}:{f.type}" for f in self.json_schema)
        if self.startup_timestamp_ms is not None:
            options["startup-timestamp-ms"] = str(self.startup_timestamp_ms)
        if self.startup_specific_offsets:
            options["startup-specific-offsets"] = ",".join(
                f"{t}:{p}:{o}" for (t, p), o in sorted(self.startup_specific_offsets.items())
            )
        return options


def as_kafka_config(
    config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str], kafka: KafkaClientConfig | None = None
) -> KafkaSourceConfig:
    """``config`` as a :class:`KafkaSourceConfig` (a ``ConnectorConfig`` must name this connector;
    properties are parsed with ``kafka`` as in :meth:`KafkaSourceConfig.from_properties`; a typed
    config is returned as it is); raises :class:`ConfigurationError` for an invalid one."""
    if isinstance(config, KafkaSourceConfig):
        return config
    if isinstance(config, ConnectorConfig):
        if config.connector_type != CONNECTOR_NAME:
            raise ConfigurationError(
                f"connector type {config.connector_type!r} is not {CONNECTOR_NAME!r}"
            )
        return KafkaSourceConfig.from_properties(config.properties, kafka)
    return KafkaSourceConfig.from_properties(config, kafka)
