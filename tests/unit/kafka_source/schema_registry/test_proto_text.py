"""Protobuf schemas served as ``.proto`` text (Apicurio's Confluent-compatible API ignores
``format=serialized``; the Confluent registry and the mock serve base64 descriptors): the parser
against descriptors built by hand, and records decoded through a registry that answers as Apicurio."""
from __future__ import annotations

import datetime as dt
import re
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Message
from confluent_kafka.schema_registry import Schema, SchemaReference
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from laminar_kafka.connector.errors import TransientError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.schema_registry.arrow_types import protobuf_to_arrow
from laminar_kafka.kafka_source.schema_registry.proto_text import (
    ProtoTextError,
    file_descriptor_proto,
    parse_proto_text,
)
from tests.unit.kafka_source.wiring import records_of

UTC = dt.timezone.utc
F = descriptor_pb2.FieldDescriptorProto

MONEY_TEXT = """syntax = "proto3";
package shared;
message Money { int64 cents = 1; string currency = 2; }
"""
ORDER_TEXT = """
// what Java's KafkaProtobufSerializer registers: the schema's canonical text
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import public "shared/money.proto";
option java_package = "dev.shop"; option (my.opt) = { a: 1 b: { c: "};" } };

enum Kind { option allow_alias = true; KIND_UNKNOWN = 0; BIG = 1; HUGE = 1; MINUS = -1; HEX = 0x10; reserved 9 to 11; }
message Audit { string who = 1; }
/* a block
   comment */
message Order {
  message Customer { string name = 1; bool vip = 2; }
  reserved 20, 21; reserved "old";
  int64 id = 1;
  google.protobuf.Timestamp at = 2;
  Customer customer = 3;
  repeated string items = 4 [packed = true, json_name = "its"];
  repeated Line lines = 5;
  Kind kind = 6;
  optional string note = 7;
  map<string, int64> attrs = 8;
  shared.Money total = 9;
  oneof pay { string card = 10; Customer payer = 11; }
  map<int32, Line> line_by_no = 12;
  message Line { string sku = 1; sint32 qty = 2; }
}
service Shop { rpc Get (Order) returns (Order) { option idempotency_level = NO_SIDE_EFFECTS; } }
"""


