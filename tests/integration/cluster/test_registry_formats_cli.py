"""Protobuf and JSON Schema topics land through the CLI into typed columns, against a real schema
registry (Apicurio 2.4.2, Confluent-compatible API), not only confluent-kafka's mock: records are
produced by confluent-kafka's own ``ProtobufSerializer`` / ``JSONSerializer`` with auto-registration,
so the registry stores what those producers send (a base64 ``FileDescriptorProto`` with references
for imported files; a JSON Schema with ``$id`` and local ``$ref``). Each test checks every record
lands once, the column types the docs promise (nested messages/objects, repeated fields/arrays,
enums, optional fields, maps, timestamps), a compatible schema change (a new file with the evolved
schema) and bad records (no magic byte, unknown schema id, an undecodable body) dead-lettered once.

The Protobuf message classes are built at test time from descriptors (``descriptor_pb2``), no protoc.
"""
from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_producer
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli
from tests.integration.cluster.test_registry_cli import landed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

EPOCH = datetime.datetime(2026, 12, 3, tzinfo=datetime.timezone.utc)
#: bad records every test appends: no magic byte; an id the registry never handed out (0x7fff_ff00)
NOT_WIRE = b"not a registry record"
UNKNOWN_ID = b"\x00\x7f\xff\xff\x00\x00bogus-id"


def run_and_check_exact(kafka: KafkaHandle, topic: str, output: str, tmp_path: Path, fmt: str,
                        registry: str, produce_v2: Callable[[], object], rejected: int) -> list[pa.Table]:
    """Run one node through the CLI until it has caught up, produce the v2 records (``produce_v2``),
    wait again, stop it cleanly; then ``verify`` must find the lake exact with ``rejected`` dead
    letters. Returns the landed good-row tables (one per Parquet file)."""
    flags = ["--format", fmt, "--schema-registry-url", registry, "--include-key", "true",
             "--key-format", "string", "--on-bad-record", "skip", "--max-error-rate", "0.5",
             "--checkpoint-interval-ms", "300"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="a",
                              log_dir=tmp_path, extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 120).ok, node.log.read_text()[-3000:]
        produce_v2()  # a compatible schema change
        assert wait_caught_up(kafka.bootstrap, topic, output, 120).ok, node.log.read_text()[-3000:]
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic, "--json")
    report = json.loads(verify.stdout)
    assert verify.returncode == 0 and report["ok"] and report["rejected"] == rejected, verify.stdout + verify.stderr
    return landed(output)


def produce(bootstrap: str, topic: str, values: Iterable[tuple[int, bytes]], extra: Iterable[bytes] = ()) -> None:
    """``(id, value)`` pairs keyed ``k<id>`` to partition ``id % 2``, then ``extra`` raw values to partition 0."""
    keys = StringSerializer()
    producer = make_producer(KafkaClientConfig(bootstrap), {"linger.ms": 5})
    for i, value in values:
        producer.produce(topic, key=keys(f"k{i}", None), value=value, partition=i % 2)
    for raw in extra:
        producer.produce(topic, value=raw, partition=0)
    assert producer.flush(30) == 0


def check_dead_letters(output: str, expected: list[bytes]) -> None:
    """``_rejected/`` holds exactly ``expected`` (raw values), each with its reason."""
    rejected = pa.concat_tables(landed(output, "_rejected"))
    assert sorted(rejected.column("value").to_pylist()) == sorted(expected)
    reasons = dict(zip(rejected.column("value").to_pylist(), rejected.column("error").to_pylist(), strict=True))
    assert all(reasons.values())
    assert "magic byte" in reasons[NOT_WIRE]
    assert UNKNOWN_ID not in reasons or "unknown to the registry" in reasons[UNKNOWN_ID]


# -- Protobuf -----------------------------------------------------------------------------------------

PROTO_PACKAGE = "dev.laminar.cli"


