"""``required-fields``: the property's grammar, the kinds of Arrow types, the rows that break a field,
the builder turning them into bad records (keeping the good rows in order) and the configuration
refusing a field no record could have."""
from __future__ import annotations

import datetime as dt
import itertools
import json
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.required_fields import (
    RequiredField,
    ValueKind,
    bad_rows,
    check_required_fields,
    kind_of,
    parse_required_fields,
    schema_problem,
)
from laminar_kafka.kafka_source.schema_registry.client import registry_client
from tests.unit.kafka_source.wiring import records_of

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}
INTEGER, STRING, BINARY = ValueKind.INTEGER, ValueKind.STRING, ValueKind.BINARY
BOOLEAN, DATE, TIMESTAMP = ValueKind.BOOLEAN, ValueKind.DATE, ValueKind.TIMESTAMP


# --- the property ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fields"), [
    ("", ()),
    (" , ,", ()),
    ("id", (RequiredField("id"),)),
    ("_key", (RequiredField("_key"),)),
    ("id:integer", (RequiredField("id", frozenset({INTEGER})),)),
    (" id : integer | STRING ", (RequiredField("id", frozenset({INTEGER, STRING})),)),
    ("customer_id:integer|string,event_time:timestamp|date", (
        RequiredField("customer_id", frozenset({INTEGER, STRING})),
        RequiredField("event_time", frozenset({TIMESTAMP, DATE})))),
    ("a:integer|integer", (RequiredField("a", frozenset({INTEGER})),)),
    ("a:binary|boolean||", (RequiredField("a", frozenset({BINARY, BOOLEAN})),)),
])
def test_parse(text: str, fields: tuple[RequiredField, ...]) -> None:
    assert parse_required_fields(text) == fields


@pytest.mark.parametrize(("text", "message"), [
    ("id:int", r"'id:int': unknown kind 'int' \(expected integer, string, binary, boolean, date, timestamp\)"),
    ("id:integer|float", "unknown kind 'float'"),
    ("id:integer:string", "unknown kind 'integer:string'"),
    ("id:", r"'id:' names no kind after ':'"),
    ("id: ", "names no kind"),
    ("id:|", "names no kind"),
    ("1id", "'1id' is not a column name"),
    ("a-b", "is not a column name"),
    ("a b:integer", "'a b' is not a column name"),
    (":integer", "'' is not a column name"),
    ("a.b", "is not a column name"),
    ("id,name,id:integer", r"lists a field twice: \['id', 'name', 'id'\]"),
])
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_required_fields(text)


def test_text_is_the_property_form_with_kinds_in_a_fixed_order() -> None:
    field = RequiredField("x", frozenset({TIMESTAMP, INTEGER, DATE}))
    assert field.text() == "x:integer|date|timestamp"
    assert field.describe_kinds() == "integer or date or timestamp"
    assert RequiredField("x").text() == "x"
    assert parse_required_fields(field.text()) == (field,)


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(
    st.builds(RequiredField, st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True),
              st.frozensets(st.sampled_from(list(ValueKind)))),
    unique_by=lambda f: f.name, max_size=5))
def test_parse_of_the_text_is_the_fields(fields: list[RequiredField]) -> None:
    assert parse_required_fields(",".join(f.text() for f in fields)) == tuple(fields)


# --- kinds ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("arrow_type", "kind"), [
    (pa.int8(), INTEGER), (pa.int16(), INTEGER), (pa.int32(), INTEGER), (pa.int64(), INTEGER),
    (pa.uint8(), None), (pa.uint16(), None), (pa.uint32(), None), (pa.uint64(), None),
    (pa.float16(), None), (pa.float32(), None), (pa.float64(), None),
    (pa.decimal128(10, 2), None), (pa.decimal256(40, 2), None),
    (pa.string(), STRING), (pa.large_string(), STRING),
    (pa.dictionary(pa.int32(), pa.string()), STRING), (pa.dictionary(pa.int8(), pa.large_string()), STRING),
    (pa.dictionary(pa.int32(), pa.int64()), INTEGER),
    (pa.binary(), BINARY), (pa.large_binary(), BINARY), (pa.binary(16), BINARY),
    (pa.bool_(), BOOLEAN),
    (pa.date32(), DATE), (pa.date64(), DATE),
    *((pa.timestamp(unit, tz), TIMESTAMP) for unit in ("s", "ms", "us", "ns") for tz in (None, "UTC", "Asia/Tokyo")),
    (pa.time32("ms"), None), (pa.time64("us"), None), (pa.duration("ms"), None), (pa.null(), None),
    (pa.list_(pa.int64()), None), (pa.struct([("a", pa.int64())]), None), (pa.map_(pa.string(), pa.int64()), None),
])
def test_kind_of(arrow_type: pa.DataType, kind: ValueKind | None) -> None:
    assert kind_of(arrow_type) is kind
    assert RequiredField("f").accepts(arrow_type)  # no kinds: any type
    assert RequiredField("f", frozenset({kind} if kind else set())).accepts(arrow_type) is True
    others = frozenset(ValueKind) - {kind}
    assert RequiredField("f", others).accepts(arrow_type) is False


