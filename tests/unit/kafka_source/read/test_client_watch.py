"""A consumer that reaches no broker any more is probed and replaced at the positions handed out
(`kafka_source/read/client_watch.py`): the pure decisions, and the reader thread doing it with fake
clients (one that lost every broker: nothing to consume, a metadata request that fails, a close
that never returns)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from laminar_kafka.devstack import waiting
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.decode.records import RecordFields
from laminar_kafka.kafka_source.read.client_watch import (
    MAX_WAIT_S,
    ClientKeeper,
    StallWatch,
    close_in_background,
    discard_in_background,
    replacement_assignment,
)
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo, DrainBoundary, RecordChunk
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from tests.unit.kafka_source.read.fake_callbacks import FakeCallbacks

TOPIC = "t"


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    waiting.wait_until(condition, timeout, "the reader condition", interval=0.002)


# -- the pure decisions -----------------------------------------------------------------------------

def test_a_probe_is_due_after_the_stall_and_then_every_stall_while_it_lasts() -> None:
    watch = StallWatch(stall_s=10.0, quiet_since=100.0)
    assert not watch.probe_due(109.9, fetching=True)
    assert watch.probe_due(110.0, fetching=True)
    watch.probed(111.0, replaced=False)  # the client answered: only quiet partitions
    assert not watch.probe_due(120.9, fetching=True) and watch.probe_due(121.0, fetching=True)
    watch.progressed(121.0)
    assert not watch.probe_due(130.0, fetching=True)


def test_each_replacement_without_progress_doubles_the_wait_up_to_the_most_and_progress_resets_it() -> None:
    watch = StallWatch(stall_s=15.0, quiet_since=0.0)
    now, waits = 0.0, []
    for _ in range(7):  # Kafka down: every probe fails, every replacement brings nothing
        now += watch.wait_s
        assert watch.probe_due(now, fetching=True)
        watch.probed(now, replaced=True)
        watch.restarted(now)  # the replacement's partitions were assigned: the wait is kept
        waits.append(watch.wait_s)
    assert waits == [30.0, 60.0, 120.0, 240.0, 240.0, 240.0, 240.0] and MAX_WAIT_S == 240.0
    assert not watch.probe_due(now + 239.0, fetching=True)
    watch.progressed(now + 1.0)  # Kafka is back: records
    assert watch.wait_s == 15.0 and watch.probe_due(now + 16.0, fetching=True)


def test_a_reader_that_expects_nothing_is_never_probed_and_its_quiet_restarts() -> None:
    watch = StallWatch(stall_s=10.0, quiet_since=0.0)
    assert not watch.probe_due(50.0, fetching=False)  # no partition, or all paused for a drain
    assert not watch.probe_due(59.0, fetching=True)  # fetching again: a whole stall first
    assert watch.probe_due(60.0, fetching=True)


def test_the_replacement_reads_on_right_after_the_last_record_handed_out() -> None:
    a, b, c, d = (TOPIC, 0), (TOPIC, 1), (TOPIC, 2), ("u", 0)
    assignment, paused = replacement_assignment(
        [d, b, a, c],
        consumed={a: 120, b: -1001, c: 77, d: 9},  # b: nothing handed out since it was assigned
        reported={a: 118, b: 40, c: 70, d: 9},  # a: moved past a transaction marker, not reported yet
        blocked=frozenset({c}),  # paused for a drain: its records after the boundary were dropped
    )
    assert [(tp.topic, tp.partition, tp.offset) for tp in assignment] == [
        (TOPIC, 0, 120), (TOPIC, 1, 40), (TOPIC, 2, 70), ("u", 0, 9)]
    assert [(tp.topic, tp.partition) for tp in paused] == [(TOPIC, 2)]


def test_a_lost_consumer_without_positions_falls_back_to_the_reported_ones() -> None:
    assignment, paused = replacement_assignment([(TOPIC, 0)], consumed={}, reported={(TOPIC, 0): 5}, blocked=frozenset())
    assert [(tp.partition, tp.offset) for tp in assignment] == [(0, 5)] and paused == []


def test_a_close_that_never_returns_does_not_hold_the_caller() -> None:
    release = threading.Event()

    class Hanging:
        def close(self) -> None:
            release.wait()

    thread = close_in_background(Hanging())
    assert thread.daemon and thread.is_alive()
    release.set()
    thread.join(5)
    assert not thread.is_alive()


# -- the reader thread --------------------------------------------------------------------------------

class LostConsumer:
    """A client that lost every broker: hands out ``queued`` first, then nothing; its metadata request
    fails; its close never returns (as measured with librdkafka 2.16)."""

    def __init__(self, queued: list[Message]) -> None:
        self.queued = queued
        self.handed: dict[int, int] = {}
        self.probes = 0
        self.paused: list[tuple[str, int]] = []
        self.close_called = threading.Event()
        self.never = threading.Event()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        for m in taken:
            self.handed[m.partition()] = m.offset() + 1
        return taken

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.handed.get(tp.partition, -1001)) for tp in partitions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def list_topics(self, topic: str, timeout: float) -> None:
        self.probes += 1
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))

    def close(self) -> None:
        self.close_called.set()
        self.never.wait()


class HealthyConsumer:
    """A new client: assigned once, then hands out every offset from its start, a message of each
    fetchable partition a call; answers metadata requests."""

    def __init__(self) -> None:
        self.assignment: list[tuple[str, int, int]] = []
        self.paused: list[tuple[str, int]] = []
        self.next: dict[int, int] = {}
        self.probes = 0
        self.closed = False

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assignment = [(tp.topic, tp.partition, tp.offset) for tp in partitions]
        self.next = {tp.partition: tp.offset for tp in partitions}

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        messages = []
        for partition in sorted(p for p in self.next if (TOPIC, p) not in self.paused)[:num_messages]:
            messages.append(Message(topic=TOPIC, partition=partition, offset=self.next[partition], value=b"v"))
            self.next[partition] += 1
        return messages

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.next.get(tp.partition, -1001)) for tp in partitions]

    def list_topics(self, topic: str, timeout: float) -> None:
        self.probes += 1

    def close(self) -> None:
        self.closed = True


def reader_over(lost: LostConsumer, replacements: list[HealthyConsumer], replaced: list[int], *,
                assigned: dict[tuple[str, int], int]) -> Reader:
    def factory() -> HealthyConsumer:
        replacements.append(HealthyConsumer())
        return replacements[-1]

    callbacks = FakeCallbacks(factory=factory, replaced=replaced)
    settings = ReaderSettings(TopicSelector((TOPIC,)), 100, fields=RecordFields(topic=TOPIC), stall_s=0.05)
    return Reader(lost, ByteBoundedFifo(1 << 30), assigned, settings, callbacks)  # type: ignore[arg-type]


def offsets_read(reader: Reader) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {}
    for item in reader.fifo.peek(1_000_000):
        if isinstance(item, RecordChunk):
            for partition, offset in zip(item.records.partitions, item.records.offsets, strict=True):
                seen.setdefault(partition, []).append(offset)
    return seen


def test_a_consumer_that_lost_every_broker_is_replaced_and_reading_goes_on_exactly() -> None:
    lost = LostConsumer([Message(topic=TOPIC, partition=p, offset=o, value=b"v") for o in range(10, 13) for p in (0, 1)])
    replacements: list[HealthyConsumer] = []
    replaced: list[int] = []
    reader = reader_over(lost, replacements, replaced, assigned={(TOPIC, 0): 10, (TOPIC, 1): 10, (TOPIC, 2): 4})
    reader.start()
    try:
        wait_until(lambda: len(offsets_read(reader).get(2, [])) >= 3)
    finally:
        reader.stop()
        reader.thread.join(5)
    assert lost.probes == 1 and len(replacements) == 1 and replaced == [1]
    new = replacements[0]
    # partitions 0 and 1 on after offset 12, partition 2 (nothing handed out) at its assigned offset
    assert new.assignment == [(TOPIC, 0, 13), (TOPIC, 1, 13), (TOPIC, 2, 4)] and new.paused == []
    seen = offsets_read(reader)
    for partition, first in ((0, 10), (1, 10), (2, 4)):
        assert seen[partition] == list(range(first, first + len(seen[partition])))  # no gap, nothing twice
    assert lost.close_called.wait(5)  # closed aside; it never returned, the reader did not wait for it
    assert new.closed  # the reader closes its current consumer on its way out
    assert not reader.is_alive()


def test_a_partition_paused_for_a_drain_is_assigned_at_its_boundary_and_stays_paused() -> None:
    lost = LostConsumer([Message(topic=TOPIC, partition=p, offset=o, value=b"v") for o in range(0, 3) for p in (0, 1)])
    replacements: list[HealthyConsumer] = []
    reader = reader_over(lost, replacements, [], assigned={(TOPIC, 0): 0, (TOPIC, 1): 0})
    reader._stall = StallWatch(3600.0)  # no probe while the drain's boundary is put
    reader.start()
    try:
        wait_until(lambda: offsets_read(reader).get(1) == [0, 1, 2])
        boundary = reader.pause_for_drain(None, frozenset({(TOPIC, 1)})).result(5)  # type: ignore[arg-type]
        assert isinstance(boundary, DrainBoundary) and boundary.positions[(TOPIC, 1)] == 3
        lost.handed[1] = 7  # records of the paused partition fetched after the boundary: dropped
        reader._stall = StallWatch(0.05, quiet_since=time.monotonic())
        wait_until(lambda: len(replacements) == 1 and len(offsets_read(reader).get(0, [])) >= 6)
    finally:
        reader.stop()
        reader.thread.join(5)
    new = replacements[0]
    assert new.assignment == [(TOPIC, 0, 3), (TOPIC, 1, 3)] and new.paused == [(TOPIC, 1)]
    assert offsets_read(reader)[1] == [0, 1, 2]  # nothing of the blocked partition after its boundary


def test_a_quiet_healthy_consumer_is_probed_and_kept() -> None:
    healthy = HealthyConsumer()
    healthy.assign([TopicPartition(TOPIC, 0, 0)])
    healthy.paused = [(TOPIC, 0)]  # nothing to fetch: quiet, yet it answers
    replacements: list[HealthyConsumer] = []
    reader = reader_over(healthy, replacements, [], assigned={(TOPIC, 0): 0})  # type: ignore[arg-type]
    reader.start()
    try:
        wait_until(lambda: healthy.probes >= 2)
    finally:
        reader.stop()
        reader.thread.join(5)
    assert replacements == [] and healthy.closed


def test_without_a_stall_time_the_reader_never_probes() -> None:
    lost = LostConsumer([])
    settings = ReaderSettings(TopicSelector((TOPIC,)), 100, fields=RecordFields(topic=TOPIC), stall_s=None)
    reader = Reader(lost, ByteBoundedFifo(1 << 30), {(TOPIC, 0): 0}, settings, FakeCallbacks())  # type: ignore[arg-type]
    for _ in range(3):
        reader._read_chunk()
        reader._watch_client()
    assert lost.probes == 0


@pytest.mark.parametrize("blocked", [True, False])
def test_a_reader_with_every_partition_paused_for_a_drain_is_not_probed(blocked: bool) -> None:
    lost = LostConsumer([])
    reader = reader_over(lost, [], [], assigned={(TOPIC, 0): 0})
    reader._stall = StallWatch(1e-9)
    if blocked:
        reader.partitions.blocked = frozenset({(TOPIC, 0)})
    reader._watch_client()
    assert lost.probes == (0 if blocked else 1)


# -- the node's other long-lived clients -----------------------------------------------------------

def test_a_kept_client_is_replaced_only_after_failing_for_the_stall_and_ever_more_rarely() -> None:
    now = [100.0]
    made = iter(range(1, 100))
    discarded: list[int] = []
    keeper = ClientKeeper(lambda: next(made), discarded.append, stall_s=15.0, clock=lambda: now[0])
    assert keeper.client == 1
    now[0] = 110.0
    assert not keeper.failed(TimeoutError()) and keeper.client == 1
    keeper.succeeded()  # answers again: the quiet restarts
    now[0] = 124.0
    assert not keeper.failed(TimeoutError())
    now[0] = 125.0
    assert keeper.failed(TimeoutError()) and keeper.client == 2 and discarded == [1]
    now[0] = 154.0  # Kafka still down: the next replacement waits twice as long
    assert not keeper.failed(TimeoutError())
    now[0] = 155.0
    assert keeper.failed(TimeoutError()) and keeper.client == 3 and discarded == [1, 2] and keeper.replaced == 2
    keeper.succeeded()
    now[0] = 170.0  # progress reset the wait
    assert keeper.failed(TimeoutError()) and keeper.client == 4


def test_a_discarded_admin_client_is_destroyed_on_its_own_thread() -> None:
    destroyed_on: list[str] = []

    class Client:
        def __del__(self) -> None:
            destroyed_on.append(threading.current_thread().name)

    client = Client()
    thread = discard_in_background(client, delay_s=0.2)
    del client  # as the keeper does, right after handing it over
    thread.join(5)
    assert destroyed_on == ["kafka-client-discard"]
