"""Watermarks of many partitions in batched ListOffsets requests (``offsets_for_times`` at the
special timestamps earliest = -2 and latest = -1), with per-partition errors raised naming the
partition; and the high watermarks of the partitions that answer, read one by one."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar_kafka.kafka_source.read.positions import (
    EARLIEST,
    LATEST,
    answered_high_watermarks,
    high_watermarks,
    watermarks,
)


@dataclass
class Answer:
    """What ``offsets_for_times`` answers for one partition (a TopicPartition's error is read-only)."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class ListOffsetsConsumer:
    """Answers ``offsets_for_times`` from ``logs`` ({(topic, partition): (low, high)}) and records each call."""

    def __init__(self, logs: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.logs = logs
        self.calls: list[list[tuple[str, int, int]]] = []

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[Answer]:
        self.calls.append([(tp.topic, tp.partition, tp.offset) for tp in partitions])
        answers = []
        for tp in partitions:
            bounds = self.logs.get((tp.topic, tp.partition))
            if bounds is None:
                answers.append(Answer(tp.topic, tp.partition, -1,
                                      KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition")))
            else:
                answers.append(Answer(tp.topic, tp.partition, bounds[0] if tp.offset == EARLIEST else bounds[1]))
        return answers


LOGS = {("t", 0): (0, 10), ("t", 1): (5, 7), ("u", 0): (3, 3)}


def test_the_watermarks_of_every_partition_come_in_two_batched_calls() -> None:
    consumer = ListOffsetsConsumer(LOGS)
    assert watermarks(consumer, [("u", 0), ("t", 1), ("t", 0), ("t", 1)], 5.0) == LOGS  # type: ignore[arg-type]
    assert consumer.calls == [[("t", 0, EARLIEST), ("t", 1, EARLIEST), ("u", 0, EARLIEST)],
                              [("t", 0, LATEST), ("t", 1, LATEST), ("u", 0, LATEST)]]


def test_high_watermarks_take_one_call_and_nothing_asked_takes_none() -> None:
    consumer = ListOffsetsConsumer(LOGS)
    assert high_watermarks(consumer, [("t", 0), ("t", 1)], 5.0) == {("t", 0): 10, ("t", 1): 7}  # type: ignore[arg-type]
    assert len(consumer.calls) == 1
    assert watermarks(consumer, [], 5.0) == {} and high_watermarks(consumer, [], 5.0) == {}  # type: ignore[arg-type]
    assert len(consumer.calls) == 1


def test_a_partition_in_error_raises_naming_it() -> None:
    with pytest.raises(KafkaException) as info:
        watermarks(ListOffsetsConsumer(LOGS), [("t", 0), ("t", 9)], 5.0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    assert info.value.args[0].str() == "t:9: Local: Unknown partition"


class OnePartitionAtATime:
    """``get_watermark_offsets`` from ``logs``; a partition outside them has no leader (it times out)."""

    def __init__(self, logs: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.logs = logs
        self.asked: list[tuple[str, int]] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        assert not cached
        self.asked.append((tp.topic, tp.partition))
        bounds = self.logs.get((tp.topic, tp.partition))
        if bounds is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out"))
        return bounds


def test_answered_high_watermarks_leave_out_a_partition_that_does_not_answer() -> None:
    consumer = OnePartitionAtATime(LOGS)
    assert answered_high_watermarks(consumer, [("u", 0), ("t", 9), ("t", 0), ("u", 0)], 5.0) == {  # type: ignore[arg-type]
        ("t", 0): 10, ("u", 0): 3}
    assert consumer.asked == [("t", 0), ("t", 9), ("u", 0)]  # one request each, in order
