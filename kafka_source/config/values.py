"""Parsers of the source's structured property values (the metadata column list,
``startup-specific-offsets``, ``json-schema``, ``upsert-keys``, a bounded integer inside them): pure, each error a
:class:`ConfigurationError` naming the property. Scalar values are parsed by their declarations
(:mod:`laminar_kafka.kafka_source.config.definitions`)."""
from __future__ import annotations

import pyarrow as pa

from laminar_kafka.connector.settings import FALSE_WORDS, TRUE_WORDS
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.choices import METADATA_COLUMNS, OP_COLUMN
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.config.type_text import parse_schema_text

__all__ = ["int_value", "metadata_columns", "parse_json_schema", "parse_upsert_keys", "specific_offsets"]


def int_value(key: str, value: str, *, minimum: int) -> int:
    try:
        result = int(value.strip())
    except ValueError:
        raise ConfigurationError(f"{key}={value!r} is not an integer") from None
    if result < minimum:
        raise ConfigurationError(f"{key}={value!r} must be >= {minimum}")
    return result


def parse_json_schema(text: str) -> pa.Schema:
    """Parse ``name:type,name:type`` (pyarrow type aliases and nested types as ``str(type)`` writes
    them: :mod:`laminar_kafka.kafka_source.config.type_text`) into a schema of nullable fields."""
    try:
        fields = list(parse_schema_text(text))
    except ConfigurationError as exc:
        raise ConfigurationError(f"json-schema: {exc}") from None
    if not fields:
        raise ConfigurationError("json-schema is empty")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"json-schema has duplicate field names: {names}")
    if any(n in METADATA_COLUMNS for n in names):
        raise ConfigurationError("json-schema fields may not use the metadata column names")
    return pa.schema(fields)


def parse_upsert_keys(text: str) -> tuple[str, ...]:
    """The field names of ``upsert-keys`` (``name,name``), in order: none empty, none twice, none a
    metadata column or ``_op``. An empty text: none (append mode)."""
    if not text.strip():
        return ()
    names = tuple(name.strip() for name in text.split(","))
    if "" in names:
        raise ConfigurationError(f"upsert-keys={text!r} has an empty field name")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigurationError(f"upsert-keys names {', '.join(twice)} twice")
    reserved = [name for name in names if name in METADATA_COLUMNS or name == OP_COLUMN]
    if reserved:
        raise ConfigurationError(f"upsert-keys: {reserved[0]} is a column the source adds, not a field of the records")
    return names


def metadata_columns(value: str) -> tuple[str, ...]:
    text = value.strip().lower()
    if text in TRUE_WORDS:
        return METADATA_COLUMNS
    if text in FALSE_WORDS or text == "":
        return ()
    wanted = set()
    for item in filter(None, (p.strip() for p in text.split(","))):
        column = item if item.startswith("_") else f"_{item}"
        if column not in METADATA_COLUMNS:
            raise ConfigurationError(
                f"include-metadata: unknown column {item!r}; valid: {', '.join(METADATA_COLUMNS)}"
            )
        wanted.add(column)
    return tuple(c for c in METADATA_COLUMNS if c in wanted)


def specific_offsets(value: str, selector: TopicSelector) -> dict[tuple[str, int], int]:
    result: dict[tuple[str, int], int] = {}
    for item in filter(None, (p.strip() for p in value.split(","))):
        parts = item.rsplit(":", 2)
        if len(parts) != 3:
            raise ConfigurationError(f"startup-specific-offsets: {item!r} is not topic:partition:offset")
        topic, partition, offset = parts
        if not selector.matches(topic):
            raise ConfigurationError(f"startup-specific-offsets: topic {topic!r} is not configured")
        key = (topic, int_value("startup-specific-offsets partition", partition, minimum=0))
        if key in result:
            raise ConfigurationError(f"startup-specific-offsets: {topic}:{key[1]} listed twice")
        result[key] = int_value("startup-specific-offsets offset", offset, minimum=0)
    if not result:
        raise ConfigurationError("startup-specific-offsets is empty")
    return result
