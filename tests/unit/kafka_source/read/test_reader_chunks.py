"""How the reader thread reads a chunk: consume calls of at most CALL_MESSAGES messages (so the
messages are freed before the garbage collector walks them), one FIFO chunk per chunk, and a
client error ending the chunk after the records that came before it."""
from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.decode.records import RecordFields
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo, ReaderFailed, RecordChunk
from laminar_kafka.kafka_source.read.reader import CALL_MESSAGES, FRESH_CONSUME_TIMEOUT_S, Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from tests.unit.kafka_source.read.fake_callbacks import FakeCallbacks

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
    settings = ReaderSettings(TopicSelector((TOPIC,)), chunk_records, fields=RecordFields(topic=TOPIC))
    return Reader(consumer, ByteBoundedFifo(1 << 30), {(TOPIC, 0): 0}, settings, FakeCallbacks())  # type: ignore[arg-type]


def test_a_chunk_is_read_in_small_calls_and_put_whole() -> None:
    consumer = QueuedConsumer([message(o) for o in range(2 * CALL_MESSAGES + 7)])
    reader = reader_of(consumer, chunk_records=10_000)
    reader._read_chunk()
    assert consumer.calls == [(CALL_MESSAGES, reader.settings.consume_timeout_s), (CALL_MESSAGES, 0), (CALL_MESSAGES, 0)]
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
    assert consumer.calls[-1] == (CALL_MESSAGES, reader.settings.consume_timeout_s)
    reader._accepting = True  # the test plays the reader thread: it runs the command itself
    applied = reader.change_assignment(1, acquire={(TOPIC, 1): 5})
    reader._run_commands()
    assert applied.result(timeout=1).acquired == {(TOPIC, 1): 5}
    reader._read_chunk()
    assert consumer.calls[-1] == (CALL_MESSAGES, FRESH_CONSUME_TIMEOUT_S)
    reader.fresh_until = 0.0  # the window passed
    reader._read_chunk()
    assert consumer.calls[-1] == (CALL_MESSAGES, reader.settings.consume_timeout_s)


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


class OutOfRangeConsumer(QueuedConsumer):
    """Partition 0 read up to ``offset``; then the broker answers its fetch with "out of range" (its
    log now ``[low, high)``); assigned again, it hands out ``after``."""

    def __init__(self, offset: int, low: int, high: int, after: list[Message]) -> None:
        lost = Message(topic=TOPIC, partition=0, offset=offset,
                       error=KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, "Broker: Offset out of range"))
        super().__init__([message(o) for o in range(offset)] + [lost])
        self.watermarks, self.after = (low, high), after
        self.log: list[tuple[str, list[tuple[int, int]]]] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        return self.watermarks

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.log.append(("unassign", [(tp.partition, tp.offset) for tp in partitions]))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.log.append(("assign", [(tp.partition, tp.offset) for tp in partitions]))
        self.queued += self.after

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, 0, -1001) for _ in partitions]  # unknown until a record of the new assignment


def out_of_range_reader(consumer: OutOfRangeConsumer, resolve: Any) -> tuple[Reader, list[int]]:
    callbacks = FakeCallbacks(resolve=resolve)
    settings = ReaderSettings(TopicSelector((TOPIC,)), 10_000, fields=RecordFields(topic=TOPIC))
    reader = Reader(consumer, ByteBoundedFifo(1 << 30), {(TOPIC, 0): 0}, settings, callbacks)  # type: ignore[arg-type]
    return reader, callbacks.lost


