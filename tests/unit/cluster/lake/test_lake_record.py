"""LakeRecord: the record an epoch leaves in the lake, its strict codec, and the record file names."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.lake.record import (
    LAKE_RECORD_FORMAT_VERSION,
    RECORD_SUMMARY_KEY,
    RECORDS_DIR,
    LakeRecord,
    no_records,
    parse_record_name,
    record_path,
)
from laminar_kafka.coordinator.codec import OFFSET_MAX, U64_MAX, format_partition_key
from laminar_kafka.coordinator.errors import CodecError

topics = st.text("abcXYZ09._-", min_size=1, max_size=12).filter(lambda t: t not in (".", ".."))
keys = st.builds(format_partition_key, topics, st.integers(0, 2**31 - 1))
cursors = st.dictionaries(st.text(min_size=1, max_size=6),
                          st.dictionaries(keys, st.integers(0, OFFSET_MAX), max_size=4), max_size=3)
records = st.builds(
    LakeRecord,
    pipeline=st.text(min_size=1, max_size=20),
    epoch=st.integers(0, U64_MAX),
    assignment_version=st.integers(0, U64_MAX),
    cursors=cursors,
    topic_ids=st.dictionaries(topics, st.text(min_size=1, max_size=22), max_size=3),
    files=st.lists(st.text(min_size=1, max_size=30), max_size=4).map(tuple),
)

WHAT = "lake record out/_laminar/epochs/epoch-0000000007.json"


def valid() -> dict[str, Any]:
    return json.loads(LakeRecord("pipe", 7, 2, {"s": {"t:0": 5, "t:1": 9}}, {"t": "Zm9v"},
                                 ("t/dt=2026-01-01/a.parquet",)).to_json())


def decode(data: object, what: str = WHAT) -> LakeRecord:
    return LakeRecord.from_json(json.dumps(data).encode(), what)


@given(records)
def test_round_trip(record: LakeRecord) -> None:
    raw = record.to_json()
    assert LakeRecord.from_json(raw, "r") == record
    assert LakeRecord.from_json(raw.decode(), "r") == record
    assert LakeRecord.from_json(raw, "r").to_json() == raw  # canonical


def test_the_encoding_is_canonical_json_with_a_format_version() -> None:
    record = LakeRecord("pipe", 3, 1, {"z": {"t:1": 2, "t:0": 1}, "a": {}}, {"u": "2", "t": "1"}, ("b", "a"))
    data = json.loads(record.to_json())
    assert list(data) == ["format_version", "pipeline", "epoch", "assignment_version", "cursors", "topic_ids", "files"]
    assert data["format_version"] == LAKE_RECORD_FORMAT_VERSION == 1
    assert list(data["cursors"]) == ["a", "z"] and list(data["cursors"]["z"]) == ["t:0", "t:1"]
    assert list(data["topic_ids"]) == ["t", "u"]
    assert data["files"] == ["b", "a"]  # the epoch's files, in their order
    assert b" " not in record.to_json()
    assert RECORD_SUMMARY_KEY == "laminar.record"


def test_the_valid_base_decodes() -> None:
    assert decode(valid()) == LakeRecord("pipe", 7, 2, {"s": {"t:0": 5, "t:1": 9}}, {"t": "Zm9v"},
                                         ("t/dt=2026-01-01/a.parquet",))


def _set(data: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


MUTATIONS = [
    # (id, path to replace, value, text the message holds)
    ("bool epoch", ("epoch",), True, "epoch"),
    ("string epoch", ("epoch",), "7", "epoch"),
    ("float epoch", ("epoch",), 7.0, "epoch"),
    ("negative epoch", ("epoch",), -1, "epoch"),
    ("epoch above u64", ("epoch",), 2**64, "epoch"),
    ("bool version", ("assignment_version",), False, "assignment_version"),
    ("string version", ("assignment_version",), "2", "assignment_version"),
    ("float version", ("assignment_version",), 2.5, "assignment_version"),
    ("string format_version", ("format_version",), "1", "format_version"),
    ("bool format_version", ("format_version",), True, "format_version"),
    ("unknown format_version", ("format_version",), 2, "unknown format_version 2"),
    ("format_version 0", ("format_version",), 0, "unknown format_version 0"),
    ("empty pipeline", ("pipeline",), "", "pipeline"),
    ("int pipeline", ("pipeline",), 3, "pipeline"),
    ("null pipeline", ("pipeline",), None, "pipeline"),
    ("bool offset", ("cursors", "s", "t:0"), True, "'t:0'"),
    ("string offset", ("cursors", "s", "t:0"), "5", "'t:0'"),
    ("float offset", ("cursors", "s", "t:0"), 5.0, "'t:0'"),
    ("negative offset", ("cursors", "s", "t:0"), -5, "'t:0'"),
    ("offset above i64", ("cursors", "s", "t:0"), OFFSET_MAX + 1, "'t:0'"),
    ("non-canonical partition key", ("cursors", "s", "t:01"), 1, "t:01"),
    ("key without a partition", ("cursors", "s", "t"), 1, "'t'"),
    ("empty source identity", ("cursors", ""), {}, "source identity"),
    ("cursors not an object", ("cursors",), [], "cursors"),
    ("source cursors not an object", ("cursors", "s"), [], "cursors"),
    ("topic_ids not an object", ("topic_ids",), ["t"], "topic_ids"),
    ("bad topic id key", ("topic_ids", "a/b"), "x", "'a/b'"),
    ("topic id key '..'", ("topic_ids", ".."), "x", "'..'"),
    ("empty topic id key", ("topic_ids", ""), "x", "topic_ids"),
    ("empty topic id", ("topic_ids", "t"), "", "topic_ids[t]"),
    ("int topic id", ("topic_ids", "t"), 7, "topic_ids[t]"),
    ("files not a list", ("files",), "a.parquet", "files"),
    ("empty file name", ("files",), [""], "files[0]"),
    ("int file name", ("files",), ["a", 3], "files[1]"),
]


@pytest.mark.parametrize("path, value, named", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_strict_decoding_names_the_object_and_the_field(path: tuple[str, ...], value: object, named: str) -> None:
    with pytest.raises(CodecError) as raised:
        decode(_set(valid(), path, value))
    assert WHAT in str(raised.value) and named in str(raised.value)


@pytest.mark.parametrize("key", ["format_version", "pipeline", "epoch", "assignment_version", "cursors",
                                 "topic_ids", "files"])
def test_a_missing_key_is_rejected(key: str) -> None:
    data = valid()
    del data[key]
    with pytest.raises(CodecError, match=key) as raised:
        decode(data)
    assert WHAT in str(raised.value)


def test_an_unknown_key_is_rejected() -> None:
    with pytest.raises(CodecError, match="unknown \\['note'\\]") as raised:
        decode({**valid(), "note": "hi"})
    assert WHAT in str(raised.value)


@pytest.mark.parametrize("raw", [b"", b"[]", b"null", b"7", b"{", b"\xff\xfe", b'{"epoch":NaN}',
                                 b'{"a":1,"a":1}', b'"record"'])
def test_what_is_not_a_record_object_is_rejected_by_name(raw: bytes) -> None:
    with pytest.raises(CodecError) as raised:
        LakeRecord.from_json(raw, "iceberg table ns.t snapshot 42")
    assert "iceberg table ns.t snapshot 42" in str(raised.value)


def test_a_duplicate_key_is_rejected() -> None:
    raw = LakeRecord("p", 1, 0, {}).to_json().replace(b'"epoch":1', b'"epoch":1,"epoch":2')
    with pytest.raises(CodecError, match="duplicate"):
        LakeRecord.from_json(raw, WHAT)


# ---- only_topic ------------------------------------------------------------------------------------


def test_only_topic_keeps_that_topics_partitions_and_id() -> None:
    record = LakeRecord(
        "pipe", 9, 4,
        {"s": {"a:0": 1, "a:1": 2, "ab:0": 3, "b:0": 4, "a.b:0": 5}, "s2": {"ab:1": 6}},
        {"a": "id-a", "ab": "id-ab", "b": "id-b"},
        ("a/x.parquet", "ab/y.parquet"),
    )
    only_a = record.only_topic("a")
    assert only_a == LakeRecord("pipe", 9, 4, {"s": {"a:0": 1, "a:1": 2}, "s2": {}}, {"a": "id-a"}, ())
    only_ab = record.only_topic("ab")
    assert only_ab.cursors == {"s": {"ab:0": 3}, "s2": {"ab:1": 6}} and only_ab.topic_ids == {"ab": "id-ab"}
    assert record.only_topic("a.b").cursors == {"s": {"a.b:0": 5}, "s2": {}}
    assert record.only_topic("a.b").topic_ids == {}  # no id known for it
    assert record.only_topic("zz").cursors == {"s": {}, "s2": {}}
    assert LakeRecord.from_json(only_a.to_json(), "r") == only_a


@given(records, topics)
def test_only_topic_is_a_projection(record: LakeRecord, topic: str) -> None:
    projected = record.only_topic(topic)
    assert (projected.pipeline, projected.epoch, projected.assignment_version) == (
        record.pipeline, record.epoch, record.assignment_version)
    assert projected.files == ()
    assert set(projected.topic_ids) <= {topic}
    for source, partitions in record.cursors.items():
        expected = {k: v for k, v in partitions.items() if k.rpartition(":")[0] == topic}
        assert projected.cursors[source] == expected
    assert projected.only_topic(topic) == projected


# ---- record file names -----------------------------------------------------------------------------


@given(st.integers(0, 10**10 - 1))
def test_record_path_and_parse_record_name_round_trip(epoch: int) -> None:
    path = record_path(epoch)
    directory, _, name = path.rpartition("/")
    assert directory == RECORDS_DIR == "_laminar/epochs"
    assert parse_record_name(name) == epoch


def test_record_names_sort_by_epoch() -> None:
    assert record_path(42) == "_laminar/epochs/epoch-0000000042.json"
    names = [record_path(e) for e in (1, 9, 10, 99, 100, 12345)]
    assert sorted(names) == names


@pytest.mark.parametrize("name", [
    "epoch-42.json", "epoch-0000000042.json.tmp", ".tmp-0123abcd", "epoch-00000000042.json",
    "epoch-000000004a.json", "epoch-0000000042.JSON", "xepoch-0000000042.json", "epoch-0000000042",
    "_laminar/epochs/epoch-0000000042.json", "epoch--000000042.json", "", "epoch-+000000042.json",
])
def test_other_names_are_not_records(name: str) -> None:
    assert parse_record_name(name) is None


def test_no_records() -> None:
    assert no_records(1) is None and no_records(0) is None


# ---- known defects (minor; see the report) -------------------------------------------------------------


def test_a_name_with_non_ascii_digits_is_not_a_record() -> None:
    assert parse_record_name("epoch-" + "\u0660" * 8 + "\u0664\u0662" + ".json") is None


def test_record_path_round_trips_past_ten_digits() -> None:
    assert parse_record_name(record_path(10**10).rpartition("/")[2]) == 10**10


def test_a_routed_record_is_whole_and_names_its_tables() -> None:
    from laminar_kafka.cluster.lake.record import LakeRecord

    record = LakeRecord("p", 4, 2, {"kafka": {"a:0": 5, "b:1": 6}}, {"a": "id-a", "b": "id-b"}, ("f.parquet",))
    routed = record.routed(("ev_us", "ev_eu"))
    assert routed.tables == ("ev_eu", "ev_us") and routed.files == () and routed.cursors == record.cursors
    assert LakeRecord.from_json(routed.to_json(), "x") == routed
    assert b'"tables"' not in record.only_topic("a").to_json()  # an unrouted record encodes as before
    assert LakeRecord.from_json(record.to_json(), "x").tables == ()