def test_schema_problem() -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.float64())])
    assert schema_problem(schema, RequiredField("id", frozenset({INTEGER}))) is None
    assert schema_problem(schema, RequiredField("price")) is None
    assert schema_problem(schema, RequiredField("missing")) == "the record has no field missing"
    assert schema_problem(schema, RequiredField("name", frozenset({INTEGER, DATE}))) == \
        "field name is string, expected integer or date"
    assert schema_problem(schema, RequiredField("price", frozenset({INTEGER}))) == \
        "field price is double, expected integer"


# --- bad rows ---------------------------------------------------------------------------------------

def test_bad_rows_are_the_null_ones_with_the_first_field_they_break() -> None:
    batch = pa.record_batch({
        "a": pa.array([1, None, 3, None, 5], pa.int64()),
        "b": pa.array(["x", "y", None, None, "z"]),
    })
    fields = parse_required_fields("a:integer,b:string")
    assert bad_rows(batch, fields) == {1: "field a is null or absent", 2: "field b is null or absent",
                                       3: "field a is null or absent"}
    assert bad_rows(batch, parse_required_fields("b,a")) == {1: "field a is null or absent",
                                                            2: "field b is null or absent",
                                                            3: "field b is null or absent"}
    assert bad_rows(batch.slice(4), fields) == {}
    assert bad_rows(batch.slice(1, 2), fields) == {0: "field a is null or absent", 1: "field b is null or absent"}
    assert bad_rows(batch, ()) == {}
    assert bad_rows(batch.slice(0, 0), parse_required_fields("missing")) == {}


def test_a_missing_column_or_a_type_of_another_kind_makes_every_row_bad() -> None:
    batch = pa.record_batch({"a": pa.array([1, None, 3], pa.int64()), "p": pa.array([1.5, 2.5, 3.5])})
    assert bad_rows(batch, parse_required_fields("c")) == dict.fromkeys(range(3), "the record has no field c")
    assert bad_rows(batch, parse_required_fields("p:integer|string")) == dict.fromkeys(
        range(3), "field p is double, expected integer or string")
    assert bad_rows(batch, parse_required_fields("a,c")) == {
        0: "the record has no field c", 1: "field a is null or absent", 2: "the record has no field c"}


def test_a_null_inside_a_dictionary_is_a_null() -> None:
    """The validity of a dictionary column's indices misses a null among its values."""
    column = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["x", None]))
    assert column.null_count == 0
    batch = pa.record_batch({"f": column})
    assert bad_rows(batch, parse_required_fields("f:string")) == {1: "field f is null or absent"}
    with_index_null = pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int32()), pa.array(["x"]))
    assert bad_rows(pa.record_batch({"f": with_index_null}), parse_required_fields("f")) == {
        1: "field f is null or absent"}


# --- through the builder ----------------------------------------------------------------------------

def msg(offset: int, value: bytes | None, key: bytes | None = b"k", stamp: int | None = 1_700_000_000_000) -> Message:
    timestamp = (TIMESTAMP_NOT_AVAILABLE, -1) if stamp is None else (TIMESTAMP_CREATE_TIME, stamp)
    return Message(topic="t", partition=0, offset=offset, value=value, key=key, timestamp=timestamp)


def json_builder(required: str, schema: str = "id:int64,name:string,day:date32",
                 metadata: str = "_offset,_timestamp,_key") -> BatchBuilder:
    return BatchBuilder(KafkaSourceConfig.from_properties({
        **BASE, "format": "json", "json-schema": schema, "include-metadata": metadata, "required-fields": required,
    }))


