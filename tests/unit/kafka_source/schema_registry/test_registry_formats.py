"""Schema-registry formats: Arrow mapping of every type, round trips through confluent-kafka's own
serializers and mock registry, schema evolution, bad records and decoded keys."""
from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from laminar_kafka.connector.errors import TransientError
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig, KeyFormat
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.schema import registry_subject_schema
from laminar_kafka.kafka_source.schema_registry.arrow_types import (
    UnsupportedSchemaError,
    avro_to_arrow,
    json_schema_to_arrow,
    payload_fields,
    protobuf_to_arrow,
)
from laminar_kafka.kafka_source.schema_registry.client import (
    UnknownSchemaError,
    WireFormatError,
    registry_client,
    safe_url,
    split_wire,
)

UTC = dt.timezone.utc
_scopes = itertools.count()

from tests.unit.kafka_source.wiring import records_of


def scope() -> str:
    return f"mock://test-registry-formats-{next(_scopes)}"


def config(url: str, fmt: str = "avro", include_metadata: str = "_offset", **extra: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g", "format": fmt,
         "schema.registry.url": url, "include-metadata": include_metadata, **extra}
    )


def msg(offset: int, value: bytes | None, key: bytes | None = None) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=value, key=key)


VALUE = SerializationContext("t", MessageField.VALUE)
KEY = SerializationContext("t", MessageField.KEY)


# -- Avro mapping ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("avro", "arrow"), [
    ("boolean", pa.bool_()), ("int", pa.int32()), ("long", pa.int64()), ("float", pa.float32()),
    ("double", pa.float64()), ("bytes", pa.binary()), ("string", pa.string()), ("null", pa.null()),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
    ({"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", tz="UTC")),
    ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz="UTC")),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms")),
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}, pa.decimal128(12, 3)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 0}, pa.decimal256(50, 0)),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 9, "scale": 2},
     pa.decimal128(9, 2)),
    ({"type": "long", "logicalType": "some-future-type"}, pa.int64()),
    ({"type": "fixed", "name": "F", "size": 16}, pa.binary(16)),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, pa.string()),
    ({"type": "array", "items": "long"}, pa.list_(pa.field("item", pa.int64(), nullable=False))),
    ({"type": "array", "items": ["null", "long"]}, pa.list_(pa.field("item", pa.int64()))),
    ({"type": "map", "values": "double"}, pa.map_(pa.string(), pa.field("value", pa.float64(), nullable=False))),
    (["null", "string"], pa.string()),
    ({"type": "string"}, pa.string()),
])
def test_avro_types(avro: Any, arrow: pa.DataType) -> None:
    assert avro_to_arrow(avro) == arrow


def test_avro_record_nested_named_and_nullability() -> None:
    schema = {"type": "record", "name": "Outer", "namespace": "ns", "fields": [
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}]},
        {"name": "c", "type": "Inner"},  # a reference to a named type in the same namespace
        {"name": "d", "type": "ns.Inner"},
    ]}
    inner = pa.struct([pa.field("x", pa.int32(), nullable=False)])
    assert avro_to_arrow(schema) == pa.struct([
        pa.field("a", pa.int64(), nullable=False), pa.field("b", inner, nullable=True),
        pa.field("c", inner, nullable=False), pa.field("d", inner, nullable=False),
    ])
    assert [f.name for f in payload_fields(avro_to_arrow(schema), "value")] == ["a", "b", "c", "d"]
    assert payload_fields(pa.int64(), "_key") == [pa.field("_key", pa.int64())]


