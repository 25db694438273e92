"""The Kafka source's settings, each declared once (:class:`~laminar_kafka.connector.settings.Setting`).

Every property :class:`~laminar_kafka.kafka_source.config.source_config.KafkaSourceConfig` reads is in
:data:`SOURCE_SETTINGS`: its key, type, default, bounds and doc. :data:`VALID_KEYS`, the parsing of
the properties, the node's pass-through settings and the source table of ``docs/settings.md`` are
made from it. The source's own settings are spelled with dashes (``batch-wait-ms``), as a node's
TOML file and flags spell them; Kafka's own names keep Kafka's spelling (``bootstrap.servers``,
``group.id``, ``isolation.level``, ``kafka.<key>``, ``schema.registry.<key>``). The dotted spellings
of 0.1.0 (``batch.wait.ms``) are still read, with a :class:`DeprecationWarning`. Pure values.
"""
from __future__ import annotations

from collections.abc import Mapping

from laminar_kafka.connector.settings import Layer, Setting, by_name
from laminar_kafka.kafka_source.config.choices import (
    BadRecordPolicy,
    Format,
    IsolationLevel,
    KeyFormat,
    StartupMode,
    TombstonePolicy,
)

__all__ = [
    "BATCH_MIN_BYTES", "DEFAULT_BATCH_WAIT_MS", "DEFAULT_MAX_FETCHED_BYTES", "KAFKA_PREFIX", "REGISTRY_PREFIX",
    "SOURCE_SETTINGS", "VALID_KEYS", "source_setting",
]

KAFKA_PREFIX = "kafka."
REGISTRY_PREFIX = "schema.registry."
#: what a fetch gathers before the broker answers, waiting up to ``batch-wait-ms`` (librdkafka's
#: ``fetch.min.bytes``; its default, 1 byte, makes a trickle cost a fetch per handful of records:
#: 1,000 partitions at 2,000 records/s cost the client 144-167 ms of CPU per second, 13-27 with this).
#: At most half of ``max.partition.fetch.bytes``: the broker counts at most that much per partition
#: towards it, so with a larger value a one-partition topic waited out every fetch even under load
#: (200k records read in 5.97 s with 1 MiB against 0.37 s with 256 KiB).
BATCH_MIN_BYTES = 256 * 1024
DEFAULT_BATCH_WAIT_MS = 250
#: the default of ``max-fetched-bytes`` (32 MiB)
DEFAULT_MAX_FETCHED_BYTES = 32 * 1024 * 1024

BOOTSTRAP_SERVERS = Setting(
    "bootstrap.servers", str, "Kafka bootstrap servers (host:port,...); required unless the Kafka client "
    "configuration is given as a value (a node gives its own)", shown_default="required")
TOPIC = Setting(
    "topic", str, "one topic, a comma-separated list, or re:<regex> (whole-name match; internal __ topics never "
    "match; topics created later that match are read too)", required=True, layer=Layer.BOTH)
GROUP_ID = Setting(
    "group.id", str, "consumer group, used only for advisory offset commits (auto commit is always off)",
    required=True)
FORMAT = Setting(
    "format", Format, "record format: raw (binary value column), json, debezium-json (Debezium's change events; "
    "needs upsert-keys), or with a schema registry avro, protobuf, json-schema", default=Format.RAW,
    layer=Layer.BOTH)
JSON_SCHEMA = Setting(
    "json-schema", str, "format=json (debezium-json: of a row, the fields of after): the record schema, "
    "name:type,... (pyarrow types: int64, string, double, timestamp[ms]...; nested ones as str(type) writes them); "
    "without it a schema is inferred from a sample",
    layer=Layer.BOTH, old_names=("json.schema",))
STARTUP_MODE = Setting(
    "startup-mode", StartupMode, "where reading starts when there is no checkpoint; resolved once to numeric "
    "offsets", default=StartupMode.EARLIEST, layer=Layer.BOTH, old_names=("startup.mode",))
STARTUP_TIMESTAMP_MS = Setting(
    "startup-timestamp-ms", int, "with startup-mode=timestamp, and only with it: the first record time to read "
    "(ms since the epoch)", minimum=0, unit="ms", layer=Layer.BOTH, old_names=("startup.timestamp.ms",))
STARTUP_SPECIFIC_OFFSETS = Setting(
    "startup-specific-offsets", str, "with startup-mode=specific-offsets, and only with it: "
    "topic:partition:offset,... (unlisted partitions start at earliest)",
    layer=Layer.BOTH, old_names=("startup.specific-offsets",))
INCLUDE_METADATA = Setting(
    "include-metadata", str, "false, true (all), or a list of _topic,_partition,_offset,_timestamp,_key,_headers",
    default="false", old_names=("include.metadata",))
ISOLATION_LEVEL = Setting(
    "isolation.level", IsolationLevel, "Kafka's isolation level of the source's consumer",
    default=IsolationLevel.READ_COMMITTED)
MAX_FETCHED_BYTES = Setting(
    "max-fetched-bytes", int, "bound on records fetched but not yet handed over: the Kafka client's queue (half, "
    "or kafka.queued.max.messages.kbytes) plus the source's FIFO (the rest)", default=DEFAULT_MAX_FETCHED_BYTES,
    minimum=2048, unit="bytes", shown_default="33554432 (32 MiB)", layer=Layer.BOTH,
    notes="A partition whose queue was full is fetched again after 10 ms (`kafka.fetch.queue.backoff.ms`; "
          "librdkafka's own default, 1 s, left a fast reader idle most of the time).",
    old_names=("max.fetched.bytes",))