def proto_order_class(v2: bool) -> Any:
    """The ``Order`` message class of a proto3 file built in memory (no protoc). ``Audit`` comes first,
    so ``Order``'s message index is ``[1]`` on the wire (not the one-byte ``[0]`` shortcut).

    Order: int64 id; Timestamp at; Customer customer (a nested message type); repeated string items;
    repeated Line lines; Kind kind (enum); optional string note (proto3 presence); map<string, int64>
    attrs; Money total (from another file, ``dev/laminar/shared/money.proto``: the serializer
    registers it as a reference); ``v2`` adds string channel (field 10).
    """
    F = descriptor_pb2.FieldDescriptorProto
    shared = descriptor_pb2.FileDescriptorProto(name="dev/laminar/shared/money.proto", package="dev.laminar.shared",
                                                syntax="proto3")
    money = shared.message_type.add(name="Money")
    money.field.add(name="cents", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    money.field.add(name="currency", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    file = descriptor_pb2.FileDescriptorProto(name="dev/laminar/cli/order.proto", package=PROTO_PACKAGE, syntax="proto3")
    file.dependency.extend(["google/protobuf/timestamp.proto", shared.name])
    file.enum_type.add(name="Kind", value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=i)
                                           for i, n in enumerate(("KIND_UNKNOWN", "BIG", "SMALL"))])
    file.message_type.add(name="Audit").field.add(name="who", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    customer = order.nested_type.add(name="Customer")
    customer.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    customer.field.add(name="vip", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order.field.add(name="at", number=2, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp", label=F.LABEL_OPTIONAL)
    order.field.add(name="customer", number=3, type=F.TYPE_MESSAGE, type_name=f".{PROTO_PACKAGE}.Order.Customer",
                    label=F.LABEL_OPTIONAL)
    order.field.add(name="items", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    order.field.add(name="lines", number=5, type=F.TYPE_MESSAGE, type_name=f".{PROTO_PACKAGE}.Order.Line",
                    label=F.LABEL_REPEATED)
    order.field.add(name="kind", number=6, type=F.TYPE_ENUM, type_name=f".{PROTO_PACKAGE}.Kind", label=F.LABEL_OPTIONAL)
    order.field.add(name="note", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, proto3_optional=True,
                    oneof_index=0)
    order.oneof_decl.add(name="_note")
    order.field.add(name="attrs", number=8, type=F.TYPE_MESSAGE, type_name=f".{PROTO_PACKAGE}.Order.AttrsEntry",
                    label=F.LABEL_REPEATED)
    order.field.add(name="total", number=9, type=F.TYPE_MESSAGE, type_name=".dev.laminar.shared.Money",
                    label=F.LABEL_OPTIONAL)
    if v2:
        order.field.add(name="channel", number=10, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(shared)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PROTO_PACKAGE}.Order"))


def proto_order(cls: Any, i: int, v2: bool) -> Any:
    message = cls(id=i, items=[f"sku{j}" for j in range(i % 3)], kind=i % 3)
    message.at.FromDatetime(EPOCH + datetime.timedelta(microseconds=i))
    message.customer.name, message.customer.vip = f"c{i % 5}", i % 2 == 0
    for j in range(i % 2):
        message.lines.add(sku=f"l{j}", qty=j + 1)
    if i % 4 == 0:
        message.note = f"n{i}"
    message.attrs["n"] = i
    message.total.cents, message.total.currency = i * 100, "EUR"
    if v2:
        message.channel = "app"
    return message


def produce_protobuf(bootstrap: str, registry: str, topic: str, ids: range, v2: bool, extra: Iterable[bytes] = ()) -> bytes:
    """Produce ``ids`` as ``Order`` records (auto-registered); returns the first value's bytes."""
    cls = proto_order_class(v2)
    serializer = ProtobufSerializer(cls, SchemaRegistryClient({"url": registry}),
                                    {"use.deprecated.format": False, "auto.register.schemas": True})
    context = SerializationContext(topic, MessageField.VALUE)
    values = [(i, serializer(proto_order(cls, i, v2), context)) for i in ids]
    produce(bootstrap, topic, values, extra)
    return values[0][1]


def test_protobuf_topic_lands_typed_columns_evolves_and_dead_letters_bad_records(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("protobuf")
    create_topic(kafka.bootstrap, topic, 2)
    sample = produce_protobuf(kafka.bootstrap, schema_registry, topic, range(0, 400), v2=False)
    assert sample[5:7] == b"\x02\x02"  # message indexes [1] on the wire (count 1, index 1, zigzag)
    registered = SchemaRegistryClient({"url": schema_registry}).get_latest_version(f"{topic}-value").schema
    assert [r.name for r in registered.references] == ["dev/laminar/shared/money.proto"]
    undecodable = sample[:7] + b"\xff\xff\xff"  # a known schema id and index, a truncated varint body
    bad = [NOT_WIRE, UNKNOWN_ID, undecodable]
    produce(kafka.bootstrap, topic, [], bad)
    output = str(tmp_path / "out")
    tables = run_and_check_exact(
        kafka, topic, output, tmp_path, "protobuf", schema_registry,
        lambda: produce_protobuf(kafka.bootstrap, schema_registry, topic, range(400, 500), v2=True), len(bad))

    first = tables[0].schema
    line = pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int32())])
    expected = {  # every protobuf column is nullable (docs: an unset message/optional field is null)
        "id": pa.int64(), "at": pa.timestamp("us", tz="UTC"),
        "customer": pa.struct([pa.field("name", pa.string()), pa.field("vip", pa.bool_())]),
        "items": pa.list_(pa.field("item", pa.string(), nullable=False)),
        "lines": pa.list_(pa.field("item", line, nullable=False)), "kind": pa.string(), "note": pa.string(),
        "attrs": pa.map_(pa.string(), pa.int64()), "_key": pa.string(),
        "total": pa.struct([pa.field("cents", pa.int64()), pa.field("currency", pa.string())]),
    }
    assert {name: first.field(name).type for name in expected} == expected
    assert "channel" not in first.names
    evolved = [t for t in tables if "channel" in t.schema.names]
    assert evolved, "the compatible schema change started no file with the evolved schema"
    assert all(t.schema.field("channel").type == pa.string() for t in evolved)

    rows = {r["id"]: r for t in tables for r in t.to_pylist()}
    ids = [i for t in tables for i in t.column("id").to_pylist()]
    assert sorted(ids) == list(range(500)), "a record is missing or landed twice"
    assert {r["_key"] for r in rows.values()} == {f"k{i}" for i in range(500)}
    payload = {name: rows[7][name] for name in expected}
    assert payload == {
        "id": 7, "at": EPOCH + datetime.timedelta(microseconds=7), "customer": {"name": "c2", "vip": False},
        "items": ["sku0"], "lines": [{"sku": "l0", "qty": 1}], "kind": "BIG", "note": None, "attrs": [("n", 7)],
        "_key": "k7", "total": {"cents": 700, "currency": "EUR"}}
    assert rows[8]["note"] == "n8" and rows[8]["kind"] == "SMALL" and rows[8]["lines"] == []
    assert rows[0]["kind"] == "KIND_UNKNOWN" and rows[0]["items"] == []  # proto3 defaults, not null
    assert rows[450]["channel"] == "app"
    check_dead_letters(output, bad)


# A schema registered as .proto text, as Java's KafkaProtobufSerializer, the registry UI or a REST call
# register it. The Confluent registry converts it for format=serialized; Apicurio serves the text as
# is, which confluent-kafka's Python client cannot read (it base64-decodes): kafka_source parses it.
TEXT_MONEY = """syntax = "proto3";
package dev.laminar.shared;
message Money { int64 cents = 1; string currency = 2; }
"""
TEXT_ORDER = """// the same file as proto_order_class(v2=False), as .proto text
syntax = "proto3";
package dev.laminar.cli;
import "google/protobuf/timestamp.proto";
import "dev/laminar/shared/money.proto";

enum Kind { KIND_UNKNOWN = 0; BIG = 1; SMALL = 2; }
message Audit { string who = 1; }
message Order {
  message Customer { string name = 1; bool vip = 2; }
  message Line { string sku = 1; int32 qty = 2; }
  int64 id = 1;
  google.protobuf.Timestamp at = 2;
  Customer customer = 3;
  repeated string items = 4;
  repeated Line lines = 5;
  Kind kind = 6;
  optional string note = 7;
  map<string, int64> attrs = 8;
  dev.laminar.shared.Money total = 9;
}
"""


def test_protobuf_schema_registered_as_proto_text_with_a_reference_lands(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("protobuf-text")
    create_topic(kafka.bootstrap, topic, 2)
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema(f"{topic}-money", Schema(TEXT_MONEY, "PROTOBUF"))
    schema_id = client.register_schema(f"{topic}-value", Schema(TEXT_ORDER, "PROTOBUF", references=[
        SchemaReference("dev/laminar/shared/money.proto", f"{topic}-money", 1)]))
    served = client.get_schema(schema_id, fmt="serialized").schema_str or ""
    assert "message Order" in served, "the registry converted the text: this test no longer shows the difference"
    cls = proto_order_class(v2=False)  # built from descriptors by hand: encodes independently of the parser
    header = b"\x00" + schema_id.to_bytes(4, "big") + b"\x02\x02"  # message indexes [1]: Order
    values = [(i, header + proto_order(cls, i, False).SerializeToString()) for i in range(300)]
    produce(kafka.bootstrap, topic, values, [NOT_WIRE])
    output = str(tmp_path / "out")
    tables = run_and_check_exact(kafka, topic, output, tmp_path, "protobuf", schema_registry, lambda: None, 1)

    schema = tables[0].schema
    assert schema.field("total").type == pa.struct([pa.field("cents", pa.int64()), pa.field("currency", pa.string())])
    assert schema.field("attrs").type == pa.map_(pa.string(), pa.int64())
    assert schema.field("at").type == pa.timestamp("us", tz="UTC") and schema.field("kind").type == pa.string()
    rows = {r["id"]: r for t in tables for r in t.to_pylist()}
    assert sorted(i for t in tables for i in t.column("id").to_pylist()) == list(range(300))
    assert rows[7]["total"] == {"cents": 700, "currency": "EUR"} and rows[7]["kind"] == "BIG"
    assert rows[7]["customer"] == {"name": "c2", "vip": False} and rows[7]["lines"] == [{"sku": "l0", "qty": 1}]
    assert rows[7]["note"] is None and rows[8]["note"] == "n8" and rows[7]["attrs"] == [("n", 7)]
    assert rows[7]["at"] == EPOCH + datetime.timedelta(microseconds=7)
    check_dead_letters(output, [NOT_WIRE])


# -- JSON Schema --------------------------------------------------------------------------------------

JSON_V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "https://laminar.dev/schemas/order.json",
    "title": "Order", "type": "object",
    "required": ["id", "at", "customer"],
    "definitions": {
        "customer": {"type": "object", "properties": {"name": {"type": "string"}, "vip": {"type": "boolean"}}},
    },
    "properties": {
        "id": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "amount": {"type": "number"},
        "customer": {"$ref": "#/definitions/customer"},
        "items": {"type": "array", "items": {"type": "string"}},
        "lines": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
        "kind": {"enum": ["BIG", "SMALL"]},
        "note": {"type": ["string", "null"]},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
}
JSON_V2: dict[str, Any] = {**JSON_V1, "properties": {**JSON_V1["properties"], "channel": {"type": "string"}}}


def json_order(i: int, v2: bool) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i, "at": (EPOCH + datetime.timedelta(milliseconds=i)).isoformat(), "day": "2026-12-03",
        "amount": i / 4, "customer": {"name": f"c{i % 5}", "vip": i % 2 == 0}, "items": [f"sku{j}" for j in range(i % 3)],
        "lines": [{"sku": f"l{j}", "qty": j + 1} for j in range(i % 2)], "kind": "BIG" if i % 2 else "SMALL",
        "attrs": {"n": i},
    }
    if i % 4 == 0:
        value["note"] = f"n{i}"  # absent otherwise: read as null
    if v2:
        value["channel"] = "app"
    return value


def produce_json(bootstrap: str, registry: str, topic: str, ids: range, v2: bool, extra: Iterable[bytes] = ()) -> bytes:
    """Produce ``ids`` as JSON Schema records (auto-registered, validated by the serializer); returns
    the first value's bytes."""
    serializer = JSONSerializer(json.dumps(JSON_V2 if v2 else JSON_V1), SchemaRegistryClient({"url": registry}),
                                conf={"auto.register.schemas": True})
    context = SerializationContext(topic, MessageField.VALUE)
    values = [(i, serializer(json_order(i, v2), context)) for i in ids]
    produce(bootstrap, topic, values, extra)
    return values[0][1]


def test_json_schema_topic_lands_typed_columns_evolves_and_dead_letters_bad_records(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("json-schema")
    create_topic(kafka.bootstrap, topic, 2)
    sample = produce_json(kafka.bootstrap, schema_registry, topic, range(0, 400), v2=False)
    wrong_type = sample[:5] + b'{"id": "not a number", "at": "2026-12-03T00:00:00Z"}'
    not_json = sample[:5] + b"{not json"
    bad = [NOT_WIRE, UNKNOWN_ID, wrong_type, not_json]
    produce(kafka.bootstrap, topic, [], bad)
    output = str(tmp_path / "out")
    tables = run_and_check_exact(
        kafka, topic, output, tmp_path, "json-schema", schema_registry,
        lambda: produce_json(kafka.bootstrap, schema_registry, topic, range(400, 500), v2=True), len(bad))

    first = tables[0].schema
    expected = {  # every JSON Schema property is nullable, required or not (docs)
        "id": pa.int64(), "at": pa.timestamp("us", tz="UTC"), "day": pa.date32(), "amount": pa.float64(),
        "customer": pa.struct([pa.field("name", pa.string()), pa.field("vip", pa.bool_())]),
        "items": pa.list_(pa.string()),
        "lines": pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int64())])),
        "kind": pa.string(), "note": pa.string(), "attrs": pa.map_(pa.string(), pa.int64()), "_key": pa.string(),
    }
    assert {name: first.field(name).type for name in expected} == expected
    assert "channel" not in first.names
    evolved = [t for t in tables if "channel" in t.schema.names]
    assert evolved, "the compatible schema change started no file with the evolved schema"

    rows = {r["id"]: r for t in tables for r in t.to_pylist()}
    ids = [i for t in tables for i in t.column("id").to_pylist()]
    assert sorted(ids) == list(range(500)), "a record is missing or landed twice"
    assert {r["_key"] for r in rows.values()} == {f"k{i}" for i in range(500)}
    sample_row = rows[7]
    assert sample_row["at"] == EPOCH + datetime.timedelta(milliseconds=7)
    assert sample_row["day"] == datetime.date(2026, 12, 3) and sample_row["amount"] == 1.75
    assert sample_row["customer"] == {"name": "c2", "vip": False} and sample_row["items"] == ["sku0"]
    assert sample_row["lines"] == [{"sku": "l0", "qty": 1}] and sample_row["kind"] == "BIG"
    assert sample_row["note"] is None and sample_row["attrs"] == [("n", 7)]
    assert rows[8]["note"] == "n8" and rows[8]["lines"] == [] and rows[8]["kind"] == "SMALL"
    assert rows[450]["channel"] == "app"
    assert all(r.get("channel") is None for i, r in rows.items() if i < 400)
    check_dead_letters(output, bad)