def test_an_offset_deleted_under_the_reader_is_read_on_from_where_the_resolver_says() -> None:
    consumer = OutOfRangeConsumer(5, low=40, high=60, after=[message(40), message(41)])
    asked: list[tuple[object, ...]] = []

    def resolve(tp: tuple[str, int], offset: int, low: int, high: int) -> int:
        asked.append((tp, offset, low, high))
        return low

    reader, lost = out_of_range_reader(consumer, resolve)
    reader._read_chunk()
    reader._read_chunk()
    assert asked == [((TOPIC, 0), 5, 40, 60)] and lost == [35]
    assert consumer.log == [("unassign", [(0, -1001)]), ("assign", [(0, 40)])]
    first, after = reader.fifo.peek(100_000)
    # the move past the lost offsets comes with the chunk of the records read before it (a chunk's
    # positions hold after its records), though the client reports no position yet
    assert isinstance(first, RecordChunk) and first.records.offsets == [0, 1, 2, 3, 4]
    assert first.positions == {(TOPIC, 0): 40}
    assert isinstance(after, RecordChunk) and after.records.offsets == [40, 41]
    assert reader.fresh_until > time.monotonic()  # the partition's first records are not held back


def test_an_offset_out_of_range_the_resolver_refuses_fails_the_reader_with_its_error() -> None:
    consumer = OutOfRangeConsumer(5, low=0, high=3, after=[])

    def resolve(tp: tuple[str, int], offset: int, low: int, high: int) -> int:
        raise OffsetOutOfRangeError("re-created", topic=tp[0], partition=tp[1], offset=offset, low=low, high=high)

    reader, lost = out_of_range_reader(consumer, resolve)
    reader._read_chunk()
    items = reader.fifo.peek(100_000)
    assert [type(item).__name__ for item in items] == ["ReaderFailed", "RecordChunk"]
    assert isinstance(items[0], ReaderFailed) and str(items[0].error) == "re-created"
    assert consumer.log == [] and lost == [] and reader._failed


def test_an_offset_out_of_range_of_a_partition_paused_for_a_drain_fails_naming_the_retained_range() -> None:
    consumer = OutOfRangeConsumer(5, low=40, high=60, after=[])
    reader, _lost = out_of_range_reader(consumer, lambda *_args: 40)  # never asked: the partition is blocked
    reader.partitions.blocked = frozenset({(TOPIC, 0)})
    reader._read_chunk()
    failure = reader.fifo.peek(100_000)[0]
    assert isinstance(failure, ReaderFailed)
    assert str(failure.error) == "t:0: read offset 5 is outside the retained range [40, 60]"


def test_when_the_watermarks_cannot_be_read_the_reader_fails_naming_the_brokers_answer() -> None:
    class Unreachable(OutOfRangeConsumer):
        def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out"))

    reader, lost = out_of_range_reader(Unreachable(5, low=0, high=0, after=[]), lambda *_args: 0)
    reader._read_chunk()
    failure = reader.fifo.peek(100_000)[0]
    assert isinstance(failure, ReaderFailed) and lost == []
    assert str(failure.error) == ("t:0: read offset 5 is out of the retained range (Broker: Offset out of range; "
                                  "the partition's watermarks could not be read: Local: Timed out)")


class PositionsConsumer:
    """Partitions 0..9 of TOPIC; ``positions`` says where each one is (moved by the test, as a
    transaction marker moves a position without a record); records which partitions ``position``
    was asked about."""

    def __init__(self) -> None:
        self.queued: list[Message] = []
        self.positions = {p: 0 for p in range(10)}
        self.asked: list[list[int]] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        for m in taken:
            self.positions[m.partition()] = m.offset() + 1
        return taken

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.asked.append(sorted(tp.partition for tp in partitions))
        return [TopicPartition(TOPIC, tp.partition, self.positions[tp.partition]) for tp in partitions]


def positions_reader(consumer: PositionsConsumer, fifo: ByteBoundedFifo | None = None) -> Reader:
    """A reader of partitions 0..9 of TOPIC over ``consumer``, assigned at offset 0."""
    settings = ReaderSettings(TopicSelector((TOPIC,)), 10_000, fields=RecordFields(topic=TOPIC))
    return Reader(consumer, fifo if fifo is not None else ByteBoundedFifo(1 << 30),  # type: ignore[arg-type]
                  {(TOPIC, p): 0 for p in range(10)}, settings, FakeCallbacks())