def test_json_records_breaking_a_required_field_are_bad_records_and_the_rest_keep_their_order() -> None:
    builder = json_builder("id:integer,name:string,_key")
    built = builder.build(records_of([
        msg(0, b'{"id":1,"name":"a"}'),
        msg(1, b'{"name":"b"}'),               # id absent
        msg(2, b'{"id":null,"name":"c"}'),     # id null
        msg(3, b'{"id":"x","name":"d"}'),      # id of another type: does not decode
        msg(4, b'{"id":5,"name":"e"}', key=None),
        msg(5, b'{"id":6}'),                   # name absent
        msg(6, b'{"id":7,"name":"g"}'),
        msg(7, b'{"id":8,"name":null}'),
    ]))
    reasons = {b.index: b.reason for b in built.bad}
    assert sorted(reasons) == [1, 2, 3, 4, 5, 7]
    assert reasons[1] == reasons[2] == "field id is null or absent"
    assert "JSON" in reasons[3] and "id" in reasons[3]
    assert reasons[4] == "field _key is null or absent"
    assert reasons[5] == reasons[7] == "field name is null or absent"
    assert built.batch.to_pylist() == [
        {"id": 1, "name": "a", "day": None, "_offset": 0, "_timestamp": dt.datetime(2023, 11, 14, 22, 13, 20),
         "_key": b"k"},
        {"id": 7, "name": "g", "day": None, "_offset": 6, "_timestamp": dt.datetime(2023, 11, 14, 22, 13, 20),
         "_key": b"k"},
    ]
    assert built.batch.schema == builder.schema


def test_a_null_kafka_timestamp_is_bad_only_when_required() -> None:
    messages = [msg(0, b'{"id":1}'), msg(1, b'{"id":2}', stamp=None)]
    assert json_builder("id").build(records_of(messages)).bad == ()
    built = json_builder("id,_timestamp:timestamp").build(records_of(messages))
    assert [(b.index, b.reason) for b in built.bad] == [(1, "field _timestamp is null or absent")]
    assert built.batch.column("_offset").to_pylist() == [0]


def test_every_record_is_bad_when_no_row_can_have_the_field() -> None:
    built = json_builder("_key:string").build(records_of([msg(0, b'{"id":1}'), msg(1, b'{"id":2}')]))
    assert [(b.index, b.reason) for b in built.bad] == [(0, "field _key is binary, expected string"),
                                                        (1, "field _key is binary, expected string")]
    assert built.batch.num_rows == 0


BadKind = str  # "ok", "json", "stamp" (out of range), "null-id", "null-key"


@settings(max_examples=150, deadline=None)
@given(kinds=st.lists(st.sampled_from(["ok", "ok", "json", "stamp", "null-id", "null-key"]), min_size=1, max_size=30))
def test_bad_indexes_survive_every_earlier_removal(kinds: list[BadKind]) -> None:
    """Records bad for a decode error, an out-of-range timestamp and a required field, interleaved:
    each is reported under its own index with its own reason; the good ones keep their order."""
    messages = []
    for offset, kind in enumerate(kinds):
        value = {"json": b"{nope", "null-id": b'{"name":"x"}'}.get(kind, b'{"id":%d}' % offset)
        stamp = 2**62 if kind == "stamp" else 1_700_000_000_000
        messages.append(msg(offset, value, key=None if kind == "null-key" else b"k", stamp=stamp))
    built = json_builder("id:integer,_key").build(records_of(messages))
    reasons = {b.index: b.reason for b in built.bad}
    assert sorted(reasons) == [i for i, k in enumerate(kinds) if k != "ok"]
    for index, reason in reasons.items():
        expected = {"json": "JSON", "stamp": "after 9999-12-31", "null-id": "field id is null or absent",
                    "null-key": "field _key is null or absent"}[kinds[index]]
        assert expected in reason, (kinds[index], reason)
    assert built.batch.column("_offset").to_pylist() == [i for i, k in enumerate(kinds) if k == "ok"]
    assert built.batch.column("id").to_pylist() == [i for i, k in enumerate(kinds) if k == "ok"]


_scopes = itertools.count()
VALUE = SerializationContext("t", MessageField.VALUE)


def avro(fields: list[dict[str, Any]]) -> tuple[BatchBuilder, AvroSerializer]:
    url = f"mock://test-required-fields-{next(_scopes)}"
    builder = BatchBuilder(KafkaSourceConfig.from_properties({
        **BASE, "format": "avro", "schema.registry.url": url, "include-metadata": "_offset",
        "required-fields": "customer_id:integer|string",
    }))
    schema = {"type": "record", "name": "Order", "fields": fields}
    return builder, AvroSerializer(registry_client(url, {}), json.dumps(schema))