CONSUME_CHUNK_RECORDS = Setting(
    "consume-chunk-records", int, "records per client consume() call", default=10_000, minimum=1,
    old_names=("consume.chunk.records",))
BATCH_WAIT_MS = Setting(
    "batch-wait-ms", int, "how long a fetch may wait to gather 256 KiB: a trickle comes a batch at a time, at most "
    "this late (0 = every record at once, at a fetch per handful of records)", default=DEFAULT_BATCH_WAIT_MS,
    minimum=0, unit="ms", layer=Layer.BOTH,
    notes="librdkafka's `fetch.wait.max.ms`, with `fetch.min.bytes` 256 KiB, at most half of "
          "`max.partition.fetch.bytes` (the broker counts no more per partition); `kafka.fetch.min.bytes` / "
          "`kafka.fetch.wait.max.ms` override it (docs/benchmarks.md, \"Cost that follows the work\"). A partition "
          "just taken (a handoff, an aborted drain, discovery) is read for its first second, and a drain's last "
          "records before the cut, by a second consumer without the wait, so neither waits for it.",
    old_names=("batch.wait.ms",))
PARTITION_DISCOVERY_INTERVAL_MS = Setting(
    "partition-discovery-interval-ms", int, "how often new partitions are looked for (0 disables; a node watches "
    "the topology itself)", default=30_000, minimum=0, unit="ms", old_names=("partition.discovery.interval.ms",))
ON_BAD_RECORD = Setting(
    "on-bad-record", BadRecordPolicy, "a record that does not decode (or whose _timestamp lies outside years "
    "0001-9999): fail stops the source (a node: one line naming topic, partition, offset), skip hands it over as "
    "rejected (a node lands it in <output>/_rejected/ with its raw bytes and the error, exactly once)",
    shown_default="fail (skip under best-effort delivery)", layer=Layer.BOTH, old_names=("on.bad.record",))
MAX_ERROR_RATE = Setting(
    "max-error-rate", float, "with on-bad-record=skip: the largest tolerated fraction of bad records (counted over "
    "at least 100 records)", default=0.01, minimum=0.0, maximum=1.0, layer=Layer.BOTH,
    old_names=("max.error.rate",))
ON_TOMBSTONE = Setting(
    "on-tombstone", TombstonePolicy, "a null value (a tombstone: a delete on a compacted topic, as Debezium writes) "
    "under json or a registry format: bad (a bad record, per on-bad-record) or row (a row of null payload columns, "
    "_key and metadata kept); under raw always a row with a null value; with upsert-keys always a delete of its "
    "key, and not to be set", shown_default="bad (a delete with upsert-keys)", layer=Layer.BOTH,
    old_names=("on.tombstone",))
FAIL_ON_DATA_LOSS = Setting(
    "fail-on-data-loss", bool, "true: a cursor below the low watermark (records deleted by retention before they "
    "were read) fails, naming the partition; false: reading resumes at the oldest offset Kafka still holds and the "
    "lost offsets are logged (a WARNING per partition) and counted", default=True, layer=Layer.BOTH,
    notes="A read offset beyond a partition's end (the topic re-created, or its log truncated) always fails.",
    old_names=("fail.on.data.loss",))
SCHEMA_REGISTRY_URL = Setting(
    "schema.registry.url", str, "formats avro, protobuf, json-schema: the Confluent-compatible schema registry "
    "(mock://<scope>: confluent-kafka's in-memory test client); schema.registry.<key> sets its client properties")
KEY_FORMAT = Setting(
    "key-format", KeyFormat, "how the _key column is decoded: raw bytes, string, or a schema-registry format "
    "(needs _key in include-metadata)", default=KeyFormat.RAW, layer=Layer.BOTH, old_names=("key.format",))
UPSERT_KEYS = Setting(
    "upsert-keys", str, "upsert mode: the key fields of a row, name,... (a table keeps the last change of each "
    "key); every row gets an _op column (c, u, r, d) and a tombstone is a delete of the key its record key holds",
    layer=Layer.BOTH,
    notes="With json, avro, protobuf or json-schema a record is an update (`_op` u), a tombstone a delete (d); "
          "`format=debezium-json` needs it. A key field missing from a row and from its record key (a JSON "
          "object, or a scalar for one key field) makes a bad record.")
REQUIRED_FIELDS = Setting(
    "required-fields", str, "name or name:kind|kind,...: columns every record must have non-null, of one of the "
    "kinds (a bad record otherwise)", old_names=("required.fields",))

#: every property of the source, in the order the docs list them
SOURCE_SETTINGS: Mapping[str, Setting] = by_name((
    BOOTSTRAP_SERVERS, TOPIC, GROUP_ID, FORMAT, JSON_SCHEMA, STARTUP_MODE, STARTUP_TIMESTAMP_MS,
    STARTUP_SPECIFIC_OFFSETS, INCLUDE_METADATA, ISOLATION_LEVEL, MAX_FETCHED_BYTES, CONSUME_CHUNK_RECORDS,
    BATCH_WAIT_MS, PARTITION_DISCOVERY_INTERVAL_MS, ON_BAD_RECORD, MAX_ERROR_RATE, ON_TOMBSTONE,
    FAIL_ON_DATA_LOSS, SCHEMA_REGISTRY_URL, KEY_FORMAT, REQUIRED_FIELDS, UPSERT_KEYS,
))
VALID_KEYS: tuple[str, ...] = tuple(SOURCE_SETTINGS)


def source_setting(name: str) -> Setting:
    """The declaration of the source's property ``name`` (a ``KeyError`` for an unknown one)."""
    return SOURCE_SETTINGS[name]
