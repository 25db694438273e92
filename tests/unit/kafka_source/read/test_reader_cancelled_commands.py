"""A reader command whose submitter gave up (``asyncio.wait_for(asyncio.wrap_future(...))`` cancels
the command's future at its timeout or when the awaiting coroutine is cancelled, as a cancelled
``finish_drain`` or a timed-out advisory commit does) neither fails the reader thread nor keeps it
from closing its consumer when it stops. Found by the conformance kit's ``cancelled-finish-drain``
on real Kafka: the stopping reader thread died of ``InvalidStateError`` and never closed its consumer."""
from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import Consumer, Message, TopicPartition

from laminar_kafka.devstack import waiting
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from tests.unit.kafka_source.read.fake_callbacks import FakeCallbacks

TOPIC = "t"


class QuietConsumer:
    """A partition with nothing new; records whether it was closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, 0) for _ in partitions]

    def close(self) -> None:
        self.closed.set()


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    waiting.wait_until(condition, timeout, "the reader condition", interval=0.002)


def reader_of(consumer: object) -> Reader:
    """A reader of partition 0 of TOPIC over ``consumer`` (not started)."""
    return Reader(
        consumer,  # type: ignore[arg-type]
        ByteBoundedFifo(max_bytes=1_000),
        {(TOPIC, 0): 0},
        ReaderSettings(TopicSelector((TOPIC,)), 10, consume_timeout_s=0.01),
        FakeCallbacks(),
    )


def busy_reader() -> tuple[Reader, QuietConsumer, threading.Event, list[str]]:
    """A started reader whose thread is held inside a first command until the event is set."""
    consumer = QuietConsumer()
    reader = reader_of(consumer)
    reader.start()
    release, ran = threading.Event(), list[str]()

    def hold(_consumer: Consumer) -> None:
        ran.append("hold")
        release.wait(5)

    reader.submit(hold)
    wait_until(lambda: ran == ["hold"])
    return reader, consumer, release, ran


def test_a_command_cancelled_before_it_ran_is_skipped_and_the_reader_goes_on() -> None:
    reader, consumer, release, ran = busy_reader()
    try:
        given_up = reader.submit(lambda _c: ran.append("given up"))
        assert given_up.cancel()  # what cancelling asyncio.wrap_future(given_up) does
        after = reader.submit(lambda _c: ran.append("after"))
        release.set()
        assert after.result(timeout=5) is None
        assert ran == ["hold", "after"]  # nobody waits for the cancelled one: it never ran
        assert reader.is_alive()
    finally:
        reader.stop()
    wait_until(lambda: not reader.is_alive())
    assert consumer.closed.is_set()


class GatedConsumer(QuietConsumer):
    """``consume`` waits at a gate (when closed) so the test knows where the reader thread is."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.inside = threading.Event()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.inside.set()
        self.gate.wait(5)
        return []


def test_a_stopping_reader_closes_its_consumer_despite_a_cancelled_command() -> None:
    consumer = GatedConsumer()
    reader = reader_of(consumer)
    reader.start()
    consumer.gate.clear()
    consumer.inside.clear()
    wait_until(consumer.inside.is_set)  # the thread waits inside consume, not among its commands
    ran = list[str]()
    given_up = reader.submit(lambda _c: ran.append("given up"))
    assert given_up.cancel()
    queued = reader.submit(lambda _c: ran.append("queued"))
    reader.stop()  # as close() does: the thread leaves its loop with both commands still queued
    consumer.gate.set()
    wait_until(lambda: not reader.is_alive())
    assert consumer.closed.is_set()
    assert ran == []
    assert isinstance(queued.exception(timeout=5), Exception)  # failed: the reader thread stopped