@pytest.mark.parametrize("schema", [
    ["int", "string"],
    {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
    "Nowhere",
])
def test_avro_unsupported(schema: Any) -> None:
    with pytest.raises(UnsupportedSchemaError):
        avro_to_arrow(schema)


# -- JSON Schema mapping ----------------------------------------------------------------------------

def test_json_schema_types() -> None:
    schema = {
        "type": "object",
        "required": ["id", "when"],
        "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {
            "id": {"type": "integer"},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "name": {"type": ["string", "null"]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
            "point": {"$ref": "#/definitions/Point"},
            "color": {"enum": ["red", "green"]},
            "maybe": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        },
    }
    assert json_schema_to_arrow(schema) == pa.struct([
        pa.field("id", pa.int64()),
        pa.field("when", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.date32()),
        pa.field("name", pa.string()),
        pa.field("ok", pa.bool_()),
        pa.field("tags", pa.list_(pa.field("item", pa.string()))),
        pa.field("attrs", pa.map_(pa.string(), pa.field("value", pa.int64()))),
        pa.field("point", pa.struct([pa.field("x", pa.float64())])),
        pa.field("color", pa.string()),
        pa.field("maybe", pa.int64()),
    ])


@pytest.mark.parametrize("schema", [
    {}, {"type": ["string", "integer"]}, {"type": "object"}, {"type": "array"},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"$ref": "other.json#/x"},
])
def test_json_schema_unsupported(schema: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_arrow(schema)


# -- Protobuf (message classes built at test time, no protoc) ---------------------------------------

def proto_classes(package: str, extra_fields: bool = False) -> dict[str, Any]:
    """Classes of a file with ``Order`` (every kind of field) and ``Other``; ``extra_fields`` adds
    a field to ``Order`` (a compatible evolution)."""
    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    file.dependency.append("google/protobuf/timestamp.proto")
    file.enum_type.add(name="Kind", value=[
        descriptor_pb2.EnumValueDescriptorProto(name="UNKNOWN", number=0),
        descriptor_pb2.EnumValueDescriptorProto(name="BIG", number=1),
    ])
    item = file.message_type.add(name="Item")
    item.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    other = file.message_type.add(name="Other")
    other.field.add(name="x", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="price", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    order.field.add(name="kind", number=3, type=F.TYPE_ENUM, type_name=f".{package}.Kind", label=F.LABEL_OPTIONAL)
    order.field.add(name="items", number=4, type=F.TYPE_MESSAGE, type_name=f".{package}.Item", label=F.LABEL_REPEATED)
    order.field.add(name="at", number=5, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                    label=F.LABEL_OPTIONAL)
    order.field.add(name="tags", number=6, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    order.field.add(name="blob", number=7, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    order.field.add(name="count", number=8, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="attrs", number=9, type=F.TYPE_MESSAGE, type_name=f".{package}.Order.AttrsEntry",
                    label=F.LABEL_REPEATED)
    if extra_fields:
        order.field.add(name="note", number=10, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in ("Order", "Other", "Item")}


def test_protobuf_types() -> None:
    order = proto_classes("mapping")["Order"]
    assert protobuf_to_arrow(order.DESCRIPTOR) == pa.struct([
        pa.field("id", pa.int64()), pa.field("price", pa.float64()), pa.field("kind", pa.string()),
        pa.field("items", pa.list_(pa.field("item", pa.struct([pa.field("sku", pa.string())]), nullable=False))),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
        pa.field("blob", pa.binary()), pa.field("count", pa.uint32()),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    ])


def test_protobuf_round_trip_and_message_indexes() -> None:
    url = scope()
    classes = proto_classes("roundtrip")
    serializer = ProtobufSerializer(classes["Order"], registry_client(url, {}), {"use.deprecated.format": False})
    order = classes["Order"](id=7, price=2.5, kind=1, tags=["a", "b"], blob=b"\x00\x01", count=3)
    order.at.seconds, order.at.nanos = 1_700_000_000, 123_456_000
    order.items.add(sku="s1")
    order.attrs["k"] = 9
    data = serializer(order, VALUE)
    schema_id, indexes, _ = split_wire(data, protobuf=True)
    assert indexes == (2,)  # Order is the third message of its file
    empty = serializer(classes["Order"](), VALUE)
    built = BatchBuilder(config(url, "protobuf")).build(records_of([msg(0, data), msg(1, empty)]))
    assert built.bad == ()
    rows = built.batch.to_pylist()
    assert rows[0] == {
        "id": 7, "price": 2.5, "kind": "BIG", "items": [{"sku": "s1"}],
        "at": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC), "tags": ["a", "b"],
        "blob": b"\x00\x01", "count": 3, "attrs": [("k", 9)], "_offset": 0,
    }
    assert rows[1]["id"] == 0 and rows[1]["kind"] == "UNKNOWN" and rows[1]["at"] is None
    assert built.batch.schema.field("at").type == pa.timestamp("us", tz="UTC")


def test_protobuf_evolution_adds_a_column() -> None:
    url = scope()
    client = registry_client(url, {})
    v1_order = proto_classes("evolve")["Order"]
    v1 = ProtobufSerializer(v1_order, client, {"use.deprecated.format": False})
    v2_classes = proto_classes("evolve", extra_fields=True)
    v2 = ProtobufSerializer(v2_classes["Order"], client, {"use.deprecated.format": False})
    builder = BatchBuilder(config(url, "protobuf"))
    first = builder.build(records_of([msg(0, v1(v1_order(id=1), VALUE))])).batch
    assert "note" not in first.schema.names
    second = builder.build(records_of([
        msg(1, v2(v2_classes["Order"](id=2, note="n"), VALUE)),
        msg(2, v1(v1_order(id=3), VALUE)),
    ])).batch
    assert second.schema.names[-2:] == ["note", "_offset"]
    assert second.column("note").to_pylist() == ["n", None]
    assert second.column("id").to_pylist() == [2, 3]


# -- Avro round trips ---------------------------------------------------------------------------------

AVRO_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
    {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
        {"name": "city", "type": "string"}]}], "default": None},
]}
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}


