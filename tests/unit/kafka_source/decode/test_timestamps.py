"""Record timestamps outside years 0001-9999: found by numpy, reported as bad records."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.timestamps import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, out_of_range_timestamps
from tests.unit.kafka_source.wiring import records_of

NOW_MS = 1_733_000_000_000


def test_the_bounds_are_the_first_and_last_millisecond_a_datetime_holds() -> None:
    inside = pa.array([MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS], pa.timestamp("ms")).to_pylist()
    assert inside == [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999000)]
    for outside in (MIN_TIMESTAMP_MS - 1, MAX_TIMESTAMP_MS + 1):
        with pytest.raises((OverflowError, ValueError)):
            pa.array([outside], pa.timestamp("ms")).to_pylist()


@given(st.lists(st.one_of(st.none(), st.integers(-(2**63) + 1, 2**63 - 1),
                          st.integers(MIN_TIMESTAMP_MS - 2, MIN_TIMESTAMP_MS + 2),
                          st.integers(MAX_TIMESTAMP_MS - 2, MAX_TIMESTAMP_MS + 2)), max_size=40),
       st.integers(0, 5))
def test_exactly_the_non_null_values_outside_the_range_are_found(values: list[int | None], skip: int) -> None:
    column = pa.array([0] * skip + values, pa.timestamp("ms")).slice(skip)  # a sliced array has an offset
    found = out_of_range_timestamps(column)
    assert sorted(found) == [i for i, v in enumerate(values)
                             if v is not None and not MIN_TIMESTAMP_MS <= v <= MAX_TIMESTAMP_MS]
    assert all(str(values[i]) in reason for i, reason in found.items())


def test_the_reason_says_which_side_and_suspects_microseconds() -> None:
    found = out_of_range_timestamps(pa.array([NOW_MS * 1000, MIN_TIMESTAMP_MS - 1], pa.timestamp("ms")))
    assert "after 9999-12-31" in found[0] and "microseconds" in found[0]
    assert "before 0001-01-01" in found[1] and "microseconds" not in found[1]


def message(offset: int, value: bytes, timestamp: int | None) -> Message:
    kind = (TIMESTAMP_NOT_AVAILABLE, -1) if timestamp is None else (TIMESTAMP_CREATE_TIME, timestamp)
    return Message(topic="t", partition=0, offset=offset, value=value, timestamp=kind)


@pytest.mark.parametrize("metadata", ["_offset,_timestamp", "_offset"])
def test_a_batch_drops_out_of_range_records_as_bad_only_with_the_timestamp_column(metadata: str) -> None:
    config = KafkaSourceConfig.from_properties({
        "bootstrap.servers": "b:1", "topic": "t", "group.id": "g", "format": "json",
        "json-schema": "id:int64", "include-metadata": metadata,
    })
    messages = [
        message(0, b'{"id":0}', NOW_MS),
        message(1, b"{not json", NOW_MS),
        message(2, b'{"id":2}', NOW_MS * 1000),
        message(3, b'{"id":3}', None),
        message(4, b'{"id":4}', MAX_TIMESTAMP_MS),
    ]
    built = BatchBuilder(config).build(records_of(messages))
    if "_timestamp" in metadata:
        assert built.batch.column("_offset").to_pylist() == [0, 3, 4]
        assert [b.index for b in built.bad] == [1, 2] and "9999-12-31" in built.bad[1].reason
        assert built.batch.column("_timestamp").to_pylist()[2].year == 9999  # readable as a datetime
    else:  # no _timestamp in the batch: nothing reads it as a datetime
        assert built.batch.column("_offset").to_pylist() == [0, 2, 3, 4]
        assert [b.index for b in built.bad] == [1]
