"""Records: the fields of consumed messages as plain lists (no Message objects kept)."""
from __future__ import annotations

import gc

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder, topic_column
from laminar_kafka.kafka_source.decode.records import RecordFields, Records

BASE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


def msg(topic: str, partition: int, offset: int, *, stamped: bool = True) -> Message:
    kind = TIMESTAMP_CREATE_TIME if stamped else TIMESTAMP_NOT_AVAILABLE
    return Message(topic=topic, partition=partition, offset=offset, value=b"v%d" % offset, key=b"k%d" % offset,
                   headers=[("h", b"%d" % offset)], timestamp=(kind, 1_000 + offset if stamped else -1))


def test_every_field_read_in_client_order() -> None:
    records = Records.of([msg("a", 0, 5), msg("b", 1, 7)], RecordFields(topic=None, headers=True))
    assert len(records) == 2
    assert (records.topics, records.partitions, records.offsets) == (["a", "b"], [0, 1], [5, 7])
    assert (records.values, records.keys, records.timestamps) == ([b"v5", b"v7"], [b"k5", b"k7"], [1005, 1007])
    assert records.headers == [[("h", b"5")], [("h", b"7")]]


def test_a_missing_timestamp_is_none_and_unread_fields_stay_none() -> None:
    records = Records.of([msg("t", 0, 0), msg("t", 0, 1, stamped=False)], RecordFields(topic="t"))
    assert records.timestamps == [1000, None]
    assert records.topics == "t" and records.topic_at(1) == "t" and records.topic_list() == ["t", "t"]
    bare = Records.of([msg("t", 0, 0)], RecordFields(topic="t", timestamps=False, keys=False))
    assert (bare.timestamps, bare.keys, bare.headers) == (None, None, None)


def test_the_lists_held_are_not_tracked_by_the_garbage_collector() -> None:
    records = Records.of([msg("t", 0, o) for o in range(3)], RecordFields(topic="t"))
    held = [*records.values, *records.partitions, *records.offsets, *records.keys, *records.timestamps]  # type: ignore[misc]
    assert not any(gc.is_tracked(value) for value in held)


def test_slice_take_and_concat() -> None:
    records = Records.of([msg("a", o % 2, o) for o in range(6)], RecordFields(topic=None))
    assert records.slice(0, 6) is records
    middle = records.slice(2, 5)
    assert middle.offsets == [2, 3, 4] and middle.topics == ["a", "a", "a"] and middle.timestamps == [1002, 1003, 1004]
    picked = records.take([5, 0])
    assert picked.offsets == [5, 0] and picked.keys == [b"k5", b"k0"] and picked.partitions == [1, 0]
    assert records.take([3]).values == [b"v3"] and len(records.take([])) == 0
    joined = Records.concat([records.slice(0, 2), records.slice(2, 6)])
    assert joined.offsets == records.offsets and joined.timestamps == records.timestamps
    one_topic = Records.of([msg("t", 0, 0)], RecordFields(topic="t"))
    assert Records.concat([one_topic, one_topic]).topics == "t"
    other = Records.of([msg("u", 0, 1)], RecordFields(topic="u"))
    assert Records.concat([one_topic, other]).topics == ["t", "u"]


def test_fields_follow_the_configuration() -> None:
    def fields(keeps_rejected: bool = False, **props: str) -> RecordFields:
        config = KafkaSourceConfig.from_properties({**BASE, "topic": "orders", **props})
        return RecordFields.of(config, keeps_rejected=keeps_rejected)

    assert fields() == RecordFields(topic="orders", timestamps=False, keys=False, headers=False, value_column=True)
    assert fields(**{"include-metadata": "_timestamp,_key,_headers"}) == RecordFields(
        topic="orders", timestamps=True, keys=True, headers=True, value_column=True)
    assert fields(keeps_rejected=True) == RecordFields(
        topic="orders", timestamps=True, keys=True, headers=False, value_column=True)
    assert fields(topic="a,b").topic is None
    assert fields(topic="re:ord.*").topic is None


def test_one_topic_column_is_a_dictionary_with_zero_indices() -> None:
    column = topic_column("orders", 3)
    assert column.type == pa.dictionary(pa.int32(), pa.string())
    assert column.to_pylist() == ["orders"] * 3 and column.indices.to_pylist() == [0, 0, 0]
    assert topic_column(["a", "b", "a"], 3).to_pylist() == ["a", "b", "a"]
    assert topic_column("orders", 0).to_pylist() == []


def test_values_as_an_arrow_column_slice_take_concat_and_build() -> None:
    fields = RecordFields(topic="t", value_column=True)
    records = Records.of([msg("t", 0, o) for o in range(5)], fields)
    assert isinstance(records.values, pa.BinaryArray) and records.values.to_pylist() == [b"v%d" % o for o in range(5)]
    assert records.slice(1, 3).values.to_pylist() == [b"v1", b"v2"]
    assert records.take([4, 0]).values.to_pylist() == [b"v4", b"v0"]
    assert records.take([]).values.to_pylist() == []
    joined = Records.concat([records.slice(0, 2), records.slice(2, 5)])
    assert joined.values.to_pylist() == records.values.to_pylist() and joined.offsets == records.offsets
    config = KafkaSourceConfig.from_properties({**BASE, "topic": "t", "include-metadata": "_offset"})
    assert RecordFields.of(config, keeps_rejected=False).value_column
    batch = BatchBuilder(config).build(records).batch
    assert batch.column("value").to_pylist() == records.values.to_pylist()
    assert batch.column("_offset").to_pylist() == [0, 1, 2, 3, 4]
    json_config = KafkaSourceConfig.from_properties({**BASE, "topic": "t", "format": "json", "json-schema": "a:int64"})
    assert not RecordFields.of(json_config, keeps_rejected=False).value_column