def hand_built() -> dict[str, Any]:
    """Classes of ORDER_TEXT's messages built from descriptors by hand (no parser involved)."""
    money = descriptor_pb2.FileDescriptorProto(name="shared/money.proto", package="shared", syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="currency", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    file = descriptor_pb2.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto", "shared/money.proto"])
    file.enum_type.add(name="Kind", value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=v) for n, v in
                                           (("KIND_UNKNOWN", 0), ("BIG", 1), ("HUGE", 1), ("MINUS", -1), ("HEX", 16))])
    file.enum_type[0].options.allow_alias = True
    file.message_type.add(name="Audit").field.add(name="who", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    customer = order.nested_type.add(name="Customer")
    customer.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    customer.field.add(name="vip", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=F.TYPE_SINT32, label=F.LABEL_OPTIONAL)
    for entry_name, key_type in (("AttrsEntry", F.TYPE_STRING), ("LineByNoEntry", F.TYPE_INT32)):
        entry = order.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=key_type, label=F.LABEL_OPTIONAL)
        if entry_name == "AttrsEntry":
            entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
        else:
            entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, type_name=".shop.Order.Line",
                            label=F.LABEL_OPTIONAL)
    add = order.field.add
    add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    add(name="at", number=2, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp", label=F.LABEL_OPTIONAL)
    add(name="customer", number=3, type=F.TYPE_MESSAGE, type_name=".shop.Order.Customer", label=F.LABEL_OPTIONAL)
    add(name="items", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    add(name="lines", number=5, type=F.TYPE_MESSAGE, type_name=".shop.Order.Line", label=F.LABEL_REPEATED)
    add(name="kind", number=6, type=F.TYPE_ENUM, type_name=".shop.Kind", label=F.LABEL_OPTIONAL)
    add(name="note", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, proto3_optional=True, oneof_index=1)
    add(name="attrs", number=8, type=F.TYPE_MESSAGE, type_name=".shop.Order.AttrsEntry", label=F.LABEL_REPEATED)
    add(name="total", number=9, type=F.TYPE_MESSAGE, type_name=".shared.Money", label=F.LABEL_OPTIONAL)
    add(name="card", number=10, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    add(name="payer", number=11, type=F.TYPE_MESSAGE, type_name=".shop.Order.Customer", label=F.LABEL_OPTIONAL,
        oneof_index=0)
    add(name="line_by_no", number=12, type=F.TYPE_MESSAGE, type_name=".shop.Order.LineByNoEntry",
        label=F.LABEL_REPEATED)
    order.oneof_decl.add(name="pay")
    order.oneof_decl.add(name="_note")
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(money)
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
            for name in ("Order", "Order.Customer", "Audit")}


def parsed_pool() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file_descriptor_proto("shared/money.proto", MONEY_TEXT))
    pool.Add(file_descriptor_proto("shop.proto", ORDER_TEXT))
    return pool


def fields(descriptor: Any) -> list[tuple[Any, ...]]:
    """What decoding depends on: every field's name, number, type, repetition, presence, oneof, and
    the full name of its message or enum type (recursively through nested messages)."""
    return [(f.name, f.number, f.type, f.is_repeated, f.is_required, f.has_presence,
             f.containing_oneof.name if f.containing_oneof else None,
             f.message_type.full_name if f.message_type else f.enum_type.full_name if f.enum_type else None)
            for f in descriptor.fields]


def test_parsed_text_matches_the_hand_built_descriptors() -> None:
    pool = parsed_pool()
    built = hand_built()
    for name in ("Order", "Order.Customer", "Audit"):
        parsed, expected = pool.FindMessageTypeByName(f"shop.{name}"), built[name].DESCRIPTOR
        assert fields(parsed) == fields(expected), name
        assert protobuf_to_arrow(parsed) == protobuf_to_arrow(expected)
    order = pool.FindMessageTypeByName("shop.Order")
    # the declared nested types keep their indexes; map entries follow them
    assert [t.name for t in order.nested_types] == ["Customer", "Line", "AttrsEntry", "LineByNoEntry"]
    assert [e.name for e in pool.FindMessageTypeByName("shop.Order").file.enum_types_by_name["Kind"].values] == [
        "KIND_UNKNOWN", "BIG", "HUGE", "MINUS", "HEX"]
    file = pool.FindFileByName("shop.proto")
    assert list(file.message_types_by_name) == ["Audit", "Order"] and file.services_by_name == {}


class ApicurioLikeRegistry:
    """Answers as Apicurio's Confluent-compatible API does: every schema as registered (here .proto
    text), whatever ``fmt`` asks for; ``down`` makes reference look-ups fail as an unreachable registry."""

    def __init__(self) -> None:
        self.down = False
        self.formats: list[str | None] = []
        reference = SchemaReference("shared/money.proto", "money", 1)
        self.schemas = {7: Schema(ORDER_TEXT, "PROTOBUF", [reference])}
        # RegisteredSchema's constructor differs across confluent-kafka releases; the reader uses .schema
        self.versions = {("money", 1): SimpleNamespace(subject="money", version=1, schema_id=3,
                                                       schema=Schema(MONEY_TEXT, "PROTOBUF"))}

    def get_schema(self, schema_id: int, subject_name: str | None = None, fmt: str | None = None) -> Schema:
        self.formats.append(fmt)
        return self.schemas[schema_id]

    def get_version(self, subject: str, version: int, deleted: bool = False, fmt: str | None = None) -> Any:
        self.formats.append(fmt)
        if self.down:
            raise ConnectionError("connection refused")
        return self.versions[(subject, version)]


def config() -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties(
        {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g", "format": "protobuf",
         "schema.registry.url": "http://apicurio:8080/apis/ccompat/v7", "include-metadata": "_offset"})


def test_records_decode_when_the_registry_serves_proto_text_with_a_text_reference() -> None:
    """Before: ``schema id 7 does not parse: Invalid base64-encoded string`` (every record refused)."""
    registry = ApicurioLikeRegistry()
    classes = hand_built()
    order = classes["Order"](id=5, items=["a"], kind=1, card="visa")
    order.at.FromDatetime(dt.datetime(2026, 12, 3, tzinfo=UTC))
    order.customer.name = "ann"
    order.lines.add(sku="s", qty=-2)
    order.attrs["n"] = 3
    order.total.cents, order.total.currency = 250, "EUR"
    order.line_by_no[4].sku = "four"
    header = b"\x00\x00\x00\x00\x07"
    customer = classes["Order.Customer"](name="bob", vip=True)
    values = [header + b"\x02\x02" + order.SerializeToString(),  # indexes [1]: Order
              header + b"\x04\x02\x00" + customer.SerializeToString(),  # [1, 0]: Order.Customer
              header + b"\x02\x0a" + b"x"]  # [5]: no such message
    builder = BatchBuilder(config(), registry=registry)  # type: ignore[arg-type]
    built = builder.build(records_of([Message(topic="t", partition=0, offset=i, value=v) for i, v in enumerate(values[:1])]))
    assert built.bad == ()
    assert built.batch.to_pylist() == [{
        "id": 5, "at": dt.datetime(2026, 12, 3, tzinfo=UTC), "customer": {"name": "ann", "vip": False},
        "items": ["a"], "lines": [{"sku": "s", "qty": -2}], "kind": "BIG", "note": None, "attrs": [("n", 3)],
        "total": {"cents": 250, "currency": "EUR"}, "card": "visa", "payer": None,
        "line_by_no": [(4, {"sku": "four", "qty": 0})], "_offset": 0}]
    assert registry.formats == ["serialized", "serialized"]  # asked for the descriptor; got the text
    nested = BatchBuilder(config(), registry=ApicurioLikeRegistry()).build(records_of(  # type: ignore[arg-type]
        [Message(topic="t", partition=0, offset=i, value=v) for i, v in enumerate(values[1:])]))
    assert nested.batch.to_pylist() == [{"name": "bob", "vip": True, "_offset": 0}]
    assert [(b.index, "no message at index [5]" in b.reason) for b in nested.bad] == [(1, True)]


def test_an_unreachable_registry_while_fetching_a_reference_is_transient_not_a_refused_schema() -> None:
    registry = ApicurioLikeRegistry()
    registry.down = True
    builder = BatchBuilder(config(), registry=registry)  # type: ignore[arg-type]
    value = b"\x00\x00\x00\x00\x07\x02\x02" + hand_built()["Order"](id=1).SerializeToString()
    records = records_of([Message(topic="t", partition=0, offset=0, value=value)])
    with pytest.raises(TransientError, match="unreachable"):
        builder.build(records)
    registry.down = False
    assert builder.build(records).batch.column("id").to_pylist() == [1]  # asked again, not refused


def test_base64_descriptors_still_read_and_name_is_set() -> None:
    import base64

    proto = file_descriptor_proto("shared/money.proto", MONEY_TEXT)
    again = file_descriptor_proto("x.proto", base64.b64encode(proto.SerializeToString()).decode())
    assert again.name == "x.proto" and again.message_type[0].name == "Money" and again.package == "shared"


@pytest.mark.parametrize(("text", "reason"), [
    ('syntax = "proto2"; message M { optional group G = 1 { optional int32 a = 2; } }', "line 1: group fields"),
    ('edition = "2023";\nmessage M {}', "line 1: editions"),
    ('syntax = "proto4";', "syntax 'proto4'"),
    ("message M {\n  int32 a = ;\n}", "line 2: expected a number"),
    ("message M {\n  int32 a = 1;\n", "unexpected end"),
    ("message M { int32 a = 1; } $", "unexpected character '$'"),
    ("frobnicate M {}", "unexpected 'frobnicate'"),
])
def test_what_the_parser_refuses_it_names_in_one_line(text: str, reason: str) -> None:
    with pytest.raises(ProtoTextError, match=re.escape(reason)) as caught:
        parse_proto_text(text)
    assert "\n" not in str(caught.value)


def test_proto2_labels_and_a_type_named_like_a_label() -> None:
    proto = parse_proto_text('package p; message optional { required int64 a = 1; }\n'
                             'message M { optional optional o = 1; repeated int32 r = 2 [packed=false]; optional string s = 3 [default = "x;y"]; }')
    pool = descriptor_pool.DescriptorPool()
    proto.name = "p.proto"
    pool.Add(proto)
    m = pool.FindMessageTypeByName("p.M")
    assert [(f.name, f.has_presence) for f in m.fields] == [("o", True), ("r", False), ("s", True)]
    assert m.fields_by_name["o"].message_type.full_name == "p.optional"
    assert pool.FindMessageTypeByName("p.optional").fields[0].is_required
