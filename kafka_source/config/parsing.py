"""The source's properties parsed by concern (client, columns and formats, startup, reading bounds,
policies), each step raising :class:`ConfigurationError` on its first problem; every value is read
through its declaration (:mod:`laminar_kafka.kafka_source.config.definitions`). Pure: no I/O.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any, NamedTuple

import pyarrow as pa

from laminar_kafka.connector.settings import FALSE_WORDS, Setting, renamed_keys
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from laminar_kafka.kafka_source.config import definitions as d
from laminar_kafka.kafka_source.config.choices import (
    BadRecordPolicy,
    Format,
    KeyFormat,
    StartupMode,
    TombstonePolicy,
)
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.config.values import (
    int_value,
    metadata_columns,
    parse_json_schema,
    parse_upsert_keys,
    specific_offsets,
)
from laminar_kafka.kafka_source.decode.required_fields import (
    RequiredField,
    check_required_fields,
    parse_required_fields,
)

__all__ = [
    "CLIENT_QUEUE_KEY", "Formats", "Policies", "Startup", "client_config", "fetch_bound", "formats", "policies",
    "required", "split_keys", "startup", "upsert_keys", "value",
]

#: librdkafka's bound on its pre-fetched queue, a share of ``max-fetched-bytes``
CLIENT_QUEUE_KEY = "queued.max.messages.kbytes"
#: librdkafka keys the source owns; setting them through ``kafka.*`` (or a given client
#: configuration's properties) is an error.
OWNED_KAFKA_KEYS: frozenset[str] = frozenset(
    {"bootstrap.servers", "group.id", "isolation.level", "enable.auto.offset.store"}
)


class Formats(NamedTuple):
    format: Format
    json_schema: pa.Schema | None
    key_format: KeyFormat
    registry_url: str | None
    required_fields: tuple[RequiredField, ...]
    upsert_keys: tuple[str, ...]


class Startup(NamedTuple):
    mode: StartupMode
    timestamp_ms: int | None
    specific_offsets: dict[tuple[str, int], int]


class Policies(NamedTuple):
    max_error_rate: float
    on_bad_record: BadRecordPolicy | None
    on_tombstone: TombstonePolicy | None
    fail_on_data_loss: bool


def value(props: Mapping[str, str], setting: Setting) -> Any:
    """The typed value of ``setting`` in ``props``, or its declared default."""
    return setting.parse(props[setting.name]) if setting.name in props else setting.default


def split_keys(properties: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """``properties`` (keys stripped, old spellings renamed with a warning) and their ``kafka.*`` and
    ``schema.registry.<key>`` pass-through parts without the prefix; an unknown key raises, naming the
    nearest valid one."""
    stripped = {str(k).strip(): str(v) for k, v in properties.items()}
    props = renamed_keys(stripped, d.SOURCE_SETTINGS.values())
    kafka_props: dict[str, str] = {}
    registry_props: dict[str, str] = {}
    for key, text in props.items():
        if key.startswith(d.KAFKA_PREFIX):
            if not key[len(d.KAFKA_PREFIX):]:
                raise ConfigurationError("'kafka.' needs a librdkafka property name after it")
            kafka_props[key[len(d.KAFKA_PREFIX):]] = text
        elif key.startswith(d.REGISTRY_PREFIX) and key not in d.VALID_KEYS:
            registry_props[key[len(d.REGISTRY_PREFIX):]] = text
        elif key not in d.VALID_KEYS:
            near = difflib.get_close_matches(key, d.VALID_KEYS, n=1, cutoff=0.4)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigurationError(f"unknown property {key!r}{hint}")
    return props, kafka_props, registry_props


def _check_client_properties(properties: Mapping[str, str]) -> None:
    """Raise unless the client ``properties`` leave the source's own keys alone and keep
    ``enable.auto.commit`` off (offsets are committed only after an epoch is durable)."""
    for inner, text in properties.items():
        key = f"{d.KAFKA_PREFIX}{inner}"
        if inner in OWNED_KAFKA_KEYS:
            raise ConfigurationError(
                f"{key} is owned by the source; use {inner!r} at top level"
                if inner in d.VALID_KEYS
                else f"{key} is owned by the source and cannot be overridden"
            )
        if inner == "enable.auto.commit" and text.strip().lower() not in FALSE_WORDS:
            raise ConfigurationError(
                "kafka.enable.auto.commit cannot be enabled: offsets are committed only "
                "after an epoch is durable (notify_epoch_committed)"
            )


def client_config(
    props: Mapping[str, str], kafka_props: dict[str, str], kafka: KafkaClientConfig | None
) -> KafkaClientConfig:
    """The Kafka client configuration: of ``bootstrap.servers`` and ``kafka.*`` when the properties
    set ``bootstrap.servers`` or no ``kafka`` is given, else ``kafka`` (see
    :meth:`KafkaSourceConfig.from_properties`). The bootstrap value is checked by
    :class:`KafkaClientConfig` alone."""
    if "bootstrap.servers" not in props and kafka is not None:
        if kafka_props:
            raise ConfigurationError(
                f"{d.KAFKA_PREFIX}{next(iter(kafka_props))} goes with bootstrap.servers: this source's Kafka "
                "client configuration is given as a value (its properties are the place for it)"
            )
        _check_client_properties(kafka.properties)
        return kafka
    _check_client_properties(kafka_props)
    try:
        return KafkaClientConfig(props.get("bootstrap.servers", ""), kafka_props)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (property 'bootstrap.servers')") from None


def required(props: Mapping[str, str], key: str) -> str:
    text = props.get(key, "").strip()
    if not text:
        raise ConfigurationError(f"missing required property {key!r}")
    return text


def formats(props: Mapping[str, str], registry_props: Mapping[str, str], include_metadata: tuple[str, ...]) -> Formats:
    """The value and key formats, the JSON schema and the schema registry they may need."""
    fmt = value(props, d.FORMAT)
    schema = None
    if d.JSON_SCHEMA.name in props:
        if not fmt.reads_json:
            raise ConfigurationError("json-schema is only valid with format=json or debezium-json")
        schema = parse_json_schema(props[d.JSON_SCHEMA.name])
    key_format = value(props, d.KEY_FORMAT)
    registry_url = props.get(d.SCHEMA_REGISTRY_URL.name, "").strip() or None
    if (fmt.uses_registry or key_format.uses_registry) and registry_url is None:
        raise ConfigurationError(f"format {fmt.value} / key-format {key_format.value} needs schema.registry.url")
    if key_format is not KeyFormat.RAW and "_key" not in include_metadata:
        raise ConfigurationError("key-format needs the _key column (include-metadata)")
    if registry_url is None and registry_props:
        raise ConfigurationError("schema.registry.* properties need schema.registry.url")
    fields = parse_required_fields(props.get(d.REQUIRED_FIELDS.name, ""))
    payload = pa.schema([pa.field("value", pa.binary())]) if fmt is Format.RAW else schema if fmt.reads_json else None
    check_required_fields(fields, payload, include_metadata)
    return Formats(fmt, schema, key_format, registry_url, fields, upsert_keys(props, fmt, schema))


def upsert_keys(props: Mapping[str, str], fmt: Format, schema: pa.Schema | None) -> tuple[str, ...]:
    """The key fields of upsert mode (``upsert-keys``), checked against the format, the JSON
    schema (when given) and ``on-tombstone`` (upsert mode makes every tombstone a delete)."""
    keys = parse_upsert_keys(props.get(d.UPSERT_KEYS.name, ""))
    if not keys:
        if fmt is Format.DEBEZIUM_JSON:
            raise ConfigurationError("format=debezium-json needs upsert-keys (the key fields of a row, e.g. id)")
        return keys
    if fmt is Format.RAW:
        raise ConfigurationError("upsert-keys needs a format with fields (json, debezium-json, avro, protobuf, "
                                 "json-schema), not raw")
    if d.ON_TOMBSTONE.name in props:
        raise ConfigurationError("on-tombstone cannot be set with upsert-keys: a tombstone is a delete of its key")
    missing = [name for name in keys if schema is not None and name not in schema.names]
    if missing:
        raise ConfigurationError(f"upsert-keys: {missing[0]} is not a field of json-schema")
    return keys


def startup(props: Mapping[str, str], selector: TopicSelector) -> Startup:
    """The startup mode and the timestamp or offsets it needs (each only with its mode)."""
    mode = value(props, d.STARTUP_MODE)
    timestamp = value(props, d.STARTUP_TIMESTAMP_MS)
    if (timestamp is not None) != (mode is StartupMode.TIMESTAMP):
        raise ConfigurationError(f"{d.STARTUP_TIMESTAMP_MS.name} goes with startup-mode=timestamp, and only with it")
    specific: dict[tuple[str, int], int] = {}
    offsets = d.STARTUP_SPECIFIC_OFFSETS.name
    if (offsets in props) != (mode is StartupMode.SPECIFIC_OFFSETS):
        raise ConfigurationError(f"{offsets} goes with startup-mode=specific-offsets, and only with it")
    if offsets in props:
        specific = specific_offsets(props[offsets], selector)
    return Startup(mode, timestamp, specific)


def policies(props: Mapping[str, str]) -> Policies:
    """What bad records, tombstones and data lost to retention do."""
    return Policies(
        max_error_rate=value(props, d.MAX_ERROR_RATE),
        on_bad_record=value(props, d.ON_BAD_RECORD),
        on_tombstone=value(props, d.ON_TOMBSTONE),
        fail_on_data_loss=value(props, d.FAIL_ON_DATA_LOSS),
    )


def include_metadata(props: Mapping[str, str]) -> tuple[str, ...]:
    """The metadata columns ``include-metadata`` names."""
    return metadata_columns(value(props, d.INCLUDE_METADATA))


def fetch_bound(props: Mapping[str, str], client: KafkaClientConfig) -> tuple[int, KafkaClientConfig]:
    """``max-fetched-bytes``, and ``client`` with its ``queued.max.messages.kbytes`` (librdkafka's
    share of it, when set) checked to leave the source's FIFO a share and written as an integer."""
    max_fetched: int = value(props, d.MAX_FETCHED_BYTES)
    if CLIENT_QUEUE_KEY not in client.properties:
        return max_fetched, client
    queue_kb = int_value(f"kafka.{CLIENT_QUEUE_KEY}", client.properties[CLIENT_QUEUE_KEY], minimum=1)
    if queue_kb * 1024 >= max_fetched:
        raise ConfigurationError(
            f"kafka.{CLIENT_QUEUE_KEY}={queue_kb} (KiB) leaves nothing of max-fetched-bytes={max_fetched} "
            "for the source's own queue: raise max-fetched-bytes or lower it"
        )
    return max_fetched, dataclasses.replace(client, properties={**client.properties, CLIENT_QUEUE_KEY: str(queue_kb)})
