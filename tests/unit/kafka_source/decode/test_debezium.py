"""format=debezium-json: every op, both wrappers, a delete's key from before, the record key (object,
wrapped object, scalar) and bad records with their reasons; the row schema inferred from a sample."""
from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Message

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder, BuiltBatch
from laminar_kafka.kafka_source.decode.debezium import infer_row_schema
from laminar_kafka.kafka_source.decode.records import RecordFields
from laminar_kafka.kafka_source.decode.schema import configured_schema, infer_json_schema
from tests.unit.kafka_source.wiring import records_of

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g", "format": "debezium-json"}


def config(schema: str = "id:int64,name:string", keys: str = "id", metadata: str = "_offset", **extra: str
           ) -> KafkaSourceConfig:
    props = {**BASE, "upsert-keys": keys, "include-metadata": metadata, **extra}
    if schema:
        props["json-schema"] = schema
    return KafkaSourceConfig.from_properties(props)


def event(op: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None, *,
          wrapped: bool = False) -> bytes:
    """A Debezium change event as JsonConverter writes it (``wrapped``: schemas.enable=true)."""
    payload = {"before": before, "after": after, "op": op, "source": {"db": "shop", "table": "t"}, "ts_ms": 1}
    if wrapped:
        schema = {"type": "struct", "fields": [{"type": "struct", "optional": True, "field": "before",
                                                 "fields": [{"type": "int64", "field": "id"}]}], "name": "t.Envelope"}
        return json.dumps({"schema": schema, "payload": payload}).encode()
    return json.dumps(payload).encode()


def build(builder: BatchBuilder, *items: tuple[bytes | None, bytes | None]) -> BuiltBatch:
    messages = [Message(topic="t", partition=0, offset=i, value=v, key=k) for i, (v, k) in enumerate(items)]
    return builder.build(records_of(messages))


@pytest.mark.parametrize("wrapped", [False, True])
def test_every_op_of_both_wrappers_becomes_a_row_with_its_op(wrapped: bool) -> None:
    builder = BatchBuilder(config())
    built = build(
        builder,
        (event("r", after={"id": 1, "name": "snap"}, wrapped=wrapped), b'{"id":1}'),
        (event("c", after={"id": 2, "name": "new"}, wrapped=wrapped), b'{"id":2}'),
        (event("u", before={"id": 2, "name": "new"}, after={"id": 2, "name": "upd"}, wrapped=wrapped), b'{"id":2}'),
        (event("d", before={"id": 1, "name": "snap"}, wrapped=wrapped), b'{"id":1}'),
    )
    assert built.bad == ()
    assert built.batch.schema == builder.schema
    assert builder.schema.names == ["id", "name", "_op", "_offset"]
    assert builder.schema.field("_op").type == pa.string() and not builder.schema.field("_op").nullable
    assert built.batch.to_pylist() == [
        {"id": 1, "name": "snap", "_op": "r", "_offset": 0},
        {"id": 2, "name": "new", "_op": "c", "_offset": 1},
        {"id": 2, "name": "upd", "_op": "u", "_offset": 2},
        {"id": 1, "name": None, "_op": "d", "_offset": 3},  # a delete: payload null but for its key
    ]


def test_both_wrappers_mix_in_one_batch() -> None:
    built = build(BatchBuilder(config()), (event("c", after={"id": 1, "name": "a"}), None),
                  (event("c", after={"id": 2, "name": "b"}, wrapped=True), None))
    assert built.batch.column("id").to_pylist() == [1, 2] and built.batch.column("_op").to_pylist() == ["c", "c"]


def test_a_delete_without_before_and_its_tombstone_take_the_key_from_the_record_key() -> None:
    """Debezium writes a tombstone after each delete: the key is deleted twice (idempotent)."""
    built = build(
        BatchBuilder(config()),
        (event("d"), b'{"id":7}'),                                                       # Debezium's key
        (None, b'{"id":7}'),                                                             # its tombstone
        (None, json.dumps({"schema": {"type": "struct"}, "payload": {"id": 8}}).encode()),  # wrapped key
        (None, b"9"),                                                                    # a scalar key
        (event("d", before={"id": 10, "name": "x"}), b'{"id":99}'),                      # before wins
    )
    assert built.bad == ()
    assert built.batch.to_pylist() == [
        {"id": 7, "name": None, "_op": "d", "_offset": 0},
        {"id": 7, "name": None, "_op": "d", "_offset": 1},
        {"id": 8, "name": None, "_op": "d", "_offset": 2},
        {"id": 9, "name": None, "_op": "d", "_offset": 3},
        {"id": 10, "name": None, "_op": "d", "_offset": 4},
    ]


def test_a_composite_key_fills_from_before_then_from_the_record_key() -> None:
    builder = BatchBuilder(config("tenant:string,id:int64,v:double", keys="tenant,id"))
    built = build(
        builder,
        (event("d", before={"tenant": "a", "id": 1, "v": 1.5}), None),
        (None, b'{"tenant":"b","id":2}'),
        (None, b"3"),  # a scalar cannot key two fields
    )
    assert [(b.index, b.reason) for b in built.bad] == [
        (2, "upsert key tenant, id missing: null or absent in the row and in the record key")]
    assert built.batch.to_pylist() == [
        {"tenant": "a", "id": 1, "v": None, "_op": "d", "_offset": 0},
        {"tenant": "b", "id": 2, "v": None, "_op": "d", "_offset": 1},
    ]


