"""`produce_numbered` (what `laminar-kafka dev produce` sends): which record goes where, the pace,
and failures; a recording producer stands in for the Kafka client."""
from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException

from laminar_kafka.devstack import producers


class RecordingProducer:
    """The part of a confluent_kafka Producer that `produce_numbered` uses; ``fail`` reports an error."""

    def __init__(self, clock: Callable[[], float], fail: bool = False, buffer_full_once: bool = False) -> None:
        self.clock = clock
        self.fail = fail
        self.buffer_full_once = buffer_full_once
        self.sent: list[tuple[str, int, bytes, float]] = []
        self.callbacks: list[Callable[[object, object], None]] = []

    def produce(self, topic: str, *, value: bytes, key: bytes | None, partition: int,
                on_delivery: Callable[[object, object], None]) -> None:
        if self.buffer_full_once:
            self.buffer_full_once = False
            raise BufferError("queue full")
        self.sent.append((topic, partition, value, self.clock()))
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for callback in self.callbacks:
            callback("broker down" if self.fail else None, None)
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _install(monkeypatch: pytest.MonkeyPatch, kafka: RecordingProducer, partitions: int) -> None:
    monkeypatch.setattr(producers, "partition_count", lambda bootstrap, topic, client=None: partitions)
    monkeypatch.setattr(producers, "producer", lambda bootstrap, client=None: kafka)


def test_record_n_goes_to_partition_n_mod_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    kafka = RecordingProducer(clock, buffer_full_once=True)
    _install(monkeypatch, kafka, 3)
    assert producers.produce_numbered("b:1", "orders", 5, first=10, clock=clock, sleep=clock.sleep) == 5
    assert [(p, v) for _, p, v, _ in kafka.sent] == [
        (1, b"record-000000000010"), (2, b"record-000000000011"), (0, b"record-000000000012"),
        (1, b"record-000000000013"), (2, b"record-000000000014"),
    ]
    assert clock.now == 0.0  # no --rate: never paced


def test_a_rate_paces_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    kafka = RecordingProducer(clock)
    _install(monkeypatch, kafka, 2)
    assert producers.produce_numbered("b:1", "orders", 5, rate=2.0, clock=clock, sleep=clock.sleep) == 5
    assert [at for *_, at in kafka.sent] == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_nothing_to_produce_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    _install(monkeypatch, RecordingProducer(clock), 2)
    assert producers.produce_numbered("b:1", "orders", 0, clock=clock, sleep=clock.sleep) == 0


def test_a_failed_delivery_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    _install(monkeypatch, RecordingProducer(clock, fail=True), 2)
    with pytest.raises(KafkaException, match="broker down"):
        producers.produce_numbered("b:1", "orders", 3, clock=clock, sleep=clock.sleep)


def test_produce_sends_values_round_robin_or_to_one_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    kafka = RecordingProducer(clock)
    _install(monkeypatch, kafka, 2)
    assert producers.produce("b:1", "t", [b"a", b"b", b"c"]) == 3
    assert producers.produce("b:1", "t", [b"d"], partition=7) == 1
    assert [(p, v) for _, p, v, _ in kafka.sent] == [(0, b"a"), (1, b"b"), (0, b"c"), (7, b"d")]
