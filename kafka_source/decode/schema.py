"""The Arrow schema of a Kafka source: configured, inferred from sampled JSON records, or (registry
formats) read from the schema registry.

:func:`sample_values`, :func:`discover_json_schema` and :func:`registry_subject_schema` are blocking
I/O (run them off the event loop); the rest is pure.
"""
from __future__ import annotations

import io
import logging
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.json as pa_json
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.debezium import infer_row_schema
from laminar_kafka.kafka_source.read.startup import query_broker_facts, source_consumer
from laminar_kafka.kafka_source.schema_registry.arrow_types import UnsupportedSchemaError, payload_fields

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

logger = logging.getLogger(__name__)

__all__ = [
    "SAMPLE_RECORDS", "configured_schema", "discover_json_schema", "infer_json_schema", "registry_subject_schema",
    "sample_values",
]

#: How many records :func:`sample_values` reads to infer a JSON schema.
SAMPLE_RECORDS = 1000


def configured_schema(config: KafkaSourceConfig, json_schema: pa.Schema | None) -> pa.Schema:
    """The schema of ``config`` (payload columns plus the configured metadata columns).

    ``json_schema`` is an inferred payload schema for ``format=json`` without ``json-schema``;
    raises :class:`ConfigurationError` when such a format has neither. A registry format has no
    payload columns here: its batches carry the newest writer schema seen
    (:mod:`laminar_kafka.kafka_source.schema_registry.decode`); see :func:`registry_subject_schema` for a preview.
    """
    if config.format.reads_json:
        payload = json_schema or config.json_schema
        if payload is None:
            raise ConfigurationError(f"format={config.format.value} needs json-schema or discover_schema()")
        return BatchBuilder(config, payload).schema
    return BatchBuilder(config).schema


def infer_json_schema(config: KafkaSourceConfig, sample: list[bytes]) -> pa.Schema:
    """The payload schema of JSON ``sample`` values (every field nullable); ``debezium-json``: of
    the rows of the sampled events (:func:`~laminar_kafka.kafka_source.decode.debezium.infer_row_schema`).

    Raises :class:`ConfigurationError` if the sample is empty or does not parse as JSON.
    """
    lines = [v.replace(b"\n", b" ").replace(b"\r", b" ") for v in sample if v]
    if not lines:
        raise ConfigurationError(f"cannot infer a JSON schema: topics {config.topics} are empty")
    if config.format is Format.DEBEZIUM_JSON:
        return infer_row_schema(lines)
    try:
        table = pa_json.read_json(io.BytesIO(b"\n".join(lines)))
    except pa.ArrowInvalid as exc:
        raise ConfigurationError(f"cannot infer a JSON schema: {exc}", cause=exc) from exc
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in table.schema])


def discover_json_schema(config: KafkaSourceConfig, timeout_s: float) -> pa.Schema:
    """The JSON payload schema inferred from up to :data:`SAMPLE_RECORDS` records read from the
    start of the topics within ``timeout_s`` (blocking). Raises as :func:`infer_json_schema`."""
    return infer_json_schema(config, sample_values(config, SAMPLE_RECORDS, timeout_s))


def sample_values(config: KafkaSourceConfig, limit: int, timeout_s: float) -> list[bytes]:
    """Up to ``limit`` values from the start of the topics, within ``timeout_s`` (blocking)."""
    consumer = source_consumer(config, guaranteed=False)
    try:
        facts = query_broker_facts(consumer, config, timeout_s)
        assignment = [
            KafkaTopicPartition(t, p, low) for (t, p), (low, high) in facts.watermarks.items() if high > low
        ]
        if not assignment:
            return []
        consumer.assign(assignment)
        values: list[bytes] = []
        #: records read, tombstones included (a topic of deletes holds fewer values than offsets)
        read = 0
        deadline = time.monotonic() + timeout_s
        while len(values) < limit and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=limit - len(values), timeout=0.2):
                value = message.value()
                if message.error() is None:
                    read += 1
                    if value is not None:
                        values.append(value)
            if values and (len(values) >= limit or read >= sum(h - l for l, h in facts.watermarks.values())):
                break
        return values
    finally:
        consumer.close()


def registry_subject_schema(
    config: KafkaSourceConfig, topic: str, registry: SchemaRegistryClient | None = None
) -> pa.Schema:
    """The batch schema that records written with the latest schema of subject ``<topic>-value``
    (the default TopicNameStrategy) will have: a start-time check and preview (blocking).

    Raises :class:`ConfigurationError` when the format is not a registry format, the subject is
    missing or its schema has no Arrow mapping; :class:`~laminar_kafka.connector.errors.TransientError` when
    the registry is unreachable. Protobuf: the first message of the file.
    """
    from laminar_kafka.kafka_source.schema_registry.client import (
        UnknownSchemaError,
        WriterSchemas,
        registry_client,
        writer_type,
    )
    from laminar_kafka.kafka_source.schema_registry.decode import SCHEMA_TYPES

    if not config.format.uses_registry or config.schema_registry_url is None:
        raise ConfigurationError(f"format {config.format.value} does not use the schema registry")
    client = registry if registry is not None else registry_client(
        config.schema_registry_url, config.schema_registry_properties
    )
    subject = f"{topic}-value"
    schemas = WriterSchemas(client, SCHEMA_TYPES[config.format.value])
    try:
        latest = schemas.latest(subject)
        payload = payload_fields(writer_type(schemas.get(latest)), "value")
    except (UnknownSchemaError, UnsupportedSchemaError) as exc:
        raise ConfigurationError(f"subject {subject!r}: {exc}") from None
    builder = BatchBuilder(config, registry=client)
    return pa.schema(payload + list(builder.schema))
