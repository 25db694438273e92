"""Upsert mode (upsert-keys) with json and avro: every row has _op (u for a value, d for a tombstone),
its key fields filled from the record key for a tombstone, and missing keys are bad records."""
from __future__ import annotations

import itertools
import json

import pyarrow as pa
from confluent_kafka import Message
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.changes import record_key_columns, update_or_delete
from laminar_kafka.kafka_source.schema_registry.client import registry_client
from tests.unit.kafka_source.wiring import records_of

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}
_scopes = itertools.count()


def msg(offset: int, value: bytes | None, key: bytes | None = None) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=value, key=key)


def test_json_rows_are_updates_and_tombstones_deletes_keyed_by_their_record_key() -> None:
    config = KafkaSourceConfig.from_properties({
        **BASE, "format": "json", "json-schema": "id:int64,name:string", "upsert-keys": "id",
        "include-metadata": "_topic,_partition,_offset"})
    builder = BatchBuilder(config)
    assert builder.schema.names == ["id", "name", "_op", "_topic", "_partition", "_offset"]
    built = builder.build(records_of([
        msg(0, b'{"id":1,"name":"a"}', b"1"), msg(1, None, b"1"), msg(2, b'{"name":"keyless"}', b"2"),
        msg(3, None, b'{"id":3}'), msg(4, None, None), msg(5, b"{bad", b"5"),
    ]))
    assert [(b.index, b.reason.startswith("upsert key id missing")) for b in built.bad] == [
        (2, True), (4, True), (5, False)]
    assert built.batch.select(["id", "name", "_op", "_offset"]).to_pylist() == [
        {"id": 1, "name": "a", "_op": "u", "_offset": 0},
        {"id": 1, "name": None, "_op": "d", "_offset": 1},
        {"id": 3, "name": None, "_op": "d", "_offset": 3},
    ]
    assert built.batch.column("_topic").to_pylist() == ["t"] * 3


def test_json_without_tombstones_is_all_updates_on_the_fast_path() -> None:
    config = KafkaSourceConfig.from_properties({
        **BASE, "format": "json", "json-schema": "id:int64", "upsert-keys": "id", "include-metadata": "_offset"})
    built = BatchBuilder(config).build(records_of([msg(i, json.dumps({"id": i}).encode()) for i in range(1000)]))
    assert built.bad == () and set(built.batch.column("_op").to_pylist()) == {"u"}


def test_append_mode_has_no_op_column() -> None:
    config = KafkaSourceConfig.from_properties({**BASE, "format": "json", "json-schema": "id:int64"})
    assert "_op" not in BatchBuilder(config).schema.names


AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}]}
VALUE = SerializationContext("t", MessageField.VALUE)


def avro_config(url: str, keys: str = "id") -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({
        **BASE, "format": "avro", "schema.registry.url": url, "upsert-keys": keys, "include-metadata": "_offset"})


def test_avro_rows_are_updates_and_tombstones_deletes() -> None:
    url = f"mock://test-upsert-mode-{next(_scopes)}"
    serialize = AvroSerializer(registry_client(url, {}), json.dumps(AVRO))
    builder = BatchBuilder(avro_config(url))
    built = builder.build(records_of([
        msg(0, serialize({"id": 1, "sku": "a"}, VALUE), b"1"), msg(1, None, b'{"id": 1}'), msg(2, None, b"x"),
    ]))
    assert [(b.index, b.reason) for b in built.bad] == [
        (2, "upsert key id missing: null or absent in the row and in the record key")]
    assert built.batch.to_pylist() == [
        {"id": 1, "sku": "a", "_op": "u", "_offset": 0}, {"id": 1, "sku": None, "_op": "d", "_offset": 1}]
    assert builder.schema.names == ["id", "sku", "_op", "_offset"]


def test_avro_key_field_not_in_the_schema_makes_every_row_bad() -> None:
    url = f"mock://test-upsert-mode-{next(_scopes)}"
    serialize = AvroSerializer(registry_client(url, {}), json.dumps(AVRO))
    builder = BatchBuilder(avro_config(url, keys="order_id"))
    built = builder.build(records_of([msg(0, serialize({"id": 1, "sku": "a"}, VALUE)), msg(1, None, b"1")]))
    assert {b.reason for b in built.bad} == {"upsert key 'order_id' is not a field of the records"}
    assert built.batch.num_rows == 0


def test_avro_tombstones_before_any_value_are_bad_not_lost() -> None:
    built = BatchBuilder(avro_config(f"mock://test-upsert-mode-{next(_scopes)}")).build(records_of([msg(0, None, b"1")]))
    assert [b.reason for b in built.bad] == ["upsert key 'id' is not a field of the records"]


def test_update_or_delete_and_record_key_columns() -> None:
    assert update_or_delete([b"a", b"b"]).to_pylist() == ["u", "u"]
    assert update_or_delete([b"a", None]).to_pylist() == ["u", "d"]
    assert update_or_delete([]).to_pylist() == []
    (ids,) = record_key_columns([b'{"id":1}', b" 2", b"null", b"[1]", b'{"id":"x"}', None], [pa.field("id", pa.int64())])
    assert ids.to_pylist() == [1, 2, None, None, None, None]
    assert record_key_columns([], [pa.field("id", pa.int64())])[0].to_pylist() == []
    lines = [b'{"a":1,\n"b":"x"}', b'{"b":"y"}']
    assert [c.to_pylist() for c in record_key_columns(lines, [pa.field("a", pa.int32()), pa.field("b", pa.string())])] \
        == [[1, None], ["x", "y"]]
