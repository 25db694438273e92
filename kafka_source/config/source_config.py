"""Typed, validated configuration of :class:`~laminar_kafka.kafka_source.KafkaSource`, built from properties.

Recognised keys (all values are strings, as in a SQL ``WITH (...)`` clause):

=================================  ==========================================================
``bootstrap.servers``              required; passed to librdkafka
``topic``                          required; one topic, a comma-separated list, or ``re:<regex>``
                                   (topics created later that match are read too)
``group.id``                       required; group for advisory offset commits only
``format``                         ``raw`` (default; binary ``value``), ``json``, ``avro``,
                                   ``protobuf``, ``json-schema`` (registry: laminar_kafka.kafka_source.schema_registry.client)
``schema.registry.url``            required by registry formats (``mock://<scope>``: tests)
``schema.registry.<key>``          registry client settings (``basic.auth.user.info``...)
``key.format``                     ``_key`` as ``raw`` (default), ``string`` or a registry format
``json.schema``                    ``name:type,...`` with pyarrow type aliases (``int64``,
                                   ``string``, ``double``, ``timestamp[ms]``...)
``startup.mode``                   ``earliest`` (default) | ``latest`` | ``timestamp`` |
                                   ``specific-offsets``
``startup.timestamp.ms``           required iff ``startup.mode=timestamp``
``startup.specific-offsets``       ``topic:partition:offset,...``; required iff mode is
                                   ``specific-offsets`` (unlisted partitions start at earliest)
``include.metadata``               ``false`` (default), ``true`` (all) or a list of
                                   ``_topic,_partition,_offset,_timestamp,_key,_headers``
``isolation.level``                ``read_committed`` (default) | ``read_uncommitted``
``max.fetched.bytes``              cap on fetched-but-not-emitted bytes: librdkafka's fetch queue
                                   (half, ``queued.max.messages.kbytes``) plus the source's FIFO
                                   (the rest) (32 MiB); a partition whose queue was full is
                                   fetched again after 10 ms (``kafka.fetch.queue.backoff.ms``)
``consume.chunk.records``          records per client ``consume()`` call (10000)
``partition.discovery.interval.ms``  new-partition check period; ``0`` disables (30000)
``on.bad.record``                  ``fail`` | ``skip``: a record that does not decode fails the
                                   source, or is skipped into :attr:`SourceBatch.rejected`
                                   (default: ``fail`` under guaranteed delivery, ``skip`` under
                                   best-effort)
``max.error.rate``                 with ``skip``: max fraction of bad records (0.01), see
                                   :class:`~laminar_kafka.kafka_source.read.batches.DecodeFailures`
``on.tombstone``                   ``bad`` (default) | ``row``: a null value under a decoded
                                   format is a bad record, or a row of null payload columns
``fail.on.data.loss``              ``true`` (default) | ``false``: under guaranteed delivery a
                                   cursor below the low watermark (deleted by retention) fails
                                   the start, or resumes at the low watermark, the loss logged
``kafka.<librdkafka key>``         passed through; ``enable.auto.commit`` cannot be enabled
=================================  ==========================================================

Unknown keys raise :class:`ConfigurationError` naming the nearest valid key. This module does no I/O.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import pyarrow as pa

from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.config.choices import (
    METADATA_COLUMNS,
    BadRecordPolicy,
    Format,
    IsolationLevel,
    KeyFormat,
    StartupMode,
    TombstonePolicy,
)
from laminar_kafka.kafka_source.config.values import (
    FALSE_WORDS,
    bool_value,
    enum_value,
    int_value,
    metadata_columns,
    parse_json_schema,
    specific_offsets,
)
from laminar_kafka.kafka_source.connector import ConnectorConfig
from laminar_kafka.kafka_source.errors import ConfigurationError
from laminar_kafka.kafka_source.config.topics import TopicSelector

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
]

VALID_KEYS: tuple[str, ...] = (
    "bootstrap.servers",
    "topic",
    "group.id",
    "format",
    "json.schema",
    "startup.mode",
    "startup.timestamp.ms",
    "startup.specific-offsets",
    "include.metadata",
    "isolation.level",
    "max.fetched.bytes",
    "consume.chunk.records",
    "partition.discovery.interval.ms",
    "max.error.rate",
    "on.bad.record",
    "on.tombstone",
    "fail.on.data.loss",
    "schema.registry.url",
    "key.format",
)
KAFKA_PREFIX = "kafka."
REGISTRY_PREFIX = "schema.registry."
#: librdkafka's bound on its pre-fetched queue, a share of ``max.fetched.bytes``
CLIENT_QUEUE_KEY = "queued.max.messages.kbytes"
#: librdkafka's pause before fetching again for a partition whose queue was full (default 1000 ms)
FETCH_BACKOFF_KEY = "fetch.queue.backoff.ms"
FETCH_BACKOFF_MS = 10

#: librdkafka keys the source owns; setting them through ``kafka.*`` is an error.
_OWNED_KAFKA_KEYS: frozenset[str] = frozenset(
    {"bootstrap.servers", "group.id", "isolation.level", "enable.auto.offset.store"}
)
@dataclass(frozen=True)
class KafkaSourceConfig:
    """Validated source configuration. Build it with :meth:`from_properties`."""

    bootstrap_servers: str
    #: the named topics; empty when ``topic_pattern`` selects them (see :attr:`selector`)
    topics: tuple[str, ...]
    group_id: str
    format: Format = Format.RAW
    json_schema: pa.Schema | None = None
    startup_mode: StartupMode = StartupMode.EARLIEST
    startup_timestamp_ms: int | None = None
    startup_specific_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    include_metadata: tuple[str, ...] = ()
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    max_fetched_bytes: int = 32 * 1024 * 1024
    consume_chunk_records: int = 10_000
    partition_discovery_interval_ms: int = 30_000
    max_error_rate: float = 0.01
    #: None: ``fail`` under guaranteed delivery, ``skip`` under best-effort (:meth:`bad_record_policy`)
    on_bad_record: BadRecordPolicy | None = None
    on_tombstone: TombstonePolicy = TombstonePolicy.BAD
    #: False: a cursor below the low watermark (records deleted by retention) resumes there, the loss logged
    fail_on_data_loss: bool = True
    kafka_properties: Mapping[str, str] = field(default_factory=dict)
    #: a regular expression selecting topics (``topic=re:<regex>``); None for named topics
    topic_pattern: str | None = None
    key_format: KeyFormat = KeyFormat.RAW
    schema_registry_url: str | None = None
    #: ``schema.registry.<key>`` pass-through (may hold credentials: not in the repr)
    schema_registry_properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "startup_specific_offsets", MappingProxyType(dict(self.startup_specific_offsets))
        )
        object.__setattr__(self, "kafka_properties", MappingProxyType(dict(self.kafka_properties)))
        object.__setattr__(
            self, "schema_registry_properties", MappingProxyType(dict(self.schema_registry_properties))
        )
        TopicSelector(self.topics, self.topic_pattern)  # exactly one of them (ConfigurationError)

    @property
    def selector(self) -> TopicSelector:
        """The topics this source reads: the named ones, or every topic the pattern matches."""
        return TopicSelector(self.topics, self.topic_pattern)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> KafkaSourceConfig:
        """Validate ``properties``; raises :class:`ConfigurationError` naming the first problem."""
        props = {str(k).strip(): str(v) for k, v in properties.items()}
        kafka_props: dict[str, str] = {}
        registry_props: dict[str, str] = {}
        for key, value in props.items():
            if key.startswith(KAFKA_PREFIX):
                inner = key[len(KAFKA_PREFIX):]
                if not inner:
                    raise ConfigurationError("'kafka.' needs a librdkafka property name after it")
                if inner in _OWNED_KAFKA_KEYS:
                    raise ConfigurationError(
                        f"{key} is owned by the source; use {inner!r} at top level"
                        if inner in VALID_KEYS
                        else f"{key} is owned by the source and cannot be overridden"
                    )
                if inner == "enable.auto.commit" and value.strip().lower() not in FALSE_WORDS:
                    raise ConfigurationError(
                        "kafka.enable.auto.commit cannot be enabled: offsets are committed only "
                        "after an epoch is durable (notify_epoch_committed)"
                    )
                kafka_props[inner] = value
            elif key.startswith(REGISTRY_PREFIX) and key not in VALID_KEYS:
                registry_props[key[len(REGISTRY_PREFIX):]] = value
            elif key not in VALID_KEYS:
                near = difflib.get_close_matches(key, VALID_KEYS, n=1, cutoff=0.4)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise ConfigurationError(f"unknown property {key!r}{hint}")

        def required(key: str) -> str:
            value = props.get(key, "").strip()
            if not value:
                raise ConfigurationError(f"missing required property {key!r}")
            return value

        bootstrap = required("bootstrap.servers")
        selector = TopicSelector.parse(required("topic"))
        group_id = required("group.id")
        fmt = enum_value(Format, "format", props.get("format", "raw"))
        schema = None
        if "json.schema" in props:
            if fmt is not Format.JSON:
                raise ConfigurationError("json.schema is only valid with format=json")
            schema = parse_json_schema(props["json.schema"])
        key_format = enum_value(KeyFormat, "key.format", props.get("key.format", "raw"))
        registry_url = props.get("schema.registry.url", "").strip() or None
        if (fmt.uses_registry or key_format.uses_registry) and registry_url is None:  # type: ignore[attr-defined]
            raise ConfigurationError(f"format {fmt.value} / key.format {key_format.value} needs schema.registry.url")
        if key_format is not KeyFormat.RAW and "_key" not in metadata_columns(props.get("include.metadata", "false")):
            raise ConfigurationError("key.format needs the _key column (include.metadata)")
        if registry_url is None and registry_props:
            raise ConfigurationError("schema.registry.* properties need schema.registry.url")
        mode = enum_value(StartupMode, "startup.mode", props.get("startup.mode", "earliest"))
        timestamp = None
        if "startup.timestamp.ms" in props:
            if mode is not StartupMode.TIMESTAMP:
                raise ConfigurationError("startup.timestamp.ms requires startup.mode=timestamp")
            timestamp = int_value("startup.timestamp.ms", props["startup.timestamp.ms"], minimum=0)
        elif mode is StartupMode.TIMESTAMP:
            raise ConfigurationError("startup.mode=timestamp requires startup.timestamp.ms")
        specific: dict[tuple[str, int], int] = {}
        if "startup.specific-offsets" in props:
            if mode is not StartupMode.SPECIFIC_OFFSETS:
                raise ConfigurationError(
                    "startup.specific-offsets requires startup.mode=specific-offsets"
                )
            specific = specific_offsets(props["startup.specific-offsets"], selector)
        elif mode is StartupMode.SPECIFIC_OFFSETS:
            raise ConfigurationError(
                "startup.mode=specific-offsets requires startup.specific-offsets"
            )
        try:
            error_rate = float(props.get("max.error.rate", "0.01"))
        except ValueError:
            raise ConfigurationError(f"max.error.rate={props['max.error.rate']!r} is not a number") from None
        if not 0.0 <= error_rate <= 1.0:
            raise ConfigurationError(f"max.error.rate={error_rate} must be within [0, 1]")
        max_fetched = int_value("max.fetched.bytes", props.get("max.fetched.bytes", str(32 * 1024 * 1024)), minimum=2048)
        if CLIENT_QUEUE_KEY in kafka_props:
            queue_kb = int_value(f"kafka.{CLIENT_QUEUE_KEY}", kafka_props[CLIENT_QUEUE_KEY], minimum=1)
            if queue_kb * 1024 >= max_fetched:
                raise ConfigurationError(
                    f"kafka.{CLIENT_QUEUE_KEY}={queue_kb} (KiB) leaves nothing of max.fetched.bytes={max_fetched} "
                    "for the source's own queue: raise max.fetched.bytes or lower it"
                )
            kafka_props[CLIENT_QUEUE_KEY] = str(queue_kb)
        return cls(
            bootstrap_servers=bootstrap,
            topics=selector.names,
            topic_pattern=selector.pattern,
            group_id=group_id,
            format=fmt,  # type: ignore[arg-type]
            json_schema=schema,
            startup_mode=mode,  # type: ignore[arg-type]
            startup_timestamp_ms=timestamp,
            startup_specific_offsets=specific,
            include_metadata=metadata_columns(props.get("include.metadata", "false")),
            isolation_level=enum_value(  # type: ignore[arg-type]
                IsolationLevel, "isolation.level", props.get("isolation.level", "read_committed")
            ),
            max_fetched_bytes=max_fetched,
            consume_chunk_records=int_value(
                "consume.chunk.records", props.get("consume.chunk.records", "10000"), minimum=1
            ),
            partition_discovery_interval_ms=int_value(
                "partition.discovery.interval.ms",
                props.get("partition.discovery.interval.ms", "30000"),
                minimum=0,
            ),
            max_error_rate=error_rate,
            on_bad_record=(
                enum_value(BadRecordPolicy, "on.bad.record", props["on.bad.record"])  # type: ignore[arg-type]
                if "on.bad.record" in props else None
            ),
            on_tombstone=enum_value(TombstonePolicy, "on.tombstone", props.get("on.tombstone", "bad")),  # type: ignore[arg-type]
            fail_on_data_loss=bool_value("fail.on.data.loss", props.get("fail.on.data.loss", "true")),
            kafka_properties=kafka_props,
            key_format=key_format,  # type: ignore[arg-type]
            schema_registry_url=registry_url,
            schema_registry_properties=registry_props,
        )

    def bad_record_policy(self, *, guaranteed: bool) -> BadRecordPolicy:
        """``on.bad.record``, or its default for the delivery guarantee (fail when guaranteed)."""
        if self.on_bad_record is not None:
            return self.on_bad_record
        return BadRecordPolicy.FAIL if guaranteed else BadRecordPolicy.SKIP

    @property
    def client_queue_bytes(self) -> int:
        """librdkafka's share of :attr:`max_fetched_bytes` (``queued.max.messages.kbytes``):
        ``kafka.queued.max.messages.kbytes`` when set, else half."""
        explicit = self.kafka_properties.get(CLIENT_QUEUE_KEY)
        if explicit is not None:
            return int(explicit) * 1024
        return max(1024, self.max_fetched_bytes // 2)

    @property
    def fifo_bytes(self) -> int:
        """The FIFO's share of :attr:`max_fetched_bytes`: what librdkafka's queue leaves."""
        return self.max_fetched_bytes - self.client_queue_bytes

    def consumer_config(self, *, guaranteed: bool) -> dict[str, str | int | bool]:
        """The librdkafka configuration of the source's consumer.

        Auto commit and auto offset store are off; under guaranteed delivery an out-of-range
        position is reported (``auto.offset.reset=error``) instead of being reset silently.
        """
        conf: dict[str, str | int | bool] = {
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            # librdkafka's own prefetch (default 64 MiB) is a share of max.fetched.bytes.
            CLIENT_QUEUE_KEY: self.client_queue_bytes // 1024,
            # When that queue is full librdkafka postpones the partition's next fetch by this
            # much (default 1000 ms): with a bounded queue a fast reader then sat idle most of
            # the time (bench_landing: 2M records in 12.6 s instead of 2.6 s at the same CPU).
            FETCH_BACKOFF_KEY: FETCH_BACKOFF_MS,
            # The per-partition fetch limit counts compressed bytes, so with compressible payloads
            # 1 MiB (the default) per partition inflates to far more in memory; 512 KiB keeps a
            # reader of 8 partitions under 500 MB RSS without slowing it (bench/bench_source.py).
            "max.partition.fetch.bytes": 524288,
            **self.kafka_properties,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "isolation.level": self.isolation_level.value,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
        if guaranteed:
            conf["auto.offset.reset"] = "error"
        return conf

    def identity_options(self) -> dict[str, str]:
        """Semantic identity: topics, format, schema and startup; no endpoints or credentials."""
        options = {
            "connector": "kafka",
            "topic": str(self.selector),
            "format": self.format.value,
            "startup.mode": self.startup_mode.value,
            "include.metadata": ",".join(self.include_metadata),
            "isolation.level": self.isolation_level.value,
        }
        if self.key_format is not KeyFormat.RAW:
            options["key.format"] = self.key_format.value
        if self.json_schema is not None:
            options["json.schema"] = ",".join(f"{f.name}:{f.type}" for f in self.json_schema)
        if self.startup_timestamp_ms is not None:
            options["startup.timestamp.ms"] = str(self.startup_timestamp_ms)
        if self.startup_specific_offsets:
            options["startup.specific-offsets"] = ",".join(
                f"{t}:{p}:{o}" for (t, p), o in sorted(self.startup_specific_offsets.items())
            )
        return options


def as_kafka_config(config: ConnectorConfig | KafkaSourceConfig | Mapping[str, str]) -> KafkaSourceConfig:
    """``config`` as a :class:`KafkaSourceConfig` (a ``ConnectorConfig`` must name this connector);
    raises :class:`ConfigurationError` for an invalid one."""
    if isinstance(config, KafkaSourceConfig):
        return config
    if isinstance(config, ConnectorConfig):
        if config.connector_type != CONNECTOR_NAME:
            raise ConfigurationError(
                f"connector type {config.connector_type!r} is not {CONNECTOR_NAME!r}"
            )
        return KafkaSourceConfig.from_properties(config.properties)
    return KafkaSourceConfig.from_properties(config)