def avro_record(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i, "name": f"n{i}" if i % 2 else None,
        "at": dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC),
        "at_us": dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), "day": dt.date(2024, 5, 1),
        "price": decimal.Decimal("19.99"), "ref": uuid.UUID(int=i), "lines": [{"sku": "a", "qty": i}],
        "attrs": {"k": "v"}, "state": "PAID", "address": {"city": "Oslo"} if i % 2 else None, **extra,
    }


def avro_serializer(url: str, schema: dict[str, Any]) -> AvroSerializer:
    return AvroSerializer(registry_client(url, {}), json.dumps(schema))


def test_avro_round_trip_typed_columns() -> None:
    url = scope()
    serialize = avro_serializer(url, AVRO_V1)
    builder = BatchBuilder(config(url))
    built = builder.build(records_of([msg(i, serialize(avro_record(i), VALUE)) for i in range(3)]))
    assert built.bad == ()
    batch = built.batch
    assert batch.schema == builder.schema
    assert batch.schema.names == [f["name"] for f in AVRO_V1["fields"]] + ["_offset"]
    types = {f.name: f.type for f in batch.schema}
    assert types["at"] == pa.timestamp("ms", tz="UTC") and types["at_us"] == pa.timestamp("us", tz="UTC")
    assert types["day"] == pa.date32() and types["price"] == pa.decimal128(10, 2)
    assert types["ref"] == pa.string() and types["state"] == pa.string()
    assert pa.types.is_list(types["lines"]) and pa.types.is_map(types["attrs"])
    assert pa.types.is_struct(types["address"]) and batch.schema.field("address").nullable
    assert not batch.schema.field("id").nullable and batch.schema.field("name").nullable
    row = batch.to_pylist()[1]
    assert row["id"] == 1 and row["name"] == "n1" and row["ref"] == str(uuid.UUID(int=1))
    assert row["at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert row["at_us"] == dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert row["day"] == dt.date(2024, 5, 1) and row["price"] == decimal.Decimal("19.99")
    assert row["lines"] == [{"sku": "a", "qty": 1}] and row["attrs"] == [("k", "v")]
    assert row["state"] == "PAID" and row["address"] == {"city": "Oslo"}
    assert batch.column("address").to_pylist()[0] is None


def test_avro_evolution_added_field_with_default() -> None:
    """v1 then v2: the batch with a v2 record has the v2 schema; v1 records in it get the default;
    a later batch of v1 records keeps the v2 schema (never back to an older one)."""
    url = scope()
    v1, v2 = avro_serializer(url, AVRO_V1), avro_serializer(url, AVRO_V2)
    builder = BatchBuilder(config(url))
    first = builder.build(records_of([msg(0, v1(avro_record(0), VALUE))])).batch
    assert "channel" not in first.schema.names
    second = builder.build(records_of([msg(1, v1(avro_record(1), VALUE)), msg(2, v2(avro_record(2, channel="app"), VALUE))]))
    assert second.bad == ()
    assert second.batch.schema.field("channel").type == pa.string()
    assert second.batch.column("channel").to_pylist() == ["web", "app"]
    assert second.batch.schema != first.schema
    third = builder.build(records_of([msg(3, v1(avro_record(3), VALUE))])).batch
    assert third.schema == second.batch.schema and third.column("channel").to_pylist() == ["web"]


def test_avro_evolution_removed_field() -> None:
    url = scope()
    v1 = avro_serializer(url, AVRO_V1)
    fewer = {**AVRO_V1, "fields": [f for f in AVRO_V1["fields"] if f["name"] != "name"]}
    v2 = avro_serializer(url, fewer)
    built = BatchBuilder(config(url)).build(records_of([
        msg(0, v1(avro_record(1), VALUE)), msg(1, v2({k: v for k, v in avro_record(2).items() if k != "name"}, VALUE)),
    ]))
    assert built.bad == () and "name" not in built.batch.schema.names
    assert built.batch.column("id").to_pylist() == [1, 2]


def test_bad_records_unknown_id_no_magic_truncated_and_tombstone() -> None:
    url = scope()
    good = avro_serializer(url, AVRO_V1)(avro_record(1), VALUE)
    unknown = b"\x00" + (987654).to_bytes(4, "big") + good[5:]
    built = BatchBuilder(config(url)).build(records_of([
        msg(0, good), msg(1, unknown), msg(2, b"{\"json\": 1}"), msg(3, good[:-3]), msg(4, None), msg(5, good),
    ]))
    assert [b.index for b in built.bad] == [1, 2, 3, 4]
    reasons = [b.reason for b in built.bad]
    assert "987654 is unknown" in reasons[0]
    assert "magic byte" in reasons[1]
    assert "schema id" in reasons[2] and "tombstone" in reasons[3]
    assert built.batch.column("_offset").to_pylist() == [0, 5]


def test_every_record_bad_gives_an_empty_batch() -> None:
    built = BatchBuilder(config(scope())).build(records_of([msg(0, b"\x00\x00\x00\x00\x07xx"), msg(1, b"nope")]))
    assert built.batch.num_rows == 0 and len(built.bad) == 2


def test_split_wire() -> None:
    assert split_wire(b"\x00\x00\x00\x01\x02rest", protobuf=False)[:2] == (258, ())
    assert split_wire(b"\x00\x00\x00\x00\x05\x00rest", protobuf=True)[:2] == (5, (0,))
    assert split_wire(b"\x00\x00\x00\x00\x05\x04\x02\x06rest", protobuf=True)[:2] == (5, (1, 3))
    for broken in (b"", b"\x00\x00", b"\x01\x00\x00\x00\x05x"):
        with pytest.raises(WireFormatError):
            split_wire(broken, protobuf=False)
    with pytest.raises(WireFormatError):
        split_wire(b"\x00\x00\x00\x00\x05\x04\x82", protobuf=True)


# -- JSON Schema round trips ------------------------------------------------------------------------

JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
    "required": ["id", "at"],
    "properties": {
        "id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"}, "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "user": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}


def test_json_schema_round_trip_and_bad_value() -> None:
    url = scope()
    serialize = JSONSerializer(json.dumps(JSON_SCHEMA), registry_client(url, {}))
    good = serialize({"id": 1, "at": "2024-05-01T12:00:00.5Z", "day": "2024-05-01", "score": 2,
                      "tags": ["x"], "user": {"name": "ann"}}, VALUE)
    sparse = serialize({"id": 2, "at": "2024-05-01T14:00:00+02:00"}, VALUE)
    wrong = good[:5] + b'{"id": "not a number", "at": "2024-05-01T12:00:00Z"}'
    built = BatchBuilder(config(url, "json-schema")).build(records_of([msg(0, good), msg(1, wrong), msg(2, sparse)]))
    assert [b.index for b in built.bad] == [1]
    types = {f.name: f.type for f in built.batch.schema}
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["day"] == pa.date32()
    rows = built.batch.to_pylist()
    assert rows[0]["at"] == dt.datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC)
    assert rows[0]["day"] == dt.date(2024, 5, 1) and rows[0]["score"] == 2.0
    assert rows[0]["user"] == {"name": "ann"} and rows[0]["tags"] == ["x"]
    assert rows[1]["at"] == dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC) and rows[1]["user"] is None