def test_a_registry_format_is_checked_batch_by_batch() -> None:
    builder, serialize = avro([{"name": "customer_id", "type": ["null", "long"]}])
    built = builder.build(records_of([msg(i, serialize({"customer_id": c}, VALUE)) for i, c in enumerate([7, None, 9])]))
    assert [(b.index, b.reason) for b in built.bad] == [(1, "field customer_id is null or absent")]
    assert built.batch.column("customer_id").to_pylist() == [7, 9]

    builder, serialize = avro([{"name": "customer_id", "type": "double"}])
    built = builder.build(records_of([msg(0, serialize({"customer_id": 1.5}, VALUE))]))
    assert [(b.index, b.reason) for b in built.bad] == [(0, "field customer_id is double, expected integer or string")]

    builder, serialize = avro([{"name": "other", "type": "long"}])
    built = builder.build(records_of([msg(0, serialize({"other": 1}, VALUE))]))
    assert [(b.index, b.reason) for b in built.bad] == [(0, "the record has no field customer_id")]


# --- the configuration ------------------------------------------------------------------------------

def config(**props: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({**BASE, **props})


def test_the_config_carries_the_fields() -> None:
    assert config().required_fields == ()
    parsed = config(**{"format": "json", "json-schema": "id:int64,at:timestamp[ms]", "include-metadata": "_key",
                       "required-fields": "id:integer,at:timestamp|date,_key"}).required_fields
    assert parsed == (RequiredField("id", frozenset({INTEGER})), RequiredField("at", frozenset({TIMESTAMP, DATE})),
                      RequiredField("_key"))
    assert config(**{"required-fields": "value:binary"}).required_fields == (RequiredField("value", frozenset({BINARY})),)
    registry = config(**{"format": "avro", "schema.registry.url": "mock://x", "required-fields": "anything:integer"})
    assert registry.required_fields == (RequiredField("anything", frozenset({INTEGER})),)


@pytest.mark.parametrize(("props", "message"), [
    ({"format": "json", "json-schema": "id:int64", "required-fields": "name"},
     "required-fields: the record has no field name"),
    ({"format": "json", "json-schema": "id:int64,name:string", "required-fields": "name:integer"},
     "required-fields: field name is string, expected integer"),
    ({"format": "json", "json-schema": "price:double", "required-fields": "price:integer|string"},
     "field price is double, expected integer or string"),
    ({"required-fields": "_key"}, "required-fields: _key is not among include-metadata"),
    ({"include-metadata": "_offset", "required-fields": "_timestamp:timestamp"}, "_timestamp is not among include-metadata"),
    ({"required-fields": "customer_id"}, "required-fields: the record has no field customer_id"),
    ({"required-fields": "value:string"}, "required-fields: field value is binary, expected string"),
    ({"required-fields": "id:number"}, "unknown kind 'number'"),
])
def test_the_config_refuses_a_field_no_record_could_have(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        config(**props)


def test_a_bound_after_the_kinds_makes_longer_text_or_bytes_bad() -> None:
    fields = parse_required_fields("region:string<=5, raw:binary <= 3, n:integer<=1")
    assert [f.text() for f in fields] == ["region:string<=5", "raw:binary<=3", "n:integer<=1"]
    batch = pa.record_batch({
        "region": pa.array(["abcde", "abcdef", "é€", "éé€"]),  # 5, 6, 5 and 7 UTF-8 bytes
        "raw": pa.array([b"abc", b"ab", b"abcd", b""]),
        "n": pa.array([10**9, 2, 3, 4], pa.int64()),  # a bound applies to text and bytes only
    })
    assert bad_rows(batch, fields) == {1: "field region is longer than 5 bytes", 3: "field region is longer than 5 bytes",
                                       2: "field raw is longer than 3 bytes"}
    dictionary = batch.set_column(0, "region", batch.column("region").dictionary_encode())
    assert bad_rows(dictionary, fields) == bad_rows(batch, fields)
    for text, message in (("a<=0", "a bound must be >= 1"), ("a:string<=x", "the bound after <= is not an integer")):
        with pytest.raises(ConfigurationError, match=message):
            parse_required_fields(text)


def test_a_payload_field_named_with_an_underscore_is_a_payload_field() -> None:
    """Only the metadata columns need include-metadata; a JSON field ``_id`` is the payload's."""
    check_required_fields(parse_required_fields("_id:integer"), pa.schema([("_id", pa.int64())]), ())
    with pytest.raises(ConfigurationError, match="required-fields: the record has no field _id"):
        check_required_fields(parse_required_fields("_id"), pa.schema([("id", pa.int64())]), ())
    with pytest.raises(ConfigurationError, match="required-fields: _key is not among include-metadata"):
        check_required_fields(parse_required_fields("_key"), None, ("_topic",))