def test_a_chunk_reads_the_positions_of_its_partitions_and_every_partition_at_most_each_sweep(monkeypatch) -> None:
    import laminar_kafka.kafka_source.read.reader as reader_module

    clock = [100.0]
    monkeypatch.setattr(reader_module.time, "monotonic", lambda: clock[0])
    consumer = PositionsConsumer()
    reader = positions_reader(consumer)
    reader._read_chunk()  # the first chunk sweeps: nothing moved, nothing put
    assert consumer.asked == [list(range(10))] and reader.fifo.peek(10) == []

    consumer.queued = [Message(topic=TOPIC, partition=3, offset=7, value=b"v", timestamp=(1, 1))]
    consumer.positions[5] = 2  # moved without a record (past a transaction marker)
    clock[0] += reader_module.POSITION_SWEEP_S / 2
    reader._read_chunk()
    assert consumer.asked[-1] == [3]  # only the chunk's partitions before the next sweep
    [chunk] = reader.fifo.peek(10)
    assert isinstance(chunk, RecordChunk) and chunk.positions == {(TOPIC, 3): 8}

    clock[0] += reader_module.POSITION_SWEEP_S
    reader._read_chunk()  # no record, but a sweep is due: partition 5's move is reported
    assert consumer.asked[-1] == list(range(10))
    last = reader.fifo.peek(10)[-1]
    assert isinstance(last, RecordChunk) and len(last.records) == 0 and last.positions == {(TOPIC, 5): 2}


def test_sweeps_that_find_nothing_relax_to_the_idle_interval_and_records_bring_them_back(monkeypatch) -> None:
    import laminar_kafka.kafka_source.read.reader as reader_module

    clock = [100.0]
    monkeypatch.setattr(reader_module.time, "monotonic", lambda: clock[0])
    consumer = PositionsConsumer()
    reader = positions_reader(consumer)

    def sweeps_over(seconds: float) -> int:
        before = sum(1 for asked in consumer.asked if len(asked) == 10)
        for _ in range(int(seconds / 0.05)):
            clock[0] += 0.05
            reader._read_chunk()
        return sum(1 for asked in consumer.asked if len(asked) == 10) - before

    reader._read_chunk()
    sweeps_over(10.0)  # idle: the interval grew to its cap
    assert sweeps_over(10.0) == int(10.0 / reader_module.POSITION_SWEEP_IDLE_S)

    consumer.positions[5] = 2  # a move without records is still found, within the idle interval
    sweeps_over(reader_module.POSITION_SWEEP_IDLE_S + 0.05)
    assert reader.fifo.peek(10)[-1].positions == {(TOPIC, 5): 2}

    consumer.queued = [Message(topic=TOPIC, partition=3, offset=7, value=b"v", timestamp=(1, 1))]
    clock[0] += 0.05
    reader._read_chunk()  # records: sweeps are due every POSITION_SWEEP_S again
    assert sweeps_over(reader_module.POSITION_SWEEP_S + 0.05) == 1


def test_the_asyncio_side_is_woken_once_the_commands_it_waits_for_have_their_results() -> None:
    """A settled runtime turns only when woken: a command's result (an assignment change the vnode
    driver polls for) must wake it after the result is set, not only the marker the command puts."""
    seen: list[tuple[bool, ...]] = []
    futures = []

    def on_ready() -> None:
        seen.append(tuple(f.done() for f in futures))

    consumer = PositionsConsumer()
    reader = positions_reader(consumer, ByteBoundedFifo(1 << 30, on_ready=on_ready))
    reader._accepting = True
    futures += [reader.submit(lambda c: 1), reader.submit(lambda c: 2)]
    reader._run_commands()
    assert seen == [(True, True)] and [f.result() for f in futures] == [1, 2]
    reader._run_commands()  # nothing queued: no wake-up
    assert seen == [(True, True)]