# -- keys and headers ---------------------------------------------------------------------------------

def test_key_formats() -> None:
    url = scope()
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "tenant", "type": "string"}]}
    key_serializer = AvroSerializer(registry_client(url, {}), json.dumps(key_schema))
    value = avro_serializer(url, AVRO_V1)(avro_record(1), VALUE)
    keyed = BatchBuilder(config(url, include_metadata="_offset,_key", **{"key-format": "avro"}))
    built = keyed.build(records_of([
        msg(0, value, key_serializer({"tenant": "a"}, KEY)), msg(1, value, None), msg(2, value, b"not avro"),
    ]))
    assert [(b.index, b.reason.startswith("key: ")) for b in built.bad] == [(2, True)]
    assert built.batch.schema.field("_key").type == pa.struct([pa.field("tenant", pa.string(), nullable=False)])
    assert built.batch.column("_key").to_pylist() == [{"tenant": "a"}, None]
    as_string = BatchBuilder(KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "b", "topic": "t", "group.id": "g", "include-metadata": "_key,_headers",
         "key-format": "string"}))
    built = as_string.build(records_of([
        Message(topic="t", partition=0, offset=0, value=b"v", key=b"k\xc3\xa9", headers=[("h", b"1"), ("n", None)]),
        Message(topic="t", partition=0, offset=1, value=b"v", key=b"\xff"),
        Message(topic="t", partition=0, offset=2, value=b"v"),
    ]))
    assert [b.index for b in built.bad] == [1]
    assert built.batch.schema.field("_key").type == pa.string()
    assert built.batch.column("_key").to_pylist() == ["k\u00e9", None]
    assert built.batch.column("_headers").to_pylist() == [[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None]


# -- configuration and registry errors ----------------------------------------------------------------

def test_config() -> None:
    cfg = config("mock://x", "protobuf", **{"schema.registry.basic.auth.user.info": "u:secret-pw",
                                          "key-format": "string", "include-metadata": "_key"})
    assert cfg.format is Format.PROTOBUF and cfg.format.uses_registry and cfg.key_format is KeyFormat.STRING
    assert cfg.schema_registry_properties == {"basic.auth.user.info": "u:secret-pw"}
    assert "secret-pw" not in repr(cfg) and "secret-pw" not in json.dumps(cfg.identity_options())
    assert cfg.identity_options()["key-format"] == "string"
    base = {"bootstrap.servers": "b", "topic": "t", "group.id": "g"}
    for bad in ({"format": "avro"}, {"key-format": "avro", "include-metadata": "_key"},
                {"key-format": "string"}, {"schema.registry.timeout": "5"}, {"key-format": "xml"}):
        with pytest.raises(ConfigurationError):
            KafkaSourceConfig.from_properties({**base, **bad})


def test_unreachable_registry_is_transient_and_consumes_nothing() -> None:
    cfg = config("http://127.0.0.1:9", **{"schema.registry.timeout": "1", "schema.registry.max.retries": "0"})
    with pytest.raises(TransientError) as caught:
        BatchBuilder(cfg).build(records_of([msg(0, b"\x00\x00\x00\x00\x01payload")]))
    assert "unreachable" in str(caught.value)


class _RefusingRegistry:
    def get_schema(self, schema_id: int, **_: Any) -> Any:
        raise SchemaRegistryError(401, 40101, "Unauthorized")


def test_registry_refusing_credentials_is_a_configuration_error() -> None:
    builder = BatchBuilder(config("http://registry:8081"), registry=_RefusingRegistry())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="refuses access"):
        builder.build(records_of([msg(0, b"\x00\x00\x00\x00\x01payload")]))


