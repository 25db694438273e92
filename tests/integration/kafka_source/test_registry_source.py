"""KafkaSource reading Avro (Confluent wire format) from a real Kafka into typed Arrow columns.

The registry is confluent-kafka's in-process mock (``mock://<scope>``): the test's serializer and
the source share it, since both run in this process.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from laminar_kafka.kafka_source import DecodeError, DeliveryGuarantee
from laminar_kafka.kafka_source.schema_registry.client import registry_client
from tests import support
from tests.integration.kafka_source.helpers import poll_until, row_count, start_source

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

V1 = {"type": "record", "name": "Payment", "namespace": "it", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "payer", "type": {"type": "record", "name": "Payer", "fields": [
        {"name": "name", "type": "string"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
START = dt.datetime(2024, 6, 1, tzinfo=dt.timezone.utc)


def record(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": i, "at": START + dt.timedelta(seconds=i), "amount": decimal.Decimal(i) / 4,
            "payer": {"name": f"p{i}", "tags": ["a"] * (i % 3)}, "note": None if i % 2 else f"n{i}", **extra}


def source_props(bootstrap: str, topic: str, group: str, registry: str, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "topic": topic, "group.id": group, "format": "avro",
            "schema.registry.url": registry, "include-metadata": "_partition,_offset,_key",
            "key-format": "string", **extra}


async def test_avro_topic_lands_in_typed_columns_and_evolves(kafka, unique: Callable[[str], str]) -> None:
    topic, registry = unique("src-avro"), f"mock://{unique('registry')}"
    support.create_topic(kafka.bootstrap, topic, 1)
    client = registry_client(registry, {})
    context = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, json.dumps(V1)), AvroSerializer(client, json.dumps(V2))
    support.produce(kafka.bootstrap, topic, [v1(record(i), context) for i in range(60)], partition=0, key=b"acct-1")
    support.produce(kafka.bootstrap, topic, [v2(record(i, channel="app"), context) for i in range(60, 100)],
                    partition=0, key=b"acct-1")
    support.produce(kafka.bootstrap, topic, [v1(record(i), context) for i in range(100, 110)], partition=0,
                    key=b"acct-1")

    source = await start_source(source_props(kafka.bootstrap, topic, unique("g"), registry))
    try:
        batches = await poll_until(source, row_count(110), max_records=25)
    finally:
        await source.close()
    tables = [b.records for b in batches]
    first = tables[0]
    types = {f.name: f.type for f in first.schema}
    assert types["at"] == pa.timestamp("ms", tz="UTC") and types["amount"] == pa.decimal128(12, 2)
    assert types["payer"] == pa.struct([pa.field("name", pa.string(), nullable=False),
                                        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False)),
                                                 nullable=False)])
    assert types["_key"] == pa.string() and "channel" not in types
    rows = [row for table in tables for row in table.to_pylist()]
    assert [r["_offset"] for r in rows] == list(range(110))
    assert rows[7]["at"] == START + dt.timedelta(seconds=7) and rows[7]["amount"] == decimal.Decimal("1.75")
    assert rows[8]["payer"] == {"name": "p8", "tags": ["a", "a"]} and rows[8]["note"] == "n8"
    assert rows[7]["_key"] == "acct-1"
    # one schema per batch; from the first batch holding a v2 record on, every batch has the v2 schema
    evolved = [i for i, table in enumerate(tables) if "channel" in table.schema.names]
    assert evolved and evolved == list(range(evolved[0], len(tables)))
    assert all(t.schema == tables[-1].schema for t in tables[evolved[0]:])
    by_offset = {r["_offset"]: r for r in rows}
    assert by_offset[80]["channel"] == "app" and by_offset[105]["channel"] == "web"


async def test_unknown_schema_id_fails_or_is_skipped(kafka, unique: Callable[[str], str]) -> None:
    topic, registry = unique("src-avro-bad"), f"mock://{unique('registry')}"
    support.create_topic(kafka.bootstrap, topic, 1)
    context = SerializationContext(topic, MessageField.VALUE)
    serialize = AvroSerializer(registry_client(registry, {}), json.dumps(V1))
    good = [serialize(record(i), context) for i in range(5)]
    unknown = b"\x00" + (424242).to_bytes(4, "big") + good[0][5:]
    support.produce(kafka.bootstrap, topic, [*good[:2], unknown, *good[2:]], partition=0)

    failing = await start_source(source_props(kafka.bootstrap, topic, unique("g"), registry),
                                 delivery=DeliveryGuarantee.EXACTLY_ONCE)
    try:
        with pytest.raises(DecodeError, match="424242 is unknown"):
            await poll_until(failing, row_count(5))
    finally:
        await failing.close()

    skipping = await start_source(source_props(kafka.bootstrap, topic, unique("g"), registry,
                                               **{"on-bad-record": "skip", "max-error-rate": "0.5"}))
    try:
        batches = await poll_until(skipping, row_count(5))
    finally:
        await skipping.close()
    assert [r["id"] for b in batches for r in b.records.to_pylist()] == list(range(5))
    rejected = [b.rejected for b in batches if b.rejected is not None]
    assert sum(r.num_rows for r in rejected) == 1
