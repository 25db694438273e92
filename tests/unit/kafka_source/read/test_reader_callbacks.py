"""The reader at its byte cap: commands still run, and an awaited client callback is still served
(one-record ``consume`` calls past the cap) so an advisory commit never waits for the caller to poll."""
from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import Message, TopicPartition

from laminar_kafka.devstack import waiting
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.read.fifo import MESSAGE_OVERHEAD_BYTES, ByteBoundedFifo, RecordChunk
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from tests.unit.kafka_source.read.fake_callbacks import FakeCallbacks

TOPIC = "t"


class FakeConsumer:
    """An endless partition 0: ``consume`` hands out the next offsets and records each call."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        with self.lock:
            self.calls.append(num_messages)
            start, self.next_offset = self.next_offset, self.next_offset + num_messages
        return [Message(topic=TOPIC, partition=0, offset=o, value=b"x" * 100) for o in range(start, start + num_messages)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        with self.lock:
            return [TopicPartition(TOPIC, 0, self.next_offset) for _ in partitions]

    def close(self) -> None:
        pass


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    waiting.wait_until(condition, timeout, "the reader condition", interval=0.002)


class Pending:
    """``callbacks_pending`` for the reader: answers ``flag`` and counts the reader's questions
    (one per loop turn while the FIFO is at its cap), so tests can await turns instead of sleeping."""

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.idle_turns = 0  # turns that were told no callback is awaited

    def __call__(self) -> bool:
        pending = self.flag.is_set()
        if not pending:
            self.idle_turns += 1
        return pending


def started_reader(pending: Pending) -> tuple[Reader, FakeConsumer, ByteBoundedFifo]:
    consumer = FakeConsumer()
    fifo = ByteBoundedFifo(max_bytes=1_000)
    reader = Reader(
        consumer,  # type: ignore[arg-type]
        fifo,
        {(TOPIC, 0): 0},
        ReaderSettings(TopicSelector((TOPIC,)), 10, consume_timeout_s=0.01),
        FakeCallbacks(pending=pending),
    )
    reader.start()
    wait_until(lambda: fifo.nbytes >= fifo.max_bytes)
    return reader, consumer, fifo


def offsets(fifo: ByteBoundedFifo) -> list[int]:
    return [m for item in fifo.peek(10_000) if isinstance(item, RecordChunk) for m in item.records.offsets]


def test_full_fifo_stops_consuming_but_runs_commands() -> None:
    pending = Pending()
    reader, consumer, fifo = started_reader(pending)
    try:
        calls = len(consumer.calls)
        assert reader.submit(lambda _c: "ran").result(timeout=2) == "ran"
        turns = pending.idle_turns
        wait_until(lambda: pending.idle_turns >= turns + 3)
        assert len(consumer.calls) == calls  # three turns at the cap, no callback awaited: no consume
    finally:
        reader.stop()
        reader.thread.join(2)


def test_awaited_callback_is_served_one_record_at_a_time_past_the_cap() -> None:
    pending = Pending()
    reader, consumer, fifo = started_reader(pending)
    try:
        full_bytes, calls = fifo.nbytes, len(consumer.calls)
        pending.flag.set()
        wait_until(lambda: len(consumer.calls) >= calls + 3)
        turns = pending.idle_turns
        pending.flag.clear()
        wait_until(lambda: pending.idle_turns > turns)  # a take that was already running finished
        settled = len(consumer.calls)
        assert consumer.calls[calls:] == [1] * (settled - calls)
        over = fifo.nbytes - full_bytes
        assert over == (settled - calls) * (100 + MESSAGE_OVERHEAD_BYTES)
        turns = pending.idle_turns
        wait_until(lambda: pending.idle_turns >= turns + 3)
        assert len(consumer.calls) == settled  # no callback awaited any more: back to waiting
        assert offsets(fifo) == list(range(consumer.next_offset))  # order kept, nothing lost
    finally:
        reader.stop()
        reader.thread.join(2)