def test_bad_client_properties_name_no_value() -> None:
    with pytest.raises(ConfigurationError) as caught:
        registry_client("http://r:8081", {"basic.auth.user.info": "no-colon-secret", "bogus.key": "x"})
    assert "no-colon-secret" not in str(caught.value)


def test_registry_errors_are_connector_errors() -> None:
    from laminar_kafka.connector.errors import ConnectorError

    assert issubclass(UnknownSchemaError, ConnectorError) and issubclass(UnsupportedSchemaError, ConnectorError)


def test_registry_subject_schema_previews_the_latest_version() -> None:
    url = scope()
    avro_serializer(url, AVRO_V1)(avro_record(1), VALUE)
    avro_serializer(url, AVRO_V2)(avro_record(2, channel="x"), VALUE)
    schema = registry_subject_schema(config(url), "t")
    assert schema.names == [f["name"] for f in AVRO_V2["fields"]] + ["_offset"]
    with pytest.raises(ConfigurationError, match="'missing-value'"):
        registry_subject_schema(config(url), "missing")


def test_safe_url_hides_user_info() -> None:
    assert safe_url("https://user:pw@registry:8081/x") == "https://***@registry:8081/x"
    assert safe_url("http://registry:8081") == "http://registry:8081"


class _CountingRegistry:
    """Delegates to a mock registry, counts get_schema calls, and can be made unreachable."""

    def __init__(self, url: str) -> None:
        self.inner = registry_client(url, {})
        self.calls = 0
        self.down = False

    def get_schema(self, schema_id: int, **kwargs: Any) -> Any:
        self.calls += 1
        if self.down:
            raise ConnectionError("connection refused")
        return self.inner.get_schema(schema_id, **kwargs)