def test_a_string_key_may_be_plain_text() -> None:
    built = build(BatchBuilder(config("sku:string,qty:int64", keys="sku")), (None, b"AB-1"), (None, b'"AB-2"'))
    assert built.bad == () and built.batch.column("sku").to_pylist() == ["AB-1", "AB-2"]


def test_events_that_are_no_change_of_a_key_are_bad_records_with_their_reason() -> None:
    builder = BatchBuilder(config())
    built = build(
        builder,
        (event("c", after={"id": 1, "name": "a"}), None),
        (event("t"), None),
        (b'{"before":null,"after":{"id":2}}', None),
        (event("x", after={"id": 3}), None),
        (event("u"), b'{"id":4}'),
        (b"{not json", None),
        (None, None),
        (None, b'{"other":1}'),
        (event("c", after={"id": "not a number"}), None),
        (event("c", after={"name": "keyless"}), None),
    )
    reasons = dict((b.index, b.reason) for b in built.bad)
    assert reasons[1] == "debezium: op 't' (truncate) is not supported: it names no key to delete"
    assert reasons[2] == "debezium: the event has no op (not a Debezium change event)"
    assert reasons[3] == "debezium: unknown op 'x'"
    assert reasons[4] == "debezium: op 'u' without after"
    assert reasons[5].startswith("JSON parse error:")  # pyarrow's own words, one line
    missing = "upsert key id missing: null or absent in the row and in the record key"
    assert reasons[6] == reasons[7] == reasons[9] == missing
    assert reasons[8] == "JSON parse error: Column(/after/id) changed from number to string in row 0"
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert built.batch.to_pylist() == [{"id": 1, "name": "a", "_op": "c", "_offset": 0}]


def test_bad_key_with_key_format_string_drops_the_row_and_its_op() -> None:
    builder = BatchBuilder(config(metadata="_offset,_key", **{"key-format": "string"}))
    built = build(builder, (event("c", after={"id": 1, "name": "a"}), b"\xff"),
                  (event("c", after={"id": 2, "name": "b"}), b'{"id":2}'))
    assert [b.index for b in built.bad] == [0]
    assert built.batch.to_pylist() == [{"id": 2, "name": "b", "_op": "c", "_offset": 1, "_key": '{"id":2}'}]


def test_required_fields_spare_deletes() -> None:
    builder = BatchBuilder(config(**{"required-fields": "name"}))
    built = build(builder, (event("c", after={"id": 1}), None), (event("d", before={"id": 1}), None))
    assert [b.index for b in built.bad] == [0] and built.batch.column("_op").to_pylist() == ["d"]


def test_the_row_schema_is_inferred_from_after_and_before_of_both_wrappers() -> None:
    sample = [event("c", after={"id": 1, "name": "a"}), event("d", before={"id": 1, "price": 2.5}, wrapped=True),
              b"{not json", b"[1]"]
    assert infer_row_schema(sample) == pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.float64())])
    inferred = infer_json_schema(config(schema=""), sample)
    assert inferred.names == ["id", "name", "price"]
    assert configured_schema(config(schema=""), inferred).names == ["id", "name", "price", "_op", "_offset"]
    with pytest.raises(ConfigurationError, match="no event of the sample has after or before"):
        infer_row_schema([event("t"), b"7"])


def test_a_key_field_missing_from_the_inferred_rows_is_refused_at_build() -> None:
    with pytest.raises(ConfigurationError, match="upsert-keys: sku is not a field of the records"):
        BatchBuilder(config(schema="", keys="sku"), pa.schema([("id", pa.int64())]))


def test_upsert_mode_reads_the_record_keys() -> None:
    assert RecordFields.of(config(), keeps_rejected=False).keys
    plain = KafkaSourceConfig.from_properties({**BASE, "format": "json", "json-schema": "id:int64"})
    assert not RecordFields.of(plain, keeps_rejected=False).keys


def test_the_schema_wrapper_types_the_rows_its_primitive_types_and_fields_never_set() -> None:
    """Debezium's schema declares int32, float32 and an optional column null in every sampled row
    (inference alone would make it the null type, and a later value a bad record)."""
    row_schema = {"type": "struct", "optional": True, "field": "after", "fields": [
        {"type": "int32", "optional": False, "field": "id"}, {"type": "float", "optional": True, "field": "rate"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "at"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "field": "price"},
        {"type": "string", "optional": True, "field": "note"}]}
    payload = {"before": None, "after": {"id": 1, "rate": 0.5, "at": 1_700_000_000_000, "price": "AYY=", "note": None},
               "op": "c"}
    sample = [json.dumps({"schema": {"type": "struct", "fields": [row_schema]}, "payload": payload}).encode()]
    schema = infer_row_schema(sample)
    assert schema == pa.schema([("id", pa.int32()), ("rate", pa.float32()), ("at", pa.int64()),
                                ("price", pa.string()), ("note", pa.string())])
    builder = BatchBuilder(config(schema="", keys="id"), schema)
    later = {**payload, "after": {**payload["after"], "note": "set later"}}
    built = build(builder, (json.dumps(later).encode(), None))
    assert built.bad == () and built.batch.column("note").to_pylist() == ["set later"]
