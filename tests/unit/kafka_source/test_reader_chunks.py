"""How the reader thread reads a chunk: consume calls of at most CALL_MESSAGES messages (so the
messages are freed before the garbage collector walks them), one FIFO chunk per chunk, and a
client error ending the chunk after the records that came before it."""
from __future__ import annotations

from confluent_kafka import KafkaError, Message, TopicPartition

from kafka_source.fifo import ByteBoundedFifo, ReaderFailed, RecordChunk
from kafka_source.reader import CALL_MESSAGES, FRESH_CONSUME_TIMEOUT_S, Reader
from kafka_source.records import RecordFields
from kafka_source.topics import TopicSelector

TOPIC = "t"


class QueuedConsumer:
    """``queued`` messages waiting in the client: ``consume`` hands out up to ``num_messages``."""

    def __init__(self, queued: list[Message]) -> None:
        self.queued = queued
        self.calls: list[tuple[int, float]] = []
        self.handed = 0

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.calls.append((num_messages, timeout))
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        self.handed += sum(1 for m in taken if m.error() is None)
        return taken

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, self.handed) for _ in partitions]


def message(offset: int) -> Message:
    return Message(topic=TOPIC, partition=0, offset=offset, value=b"v", timestamp=(1, 1000 + offset))


def reader_of(consumer: QueuedConsumer, chunk_records: int) -> Reader:
    return Reader(consumer, ByteBoundedFifo(1 << 30), selector=TopicSelector((TOPIC,)), assigned={(TOPIC, 0): 0},  # type: ignore[arg-type]
                  chunk_records=chunk_records, discovery_interval_s=0.0, fields=RecordFields(topic=TOPIC))


def test_a_chunk_is_read_in_small_calls_and_put_whole() -> None:
    consumer = QueuedConsumer([message(o) for o in range(2 * CALL_MESSAGES + 7)])
    reader = reader_of(consumer, chunk_records=10_000)
    reader._read_chunk()
    assert consumer.calls == [(CALL_MESSAGES, reader.consume_timeout_s), (CALL_MESSAGES, 0), (CALL_MESSAGES, 0)]
    [chunk] = reader.fifo.peek(100_000)
    assert isinstance(chunk, RecordChunk)
    assert chunk.records.offsets == list(range(2 * CALL_MESSAGES + 7))
    assert chunk.records.timestamps == [1000 + o for o in range(2 * CALL_MESSAGES + 7)]
    assert chunk.positions == {(TOPIC, 0): 2 * CALL_MESSAGES + 7}


def test_a_chunk_stops_at_chunk_records() -> None:
    consumer = QueuedConsumer([message(o) for o in range(3 * CALL_MESSAGES)])
    reader = reader_of(consumer, chunk_records=CALL_MESSAGES + 10)
    reader._read_chunk()
    assert [n for n, _ in consumer.calls] == [CALL_MESSAGES, 10]
    [chunk] = reader.fifo.peek(100_000)
    assert isinstance(chunk, RecordChunk) and len(chunk.records) == CALL_MESSAGES + 10


def test_a_client_error_ends_the_chunk_after_the_records_before_it() -> None:
    failed = Message(topic=TOPIC, partition=0, offset=CALL_MESSAGES + 2,
                     error=KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    queued = [message(o) for o in range(CALL_MESSAGES + 2)] + [failed] + [message(CALL_MESSAGES + 3)]
    consumer = QueuedConsumer(queued)
    reader = reader_of(consumer, chunk_records=10_000)
    reader._read_chunk()
    items = reader.fifo.peek(100_000)
    assert [type(item).__name__ for item in items] == ["RecordChunk", "ReaderFailed", "RecordChunk"]
    first, failure, last = items
    assert isinstance(first, RecordChunk) and first.records.offsets == list(range(CALL_MESSAGES))
    assert isinstance(failure, ReaderFailed) and "fenced" in str(failure.error)
    assert isinstance(last, RecordChunk) and last.records.offsets == [CALL_MESSAGES, CALL_MESSAGES + 1, CALL_MESSAGES + 3]


def test_nothing_is_put_when_nothing_came_and_no_position_moved() -> None:
    reader = reader_of(QueuedConsumer([]), chunk_records=10_000)
    reader._read_chunk()
    assert reader.fifo.peek(100_000) == []


class AssigningConsumer(QueuedConsumer):
    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        pass

    def resume(self, partitions: list[TopicPartition]) -> None:
        pass


def test_after_acquiring_partitions_the_reader_waits_in_short_steps_for_a_while() -> None:
    # librdkafka does not wake a waiting consume() for a just-assigned partition's first records
    consumer = AssigningConsumer([])
    reader = reader_of(consumer, chunk_records=10_000)
    reader._read_chunk()
    assert consumer.calls[-1] == (CALL_MESSAGES, reader.consume_timeout_s)
    reader._accepting = True  # the test plays the reader thread: it runs the command itself
    applied = reader.change_assignment(1, acquire={(TOPIC, 1): 5})
    reader._run_commands()
    assert applied.result(timeout=1).acquired == {(TOPIC, 1): 5}
    reader._read_chunk()
    assert consumer.calls[-1] == (CALL_MESSAGES, FRESH_CONSUME_TIMEOUT_S)
    reader.fresh_until = 0.0  # the window passed
    reader._read_chunk()
    assert consumer.calls[-1] == (CALL_MESSAGES, reader.consume_timeout_s)


class RecordingConsumer(QueuedConsumer):
    def __init__(self) -> None:
        super().__init__([])
        self.log: list[tuple[str, list[int]]] = []

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.log.append(("resume", [tp.partition for tp in partitions]))

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.log.append(("unassign", [tp.partition for tp in partitions]))


def test_released_partitions_are_resumed_before_they_are_unassigned() -> None:
    # a partition unassigned while paused for a drain stalled for about 1 s when assigned again
    consumer = RecordingConsumer()
    reader = reader_of(consumer, chunk_records=10_000)
    reader._accepting = True
    applied = reader.change_assignment(1, release=frozenset({(TOPIC, 0)}))
    reader._run_commands()
    assert applied.result(timeout=1).released == frozenset({(TOPIC, 0)})
    assert consumer.log == [("resume", [0]), ("unassign", [0])]
