from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig, TombstonePolicy
from laminar_kafka.kafka_source.decode.arrow_batch import HEADERS_TYPE, BatchBuilder, timestamp_array

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}

from tests.unit.kafka_source.wiring import records_of


def msg(offset: int, value: bytes | None, partition: int = 0, topic: str = "t", **kw: object) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=value, **kw)


def test_raw_with_all_metadata() -> None:
    config = KafkaSourceConfig.from_properties({**BASE, "include-metadata": "true"})
    builder = BatchBuilder(config)
    messages = [
        msg(7, b"a", 2, key=b"k", headers=[("h", b"v")], timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000)),
        msg(8, None, 2, timestamp=(TIMESTAMP_NOT_AVAILABLE, -1)),
        msg(3, b"c", 1, topic="u", timestamp=(TIMESTAMP_CREATE_TIME, 5)),
    ]
    built = builder.build(records_of(messages))
    batch = built.batch
    assert built.bad == ()
    assert batch.schema == builder.schema
    assert batch.schema.names == ["value", "_topic", "_partition", "_offset", "_timestamp", "_key", "_headers"]
    assert batch.column("value").to_pylist() == [b"a", None, b"c"]
    assert batch.column("_topic").type == pa.dictionary(pa.int32(), pa.string())
    assert batch.column("_topic").to_pylist() == ["t", "t", "u"]
    assert batch.column("_partition").to_pylist() == [2, 2, 1]
    assert batch.column("_partition").type == pa.int32()
    assert batch.column("_offset").to_pylist() == [7, 8, 3]
    assert batch.column("_timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000, None, 5]
    assert batch.column("_key").to_pylist() == [b"k", None, None]
    assert batch.column("_headers").type == HEADERS_TYPE
    assert batch.column("_headers").to_pylist() == [[{"key": "h", "value": b"v"}], None, None]


def test_raw_without_metadata_has_only_value() -> None:
    builder = BatchBuilder(KafkaSourceConfig.from_properties(BASE))
    assert builder.schema.names == ["value"]
    assert builder.build(records_of([msg(0, b"x")])).batch.num_rows == 1


def json_builder(schema: str = "id:int64,name:string", metadata: str = "_offset") -> BatchBuilder:
    return BatchBuilder(
        KafkaSourceConfig.from_properties(
            {**BASE, "format": "json", "json-schema": schema, "include-metadata": metadata}
        )
    )


def test_json_fast_path() -> None:
    builder = json_builder()
    built = builder.build(records_of([msg(0, b'{"id":1,"name":"a","extra":true}'), msg(1, b'{"id":2}')]))
    assert built.bad == ()
    assert built.batch.to_pylist() == [
        {"id": 1, "name": "a", "_offset": 0},
        {"id": 2, "name": None, "_offset": 1},
    ]


def test_json_multiline_record_is_valid() -> None:
    built = json_builder().build(records_of([msg(0, b'{"id":1,\n "name":"a"}'), msg(1, b'{"id":2}')]))
    assert built.bad == ()
    assert built.batch.column("id").to_pylist() == [1, 2]


@pytest.mark.parametrize(
    "bad_value",
    [b"not json", b'{"id":"x"}', b"", b"42", b'{"id":1}\n{"id":2}', b'{"id":1', None],
)
def test_json_bad_record_is_reported_and_dropped(bad_value: bytes | None) -> None:
    builder = json_builder()
    built = builder.build(records_of([msg(0, b'{"id":1}'), msg(1, bad_value), msg(2, b'{"id":3}')]))
    assert [b.index for b in built.bad] == [1]
    assert built.batch.column("id").to_pylist() == [1, 3]
    assert built.batch.column("_offset").to_pylist() == [0, 2]


def test_json_all_bad_gives_empty_batch() -> None:
    built = json_builder().build(records_of([msg(0, b"x"), msg(1, b"y")]))
    assert len(built.bad) == 2
    assert built.batch.num_rows == 0
    assert built.batch.schema.names == ["id", "name", "_offset"]


def test_json_without_schema_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        BatchBuilder(KafkaSourceConfig.from_properties({**BASE, "format": "json"}))
    schema = pa.schema([("id", pa.int64())])
    builder = BatchBuilder(KafkaSourceConfig.from_properties({**BASE, "format": "json"}), schema)
    assert builder.build(records_of([msg(0, b'{"id": 9}')])).batch.column("id").to_pylist() == [9]


def test_large_raw_batch_round_trips_offsets() -> None:
    builder = BatchBuilder(KafkaSourceConfig.from_properties({**BASE, "include-metadata": "partition,offset"}))
    messages = [msg(i // 8, b"x" * 100, i % 8) for i in range(10_000)]
    batch = builder.build(records_of(messages)).batch
    assert batch.num_rows == 10_000
    assert batch.column("_partition").to_pylist()[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 0]
    assert batch.column("_offset").to_pylist()[-1] == 1249


def test_json_tombstone_is_bad_by_default_and_a_row_of_nulls_with_on_tombstone_row() -> None:
    messages = [msg(0, b'{"id":1,"name":"a"}', key=b"k1"), msg(1, None, key=b"k1"), msg(2, b"{nope", key=b"k2")]
    bad_default = json_builder(metadata="_offset,_key").build(records_of(messages))
    assert [(b.index, "tombstone" in b.reason) for b in bad_default.bad] == [(1, True), (2, False)]

    rows = BatchBuilder(KafkaSourceConfig.from_properties({
        **BASE, "format": "json", "json-schema": "id:int64,name:string", "include-metadata": "_offset,_key",
        "on-tombstone": "row",
    })).build(records_of(messages))
    assert [b.index for b in rows.bad] == [2]
    assert rows.batch.to_pylist() == [
        {"id": 1, "name": "a", "_offset": 0, "_key": b"k1"}, {"id": None, "name": None, "_offset": 1, "_key": b"k1"},
    ]


def test_on_tombstone_takes_bad_or_row_only() -> None:
    assert KafkaSourceConfig.from_properties(BASE).on_tombstone is None  # bad, or a delete in upsert mode
    assert KafkaSourceConfig.from_properties({**BASE, "on-tombstone": "bad"}).on_tombstone is TombstonePolicy.BAD
    with pytest.raises(ConfigurationError, match="on-tombstone"):
        KafkaSourceConfig.from_properties({**BASE, "on-tombstone": "skip"})


@pytest.mark.parametrize("values", [[], [5, -1, 253_402_300_799_999], [5, None, 7], [None]])
def test_timestamp_array_equals_pyarrows_conversion(values: list[int | None]) -> None:
    assert timestamp_array(values).equals(pa.array(values, type=pa.timestamp("ms")))