def test_the_reader_threads_prefetch_keeps_registry_calls_off_the_poll() -> None:
    """The reader thread prefetches each chunk's schema ids, so build() (on the event loop) finds
    them cached; an id the prefetch could not fetch raises TransientError once, without waiting;
    an unknown id is asked once, then refused from the cache."""
    url = scope()
    serialize = avro_serializer(url, AVRO_V1)
    registry = _CountingRegistry(url)
    builder = BatchBuilder(config(url), registry=registry)  # type: ignore[arg-type]
    assert builder.prefetches
    messages = [msg(i, serialize(avro_record(i), VALUE)) for i in range(3)]

    registry.down = True
    builder.prefetch(records_of(messages))  # never raises
    calls = registry.calls
    with pytest.raises(TransientError, match="unreachable"):
        builder.build(records_of(messages))
    assert registry.calls == calls  # the poll did not wait for the registry

    registry.down = False
    builder.prefetch(records_of(messages))
    calls = registry.calls
    assert builder.build(records_of(messages)).batch.num_rows == 3 and registry.calls == calls

    unknown = [msg(9, b"\x00\x00\x00\x7f\x7fxx")]
    builder.prefetch(records_of(unknown))
    calls = registry.calls
    for _ in range(3):
        assert len(builder.build(records_of(unknown)).bad) == 1
    assert registry.calls == calls  # refused from the cache: the registry is not asked per batch
    assert not BatchBuilder(config(url, fmt="json", **{"json-schema": "a:int64"})).prefetches


def test_on_tombstone_row_decodes_a_null_value_to_a_row_of_nulls_with_its_key() -> None:
    """A compacted (or Debezium) topic: a delete's tombstone is a row, not a bad record; every
    payload column becomes nullable, even ``id``, a required Avro field."""
    url = scope()
    good = avro_serializer(url, AVRO_V1)(avro_record(1), VALUE)
    builder = BatchBuilder(config(url, include_metadata="_offset,_key", **{"on-tombstone": "row"}))
    built = builder.build(records_of([msg(0, good, key=b"a"), msg(1, None, key=b"a"), msg(2, b"nope")]))
    assert [b.index for b in built.bad] == [2]
    batch = built.batch
    assert batch.column("_offset").to_pylist() == [0, 1] and batch.column("_key").to_pylist() == [b"a", b"a"]
    assert batch.column("id").to_pylist() == [1, None] and batch.column("address").to_pylist()[1] is None
    assert all(field.nullable for field in batch.schema if not field.name.startswith("_"))


def test_on_tombstone_row_before_any_value_decoded_is_a_row_without_payload_columns() -> None:
    builder = BatchBuilder(config(scope(), **{"on-tombstone": "row"}))
    built = builder.build(records_of([msg(0, None), msg(1, None)]))
    assert built.bad == () and built.batch.column("_offset").to_pylist() == [0, 1]


def test_an_unreachable_registry_while_fetching_an_avro_reference_is_transient_not_a_refused_schema() -> None:
    """A registry outage between the schema and its reference once cached the schema as unparseable
    (UnsupportedSchemaError): every later record of that id was dead-lettered for the life of the node."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    url = scope()
    inner = registry_client(url, {})
    address = {"type": "record", "name": "Address", "namespace": "shop", "fields": [{"name": "city", "type": "string"}]}
    inner.register_schema("address", Schema(json.dumps(address), "AVRO"))
    person = {"type": "record", "name": "Person", "namespace": "shop",
              "fields": [{"name": "id", "type": "long"}, {"name": "home", "type": "shop.Address"}]}
    schema_id = inner.register_schema("t-value", Schema(json.dumps(person), "AVRO",
                                                        [SchemaReference("shop.Address", "address", 1)]))

    class VersionsDown(_CountingRegistry):
        """Schemas by id answer; versions (how references are fetched) fail while ``down``."""

        def get_schema(self, schema_id: int, **kwargs: Any) -> Any:
            return self.inner.get_schema(schema_id, **kwargs)

        def get_version(self, *args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise ConnectionError("connection refused")
            return self.inner.get_version(*args, **kwargs)

    registry = VersionsDown(url)
    value = b"\x00" + schema_id.to_bytes(4, "big") + b"\x0e\x08Oslo"  # id 7, city "Oslo"
    builder = BatchBuilder(config(url), registry=registry)  # type: ignore[arg-type]
    registry.down = True
    with pytest.raises(TransientError, match="unreachable"):
        builder.build(records_of([msg(0, value)]))
    registry.down = False
    built = builder.build(records_of([msg(0, value)]))  # asked again, not refused from the cache
    assert built.bad == () and built.batch.to_pylist() == [{"id": 7, "home": {"city": "Oslo"}, "_offset": 0}]
