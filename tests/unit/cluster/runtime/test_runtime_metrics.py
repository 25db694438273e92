"""The handoff clock's grouping of a batch's rows by (topic, partition)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from laminar_kafka.cluster.runtime.measures import partitions_present
from laminar_kafka.kafka_source.decode.arrow_batch import topic_column


@pytest.mark.parametrize("encode", [True, False], ids=["dictionary", "plain"])
def test_partitions_present_are_the_distinct_pairs_of_the_rows(encode: bool) -> None:
    topics = pa.array(["b", "a", "b", "a", "b"])
    rows = pa.record_batch({
        "_topic": topics.dictionary_encode() if encode else topics,
        "_partition": pa.array([7, 0, 7, 2_000_000_000, 0], pa.int32()),
    })
    assert partitions_present(rows) == [("a", 0), ("a", 2_000_000_000), ("b", 0), ("b", 7)]


def test_one_topic_with_all_zero_indexes_and_an_empty_batch() -> None:
    rows = pa.record_batch({"_topic": topic_column("t", 4), "_partition": pa.array([3, 1, 3, 1], pa.int32())})
    assert partitions_present(rows) == [("t", 1), ("t", 3)]
    assert partitions_present(rows.slice(0, 0)) == []
