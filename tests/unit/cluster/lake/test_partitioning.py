"""Hive-style partition directories: splitting a batch by topic and by the day or hour of _timestamp
(field terms: test_partitioning_fields.py)."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.partitioning import (
    HIVE_DEFAULT_PARTITION,
    check_partition_columns,
    check_topic,
    split_by_partition,
)
from laminar_kafka.cluster.lake.staged_names import is_valid_directory
from laminar_kafka.errors import ConfigurationError

DAY, HOUR, NONE = PartitionSpec.parse("day"), PartitionSpec.parse("hour"), PartitionSpec()
UTC = dt.timezone.utc


def rows(topics: list[str], stamps: list[dt.datetime | None], *, dictionary: bool = True,
         unit: str = "ms", tz: str | None = None) -> pa.RecordBatch:
    topic = pa.array(topics, pa.string())
    return pa.record_batch({
        "_topic": topic.dictionary_encode() if dictionary else topic,
        "_offset": pa.array(range(len(topics)), pa.int64()),
        "_timestamp": pa.array(stamps, pa.timestamp(unit, tz)),
    })


def expected_directory(topic: str, stamp: dt.datetime | None, granularity: PartitionSpec) -> str:
    """The reference: one row at a time, with datetime (the module under test never loops over rows)."""
    if granularity is NONE:
        return topic
    if stamp is None:
        hour = f"/hour={HIVE_DEFAULT_PARTITION}" if granularity is HOUR else ""
        return f"{topic}/dt={HIVE_DEFAULT_PARTITION}{hour}"
    hour = f"/hour={stamp.hour:02d}" if granularity is HOUR else ""
    return f"{topic}/dt={stamp:%Y-%m-%d}{hour}"


@pytest.mark.parametrize(("granularity", "directory"), [
    (DAY, "orders/dt=2024-02-29"), (HOUR, "orders/dt=2024-02-29/hour=23"), (NONE, "orders"),
])
def test_the_directory_of_each_granularity(granularity: PartitionSpec, directory: str) -> None:
    stamp = dt.datetime(2024, 2, 29, 23, 59, 59, 999000)
    parts = split_by_partition(rows(["orders"], [stamp]), granularity)
    assert [d for d, _ in parts] == [directory]


def test_a_row_without_timestamp_goes_to_the_hive_default_partition() -> None:
    assert [d for d, _ in split_by_partition(rows(["t"], [None]), DAY)] == ["t/dt=__HIVE_DEFAULT_PARTITION__"]
    assert [d for d, _ in split_by_partition(rows(["t"], [None]), HOUR)] == [
        "t/dt=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__"]
    parts = split_by_partition(rows(["t", "t"], [None, dt.datetime(2024, 1, 1)]), DAY)
    assert {d: p["_offset"].to_pylist() for d, p in parts} == {
        "t/dt=2024-01-01": [1], "t/dt=__HIVE_DEFAULT_PARTITION__": [0],
    }


def test_the_normal_batch_is_returned_whole_and_uncopied() -> None:
    batch = rows(["t"] * 3, [dt.datetime(2024, 1, 1, h) for h in (0, 5, 23)])
    ((directory, part),) = split_by_partition(batch, DAY)
    assert directory == "t/dt=2024-01-01" and part is batch
    unused_topic = pa.record_batch({  # a dictionary with more topics than the batch uses
        "_topic": pa.DictionaryArray.from_arrays(pa.array([1, 1], pa.int32()), pa.array(["a", "b"])),
        "_timestamp": pa.array([0, 1], pa.timestamp("ms")),
    })
    ((directory, part),) = split_by_partition(unused_topic, DAY)
    assert directory == "b/dt=1970-01-01" and part is unused_topic
    all_null = rows(["t"] * 2, [None, None])
    assert split_by_partition(all_null, HOUR)[0][1] is all_null
    assert split_by_partition(all_null.slice(0, 0), DAY) == []


def test_values_are_utc_whatever_the_unit_and_time_zone() -> None:
    stamp = dt.datetime(2024, 3, 1, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=5)))  # 2024-02-29 20:30 UTC
    for unit in ("s", "ms", "us", "ns"):
        batch = rows(["t"], [stamp], unit=unit, tz="Asia/Karachi")
        assert split_by_partition(batch, HOUR)[0][0] == "t/dt=2024-02-29/hour=20"
    before_1970 = rows(["t"], [dt.datetime(1969, 12, 31, 23, 59)])
    assert split_by_partition(before_1970, DAY)[0][0] == "t/dt=1969-12-31"


def test_a_string_topic_column_splits_as_a_dictionary_one() -> None:
    stamps = [dt.datetime(2024, 1, 1)] * 3
    plain = split_by_partition(rows(["a", "b", "a"], stamps, dictionary=False), DAY)
    encoded = split_by_partition(rows(["a", "b", "a"], stamps), DAY)
    assert [(d, p["_offset"].to_pylist()) for d, p in plain] == [(d, p["_offset"].to_pylist()) for d, p in encoded]
    assert [d for d, _ in plain] == ["a/dt=2024-01-01", "b/dt=2024-01-01"]


def test_a_batch_without_topic_takes_the_default_topic_or_fails() -> None:
    batch = pa.record_batch({"_timestamp": pa.array([0], pa.timestamp("ms"))})
    assert split_by_partition(batch, DAY, default_topic="events")[0][0] == "events/dt=1970-01-01"
    with pytest.raises(SinkError, match="no _topic column"):
        split_by_partition(batch, DAY)


def test_a_batch_without_timestamp_fails_unless_unpartitioned() -> None:
    batch = pa.record_batch({"_topic": pa.array(["t"])})
    with pytest.raises(SinkError, match=r"partition column _timestamp is missing \(set partition-by = none\)"):
        split_by_partition(batch, DAY)
    assert split_by_partition(batch, NONE)[0][0] == "t"


def test_check_partition_columns_for_the_preflight() -> None:
    with pytest.raises(ConfigurationError, match=r"partition column _timestamp is missing \(set partition-by = none\)"):
        check_partition_columns(["_topic", "value"], HOUR)
    check_partition_columns(["_topic", "value"], NONE)
    check_partition_columns(iter(["_timestamp"]), DAY)


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "../etc", "", "_schemas", ".hidden", "a b", "dt=x"])
def test_a_topic_that_cannot_name_a_directory_is_refused(topic: str) -> None:
    with pytest.raises(SinkError):
        check_topic(topic)
    with pytest.raises(SinkError):
        split_by_partition(rows(["ok", topic], [None, None]), DAY)


def test_a_null_topic_is_refused() -> None:
    with pytest.raises(SinkError, match="null"):
        split_by_partition(rows(["t", None], [None, None]), NONE)  # type: ignore[list-item]


TOPICS = st.sampled_from(["a", "b.c", "d-e_f"])
STAMPS = st.one_of(st.none(), st.datetimes(dt.datetime(1960, 1, 1), dt.datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)))


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.tuples(TOPICS, STAMPS), min_size=1, max_size=60),
    granularity=st.sampled_from([DAY, HOUR, NONE]), dictionary=st.booleans(),
)
def test_every_row_lands_once_in_its_directory_in_its_order(
    data: list[tuple[str, dt.datetime | None]], granularity: PartitionSpec, dictionary: bool,
) -> None:
    topics, stamps = [t for t, _ in data], [s for _, s in data]
    parts = split_by_partition(rows(topics, stamps, dictionary=dictionary), granularity)
    directories = [d for d, _ in parts]
    assert len(set(directories)) == len(directories) and all(is_valid_directory(d) for d in directories)
    seen: list[int] = []
    for directory, part in parts:
        offsets = part["_offset"].to_pylist()
        assert offsets == sorted(offsets)  # the batch's order, kept inside each part
        assert {expected_directory(topics[o], stamps[o], granularity) for o in offsets} == {directory}
        seen += offsets
    assert sorted(seen) == list(range(len(data)))
