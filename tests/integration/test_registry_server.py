"""A real Confluent-compatible schema registry (laminar_kafka.devstack.jvm.schema_registry: Apicurio, in memory) serves
confluent_kafka's schema-registry client and its Avro serializer/deserializer.

`SCHEMA_REGISTRY_URL` set: that existing registry is used instead of starting one.
"""
from __future__ import annotations

import datetime
import struct
from typing import Callable

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = pytest.mark.integration


TRADE_V1 = """{
  "type": "record", "name": "Trade", "namespace": "dev.laminar.test",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "symbol", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}
  ]
}"""

# TRADE_V1 plus an optional field with a default: backward compatible
TRADE_V2 = TRADE_V1.replace(
    '{"name": "tags", "type": {"type": "array", "items": "string"}}',
    '{"name": "tags", "type": {"type": "array", "items": "string"}},\n'
    '    {"name": "price", "type": ["null", "double"], "default": null}',
)


@pytest.fixture
def registry_url(schema_registry: str) -> str:
    """The Confluent-compatible base URL of the session's registry (tests/conftest.py)."""
    return schema_registry


def test_avro_record_round_trips_through_the_registry_in_the_confluent_wire_format(
    registry_url: str, unique: Callable[[str], str]
) -> None:
    topic = unique("trades")
    client = SchemaRegistryClient({"url": registry_url})
    schema_id = client.register_schema(f"{topic}-value", Schema(TRADE_V1, "AVRO"))
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = AvroSerializer(client, TRADE_V1, conf={"auto.register.schemas": False, "use.latest.version": True})
    record = {
        "id": 7, "symbol": "ACME", "at": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc),
        "tags": ["a", "b"],
    }

    payload = serializer(record, context)

    assert payload is not None
    magic, embedded_id = struct.unpack(">bI", payload[:5])
    assert (magic, embedded_id) == (0, schema_id)
    # a fresh client knows nothing: the deserializer must fetch the writer schema by id from the server
    decoded = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))(payload, context)
    assert decoded == record
    assert [v for v in client.get_subjects() if v == f"{topic}-value"] == [f"{topic}-value"]


def test_compatible_evolution_gets_a_new_version_and_an_unknown_id_is_refused(
    registry_url: str, unique: Callable[[str], str]
) -> None:
    topic = unique("evolving")
    subject = f"{topic}-value"
    client = SchemaRegistryClient({"url": registry_url})
    first_id = client.register_schema(subject, Schema(TRADE_V1, "AVRO"))

    second_id = client.register_schema(subject, Schema(TRADE_V2, "AVRO"))

    assert second_id != first_id
    assert client.get_versions(subject) == [1, 2]
    assert client.get_latest_version(subject).schema_id == second_id
    unknown_id = max(first_id, second_id) + 10_000
    with pytest.raises(SchemaRegistryError) as refused:
        AvroDeserializer(client)(struct.pack(">bI", 0, unknown_id) + b"\x00", SerializationContext(topic, MessageField.VALUE))
    assert (refused.value.http_status_code, refused.value.error_code) == (404, 40403)  # Confluent's "schema not found"
