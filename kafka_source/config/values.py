"""Parsers of single source property values (booleans, integers, enums, the metadata column list,
``startup-specific-offsets``, ``json-schema``): pure, each error a :class:`ConfigurationError` naming
the property. :mod:`laminar_kafka.kafka_source.config.source_config` assembles them into :class:`~laminar_kafka.kafka_source.config.source_config.KafkaSourceConfig`."""
from __future__ import annotations

import enum
from typing import TypeVar

import pyarrow as pa

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.choices import METADATA_COLUMNS
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.config.type_text import parse_schema_text

__all__ = [
    "FALSE_WORDS", "TRUE_WORDS", "bool_value", "enum_value", "int_value", "metadata_columns",
    "parse_json_schema", "specific_offsets",
]

#: an enumeration of the configuration's closed choices (:mod:`laminar_kafka.kafka_source.config.choices`)
E = TypeVar("E", bound=enum.Enum)

FALSE_WORDS = frozenset({"false", "0", "no", "off"})
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})


def enum_value(cls: type[E], key: str, value: str) -> E:
    """The member of ``cls`` whose value is ``value`` (blanks and case ignored); raises
    :class:`ConfigurationError` naming ``key`` and the allowed values otherwise."""
    try:
        return cls(value.strip().lower())
    except ValueError:
        allowed = ", ".join(str(member.value) for member in cls)
        raise ConfigurationError(f"{key}={value!r}: expected one of {allowed}") from None


def bool_value(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in TRUE_WORDS or text in FALSE_WORDS:
        return text in TRUE_WORDS
    raise ConfigurationError(f"{key}={value!r}: expected true or false")


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
