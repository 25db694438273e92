"""Typed, validated configuration of :class:`~laminar_kafka.kafka_source.KafkaSource`, built from properties.

Recognised keys (all values are strings, as in a SQL ``WITH (...)`` clause):

=================================  ==========================================================
``bootstrap.servers``              required, unless the Kafka client configuration is given as
                                   a value (``kafka`` of :meth:`KafkaSourceConfig.from_properties`)
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
``batch.wait.ms``                  how long the broker may hold a fetch to gather
                                   :data:`BATCH_MIN_BYTES` (250): a lightly loaded source gets
                                   its records a batch at a time, at most this late; ``0``: every
                                   record as soon as it arrives (one fetch per handful of records)
``partition.discovery.interval.ms``  new-partition check period; ``0`` disables (30000)
``on.bad.record``                  ``fail`` | ``skip``: a record that does not decode fails the
                                   source, or is skipped into :attr:`SourceBatch.rejected`
                                   (default: ``fail`` under guaranteed delivery, ``skip`` under
                                   best-effort)
``max.error.rate``                 with ``skip``: max fraction of bad records (0.01), see
                                   :class:`~laminar_kafka.kafka_source.read.batches.DecodeFailures`
``required.fields``                ``name`` or ``name:kind|kind,...``: columns every record must
                                   have non-null, of one of the kinds (a bad record otherwise:
                                   :mod:`~laminar_kafka.kafka_source.decode.required_fields`)
``on.tombstone``                   ``bad`` (default) | ``row``: a null value under a decoded
                                   format is a bad record, or a row of null payload columns
``fail.on.data.loss``              ``true`` (default) | ``false``: under guaranteed delivery a
                                   cursor below the low watermark (deleted by retention) fails
                                   the start, or resumes at the low watermark, the loss logged
``kafka.<librdkafka key>``         passed through; ``enable.auto.commit`` cannot be enabled; goes
                                   with ``bootstrap.servers``
=================================  ==========================================================

``bootstrap.servers`` and ``kafka.*`` make the :class:`~laminar_kafka.kafka_source.clients.KafkaClientConfig`
the source builds every client from (:attr:`KafkaSourceConfig.kafka`); a node gives that value
itself instead (its ``bootstrap`` setting and ``[kafka]`` table), so it is never written out as
properties and parsed back. Unknown keys raise :class:`ConfigurationError` naming the nearest valid
key. The properties are parsed by concern (client, columns and formats, startup, reading bounds,
policies), each step raising on its first problem. This module does no I/O.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import pyarrow as pa

from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.clients import KafkaClientConfig, consumer_properties
from laminar_kafka.kafka_source.config.choices import (
    METADATA_COLUMNS,
    BadRecordPolicy,
    Format,
    IsolationLevel,
    KeyFormat,
    StartupMode,
    TombstonePolicy,
)
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.config.values import (
    FALSE_WORDS,
    bool_value,
    enum_value,
    int_value,
    metadata_columns,
    parse_json_schema,
    specific_offsets,
)
from laminar_kafka.kafka_source.decode.required_fields import (
    RequiredField,
    check_required_fields,
    parse_required_fields,
)

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
    "batch.wait.ms",
    "partition.discovery.interval.ms",
    "max.error.rate",
    "on.bad.record",
    "on.tombstone",
    "fail.on.data.loss",
    "schema.registry.url",
    "key.format",
    "required.fields",
)
KAFKA_PREFIX = "kafka."
REGISTRY_PREFIX = "schema.registry."
#: librdkafka's bound on its pre-fetched queue, a share of ``max.fetched.bytes``
CLIENT_QUEUE_KEY = "queued.max.messages.kbytes"
#: librdkafka's pause before fetching again for a partition whose queue was full (default 1000 ms)
FETCH_BACKOFF_KEY = "fetch.queue.backoff.ms"
FETCH_BACKOFF_MS = 10
#: what a fetch gathers before the broker answers, waiting up to ``batch.wait.ms`` (librdkafka's
#: ``fetch.min.bytes``; its default, 1 byte, makes a trickle cost a fetch per handful of records:
#: 1,000 partitions at 2,000 records/s cost the client 144-167 ms of CPU per second, 13-27 with this).
#: At most half of ``max.partition.fetch.bytes``: the broker counts at most that much per partition
#: towards it, so with a larger value a one-partition topic waited out every fetch even under load
#: (200k records read in 5.97 s with 1 MiB against 0.37 s with 256 KiB).
BATCH_MIN_BYTES = 256 * 1024
#: the source's ``max.partition.fetch.bytes`` unless ``kafka.*`` sets it
PARTITION_FETCH_BYTES = 524288
DEFAULT_BATCH_WAIT_MS = 250
#: the default of ``max.fetched.bytes`` (32 MiB)
DEFAULT_MAX_FETCHED_BYTES = 32 * 1024 * 1024

#: librdkafka keys the source owns; setting them through ``kafka.*`` (or a given client
#: configuration's properties) is an error.
_OWNED_KAFKA_KEYS: frozenset[str] = frozenset(
    {"bootstrap.servers", "group.id", "isolation.level", "enable.auto.offset.store"}
)


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
    format: Format = Format.RAW
    json_schema: pa.Schema | None = None
    startup_mode: StartupMode = StartupMode.EARLIEST
    startup_timestamp_ms: int | None = None
    startup_specific_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    include_metadata: tuple[str, ...] = ()
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    max_fetched_bytes: int = DEFAULT_MAX_FETCHED_BYTES
    consume_chunk_records: int = 10_000
    #: how long a fetch may wait for :data:`BATCH_MIN_BYTES` (``batch.wait.ms``); 0: no wait
    batch_wait_ms: int = DEFAULT_BATCH_WAIT_MS
    partition_discovery_interval_ms: int = 30_000
    max_error_rate: float = 0.01
    #: None: ``fail`` under guaranteed delivery, ``skip`` under best-effort (:meth:`bad_record_policy`)
    on_bad_record: BadRecordPolicy | None = None
    on_tombstone: TombstonePolicy = TombstonePolicy.BAD
    #: False: a cursor below the low watermark (records deleted by retention) resumes there, the loss logged
    fail_on_data_loss: bool = True
    #: a regular expression selecting topics (``topic=re:<regex>``); None for named topics
    topic_pattern: str | None = None
    key_format: KeyFormat = KeyFormat.RAW
    schema_registry_url: str | None = None
    #: ``schema.registry.<key>`` pass-through (may hold credentials: not in the repr)
    schema_registry_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: columns every record must have non-null (``required.fields``); a record that lacks one is bad
    required_fields: tuple[RequiredField, ...] = ()

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
        props, kafka_props, registry_props = _split_keys(properties)
        client = _client_config(props, kafka_props, kafka)
        selector = TopicSelector.parse(_required(props, "topic"))
        group_id = _required(props, "group.id")
        include_metadata = metadata_columns(props.get("include.metadata", "false"))
        formats = _formats(props, registry_props, include_metadata)
        startup = _startup(props, selector)
        policies = _policies(props)
        max_fetched, client = _fetch_bound(props, client)
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
            include_metadata=include_metadata,
            startup_mode=startup.mode,
            startup_timestamp_ms=startup.timestamp_ms,
            startup_specific_offsets=startup.specific_offsets,
            isolation_level=enum_value(
                IsolationLevel, "isolation.level", props.get("isolation.level", "read_committed")
            ),
            max_fetched_bytes=max_fetched,
            consume_chunk_records=int_value(
                "consume.chunk.records", props.get("consume.chunk.records", "10000"), minimum=1
            ),
            batch_wait_ms=int_value("batch.wait.ms", props.get("batch.wait.ms", str(DEFAULT_BATCH_WAIT_MS)), minimum=0),
            partition_discovery_interval_ms=int_value(
                "partition.discovery.interval.ms", props.get("partition.discovery.interval.ms", "30000"), minimum=0
            ),
            max_error_rate=policies.max_error_rate,
            on_bad_record=policies.on_bad_record,
            on_tombstone=policies.on_tombstone,
            fail_on_data_loss=policies.fail_on_data_loss,
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
        explicit = self.kafka.properties.get(CLIENT_QUEUE_KEY)
        if explicit is not None:
            return int(explicit) * 1024
        return max(1024, self.max_fetched_bytes // 2)

    @property
    def batch_min_bytes(self) -> int:
        """``fetch.min.bytes`` for ``batch.wait.ms``: :data:`BATCH_MIN_BYTES`, at most half the
        partition fetch limit (the broker counts no more per partition); 1 when ``batch.wait.ms=0``."""
        if not self.batch_wait_ms:
            return 1
        partition_limit = int(self.kafka.properties.get("max.partition.fetch.bytes", PARTITION_FETCH_BYTES))
        return max(1, min(BATCH_MIN_BYTES, partition_limit // 2))

    @property
    def fifo_bytes(self) -> int:
        """The FIFO's share of :attr:`max_fetched_bytes`: what librdkafka's queue leaves."""
        return self.max_fetched_bytes - self.client_queue_bytes

    def consumer_defaults(self) -> dict[str, str | int | bool]:
        """The source's choices for its consumer that the shared client properties may change."""
        return {
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
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            # A trickle is fetched a batch at a time (batch.wait.ms), not a record at a time.
            "fetch.min.bytes": self.batch_min_bytes,
            **({"fetch.wait.max.ms": self.batch_wait_ms} if self.batch_wait_ms else {}),
        }

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


