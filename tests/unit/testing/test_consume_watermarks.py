"""consume_records asks a partition's high watermark again while a leader moves (a broker killed or
paused answers NOT_LEADER_FOR_PARTITION for a moment), and raises any other error at once."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from laminar_kafka.testing.records import _high_watermark


class FlakyConsumer:
    def __init__(self, errors: list[int]) -> None:
        self.errors = errors
        self.calls = 0

    def get_watermark_offsets(self, partition: object, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 42


def test_a_moving_leader_is_asked_again() -> None:
    consumer = FlakyConsumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert _high_watermark(consumer, None, time.monotonic() + 10) == 42 and consumer.calls == 3


def test_another_error_is_raised_at_once() -> None:
    consumer = FlakyConsumer([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        _high_watermark(consumer, None, time.monotonic() + 10)
    assert consumer.calls == 1


def test_past_the_deadline_the_error_is_raised() -> None:
    consumer = FlakyConsumer([KafkaError.NOT_LEADER_FOR_PARTITION] * 3)
    with pytest.raises(KafkaException):
        _high_watermark(consumer, None, time.monotonic() - 1)