# -- parsing by concern (each raises ConfigurationError on its first problem) ---------------------


class _Formats(NamedTuple):
    format: Format
    json_schema: pa.Schema | None
    key_format: KeyFormat
    registry_url: str | None
    required_fields: tuple[RequiredField, ...]


class _Startup(NamedTuple):
    mode: StartupMode
    timestamp_ms: int | None
    specific_offsets: dict[tuple[str, int], int]


class _Policies(NamedTuple):
    max_error_rate: float
    on_bad_record: BadRecordPolicy | None
    on_tombstone: TombstonePolicy
    fail_on_data_loss: bool


def _split_keys(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """``properties`` (keys stripped) and their ``kafka.*`` and ``schema.registry.<key>`` pass-through
    parts without the prefix; an unknown key raises, naming the nearest valid one."""
    props = {str(k).strip(): str(v) for k, v in properties.items()}
    kafka_props: dict[str, str] = {}
    registry_props: dict[str, str] = {}
    for key, value in props.items():
        if key.startswith(KAFKA_PREFIX):
            if not key[len(KAFKA_PREFIX):]:
                raise ConfigurationError("'kafka.' needs a librdkafka property name after it")
            kafka_props[key[len(KAFKA_PREFIX):]] = value
        elif key.startswith(REGISTRY_PREFIX) and key not in VALID_KEYS:
            registry_props[key[len(REGISTRY_PREFIX):]] = value
        elif key not in VALID_KEYS:
            near = difflib.get_close_matches(key, VALID_KEYS, n=1, cutoff=0.4)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigurationError(f"unknown property {key!r}{hint}")
    return props, kafka_props, registry_props


def _check_client_properties(properties: Mapping[str, str]) -> None:
    """Raise unless the client ``properties`` leave the source's own keys alone and keep
    ``enable.auto.commit`` off (offsets are committed only after an epoch is durable)."""
    for inner, value in properties.items():
        key = f"{KAFKA_PREFIX}{inner}"
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


def _client_config(
    props: Mapping[str, str], kafka_props: dict[str, str], kafka: KafkaClientConfig | None
) -> KafkaClientConfig:
    """The Kafka client configuration: of ``bootstrap.servers`` and ``kafka.*`` when the properties
    set ``bootstrap.servers`` or no ``kafka`` is given, else ``kafka`` (see
    :meth:`KafkaSourceConfig.from_properties`). The bootstrap value is checked by
    :class:`KafkaClientConfig` alone."""
    if "bootstrap.servers" not in props and kafka is not None:
        if kafka_props:
            raise ConfigurationError(
                f"{KAFKA_PREFIX}{next(iter(kafka_props))} goes with bootstrap.servers: this source's Kafka "
                "client configuration is given as a value (its properties are the place for it)"
            )
        _check_client_properties(kafka.properties)
        return kafka
    _check_client_properties(kafka_props)
    try:
        return KafkaClientConfig(props.get("bootstrap.servers", ""), kafka_props)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (property 'bootstrap.servers')") from None


def _required(props: Mapping[str, str], key: str) -> str:
    value = props.get(key, "").strip()
    if not value:
        raise ConfigurationError(f"missing required property {key!r}")
    return value


def _formats(props: Mapping[str, str], registry_props: Mapping[str, str], include_metadata: tuple[str, ...]) -> _Formats:
    """The value and key formats, the JSON schema and the schema registry they may need."""
    fmt = enum_value(Format, "format", props.get("format", "raw"))
    schema = None
    if "json.schema" in props:
        if fmt is not Format.JSON:
            raise ConfigurationError("json.schema is only valid with format=json")
        schema = parse_json_schema(props["json.schema"])
    key_format = enum_value(KeyFormat, "key.format", props.get("key.format", "raw"))
    registry_url = props.get("schema.registry.url", "").strip() or None
    if (fmt.uses_registry or key_format.uses_registry) and registry_url is None:
        raise ConfigurationError(f"format {fmt.value} / key.format {key_format.value} needs schema.registry.url")
    if key_format is not KeyFormat.RAW and "_key" not in include_metadata:
        raise ConfigurationError("key.format needs the _key column (include.metadata)")
    if registry_url is None and registry_props:
        raise ConfigurationError("schema.registry.* properties need schema.registry.url")
    required = parse_required_fields(props.get("required.fields", ""))
    payload = pa.schema([pa.field("value", pa.binary())]) if fmt is Format.RAW else schema if fmt is Format.JSON else None
    check_required_fields(required, payload, include_metadata)
    return _Formats(fmt, schema, key_format, registry_url, required)


def _startup(props: Mapping[str, str], selector: TopicSelector) -> _Startup:
    """The startup mode and the timestamp or offsets it needs (each only with its mode)."""
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
            raise ConfigurationError("startup.specific-offsets requires startup.mode=specific-offsets")
        specific = specific_offsets(props["startup.specific-offsets"], selector)
    elif mode is StartupMode.SPECIFIC_OFFSETS:
        raise ConfigurationError("startup.mode=specific-offsets requires startup.specific-offsets")
    return _Startup(mode, timestamp, specific)


def _policies(props: Mapping[str, str]) -> _Policies:
    """What bad records, tombstones and data lost to retention do."""
    try:
        error_rate = float(props.get("max.error.rate", "0.01"))
    except ValueError:
        raise ConfigurationError(f"max.error.rate={props['max.error.rate']!r} is not a number") from None
    if not 0.0 <= error_rate <= 1.0:
        raise ConfigurationError(f"max.error.rate={error_rate} must be within [0, 1]")
    on_bad_record = (
        enum_value(BadRecordPolicy, "on.bad.record", props["on.bad.record"]) if "on.bad.record" in props else None
    )
    return _Policies(
        max_error_rate=error_rate,
        on_bad_record=on_bad_record,
        on_tombstone=enum_value(TombstonePolicy, "on.tombstone", props.get("on.tombstone", "bad")),
        fail_on_data_loss=bool_value("fail.on.data.loss", props.get("fail.on.data.loss", "true")),
    )


def _fetch_bound(props: Mapping[str, str], client: KafkaClientConfig) -> tuple[int, KafkaClientConfig]:
    """``max.fetched.bytes``, and ``client`` with its ``queued.max.messages.kbytes`` (librdkafka's
    share of it, when set) checked to leave the source's FIFO a share and written as an integer."""
    max_fetched = int_value(
        "max.fetched.bytes", props.get("max.fetched.bytes", str(DEFAULT_MAX_FETCHED_BYTES)), minimum=2048
    )
    if CLIENT_QUEUE_KEY not in client.properties:
        return max_fetched, client
    queue_kb = int_value(f"kafka.{CLIENT_QUEUE_KEY}", client.properties[CLIENT_QUEUE_KEY], minimum=1)
    if queue_kb * 1024 >= max_fetched:
        raise ConfigurationError(
            f"kafka.{CLIENT_QUEUE_KEY}={queue_kb} (KiB) leaves nothing of max.fetched.bytes={max_fetched} "
            "for the source's own queue: raise max.fetched.bytes or lower it"
        )
    return max_fetched, dataclasses.replace(client, properties={**client.properties, CLIENT_QUEUE_KEY: str(queue_kb)})
