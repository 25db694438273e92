"""ReaderClients: each partition call goes to the consumer that holds the partition, partitions taken
start on the catch-up consumer, and the hand-over moves them to the batching one exactly where the
catch-up consumer left them."""
from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from laminar_kafka.kafka_source.read.catch_up import ReaderClients

TOPIC = "t"


class FakeConsumer:
    """Records the partition calls; ``positions`` answers ``position`` (-1001: nothing returned yet)."""

    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self.positions: dict[tuple[str, int], int] = {}
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []
        self.queued: list[Any] = []
        self.closed = False
        #: the end offsets ``offsets_for_times`` answers; None: it times out
        self.ends: dict[tuple[str, int], int] | None = None

    def _note(self, name: str, partitions: list[TopicPartition]) -> None:
        self.calls.append((name, [(tp.topic, tp.partition) for tp in partitions]))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._note("assign", partitions)
        self.assigned.update({(tp.topic, tp.partition): tp.offset for tp in partitions})

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._note("unassign", partitions)
        for tp in partitions:
            self.assigned.pop((tp.topic, tp.partition))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._note("pause", partitions)
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._note("resume", partitions)
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def seek(self, partition: TopicPartition) -> None:
        self._note("seek", [partition])

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._note("position", partitions)
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        taken, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        for topic, partition, offset in taken:  # a message: (topic, partition, offset)
            self.positions[(topic, partition)] = offset + 1
        return taken

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.ends is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, self.ends[(tp.topic, tp.partition)]) for tp in partitions]

    def close(self) -> None:
        self.closed = True


def clients() -> tuple[ReaderClients, FakeConsumer, FakeConsumer]:
    main, catch_up = FakeConsumer(), FakeConsumer()
    main.incremental_assign([TopicPartition(TOPIC, 0, 10)])
    return ReaderClients(main, catch_up), main, catch_up  # type: ignore[arg-type]


def test_partitions_taken_start_on_the_catch_up_consumer_and_calls_follow_them() -> None:
    pair, main, catch_up = clients()
    pair.incremental_assign([TopicPartition(TOPIC, 1, 5), TopicPartition(TOPIC, 2, 7)])
    assert catch_up.assigned == {(TOPIC, 1): 5, (TOPIC, 2): 7} and pair.held == {(TOPIC, 1), (TOPIC, 2)}
    pair.pause([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    assert main.paused == {(TOPIC, 0)} and catch_up.paused == {(TOPIC, 1)}
    pair.resume([TopicPartition(TOPIC, 1)])
    assert catch_up.paused == set() and main.paused == {(TOPIC, 0)}
    pair.seek(TopicPartition(TOPIC, 2, 3))
    assert catch_up.calls[-1] == ("seek", [(TOPIC, 2)])
    main.positions[(TOPIC, 0)], catch_up.positions[(TOPIC, 1)] = 11, 6
    answered = pair.position([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    assert sorted((tp.partition, tp.offset) for tp in answered) == [(0, 11), (1, 6)]
    pair.incremental_unassign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    assert main.assigned == {} and catch_up.assigned == {(TOPIC, 2): 7} and pair.held == {(TOPIC, 2)}


def test_hand_over_moves_each_partition_where_the_catch_up_consumer_left_it() -> None:
    pair, main, catch_up = clients()
    pair.incremental_assign([TopicPartition(TOPIC, p, 100) for p in (1, 2, 3)])
    catch_up.positions[(TOPIC, 1)] = 140  # it returned records up to 139
    # partition 2: nothing returned since it was assigned (or sought): where the reader has it
    moved = pair.hand_over({(TOPIC, 1): 140, (TOPIC, 2): 120, (TOPIC, 3): 100}, keep=frozenset({(TOPIC, 3)}))
    assert moved == 2
    assert main.assigned == {(TOPIC, 0): 10, (TOPIC, 1): 140, (TOPIC, 2): 120}
    assert catch_up.assigned == {(TOPIC, 3): 100} and pair.held == {(TOPIC, 3)}  # paused for a drain: kept
    assert main.calls[-1] == ("resume", [(TOPIC, 1), (TOPIC, 2)])  # a pause flag left from an earlier drain
    assert pair.hand_over({}, keep=frozenset({(TOPIC, 3)})) == 0


def test_catch_up_records_are_taken_only_while_it_holds_partitions() -> None:
    pair, _main, catch_up = clients()
    catch_up.queued = [(TOPIC, 1, 0), (TOPIC, 1, 1), (TOPIC, 1, 2)]
    assert pair.consume_catch_up(2) == []
    pair.incremental_assign([TopicPartition(TOPIC, 1, 0)])
    assert pair.consume_catch_up(2) == [(TOPIC, 1, 0), (TOPIC, 1, 1)]


def test_release_all_and_close() -> None:
    pair, main, catch_up = clients()
    pair.incremental_assign([TopicPartition(TOPIC, 1, 0)])
    pair.release_all()
    assert catch_up.assigned == {} and pair.held == set()
    pair.close()
    assert main.closed and catch_up.closed


def test_without_a_catch_up_consumer_everything_stays_on_the_batching_one() -> None:
    main = FakeConsumer()
    pair = ReaderClients(main, None)  # type: ignore[arg-type]
    pair.incremental_assign([TopicPartition(TOPIC, 1, 4)])
    assert main.assigned == {(TOPIC, 1): 4} and pair.held == set()
    assert pair.hand_over({(TOPIC, 1): 4}, frozenset()) == 0 and pair.consume_catch_up(10) == []
    pair.warm([TopicPartition(TOPIC, 1)])  # nothing to connect
    pair.close()
    assert main.closed


def test_read_before_pause_reads_the_revoked_partitions_up_to_their_end_offsets() -> None:
    pair, main, catch_up = clients()
    main.incremental_assign([TopicPartition(TOPIC, 3, 50)])
    main.positions[(TOPIC, 0)] = 15  # partition 3: nothing returned since assigned: where the reader has it
    catch_up.ends = {(TOPIC, 0): 17, (TOPIC, 3): 55}  # partition 3 has nothing new
    catch_up.queued = [(TOPIC, 0, 15), (TOPIC, 0, 16), (TOPIC, 0, 17)]
    read = pair.read_before_pause([(TOPIC, 0), (TOPIC, 3)], {(TOPIC, 0): 12, (TOPIC, 3): 55}, 2)
    assert read == [(TOPIC, 0, 15), (TOPIC, 0, 16)]  # at most max_messages; then at the end offset
    assert main.assigned == {} and catch_up.assigned == {(TOPIC, 0): 15, (TOPIC, 3): 55}
    assert pair.held == {(TOPIC, 0), (TOPIC, 3)}
    assert pair.read_before_pause([(TOPIC, 0)], {}, 10) == []  # held already: nothing to move
    main.incremental_assign([TopicPartition(TOPIC, 4, 7)])
    catch_up.ends = {(TOPIC, 4): 8}
    catch_up.queued = [(TOPIC, 4, 7)]
    started = time.monotonic()
    assert pair.read_before_pause([(TOPIC, 4)], {(TOPIC, 4): 7}, 5, bound_s=5.0) == [(TOPIC, 4, 7)]
    assert time.monotonic() - started < 1.0  # at its end offset: no wait for more


def test_read_before_pause_without_an_answer_reads_until_quiet_or_its_bound() -> None:
    pair, main, catch_up = clients()
    main.incremental_assign([TopicPartition(TOPIC, 3, 50)])
    catch_up.queued = [(TOPIC, 0, 10), (TOPIC, 3, 50)]
    started = time.monotonic()
    read = pair.read_before_pause([(TOPIC, 0), (TOPIC, 3)], {(TOPIC, 0): 10, (TOPIC, 3): 50}, 10, bound_s=5.0)
    assert read == [(TOPIC, 0, 10), (TOPIC, 3, 50)] and time.monotonic() - started < 1.0  # then quiet
    main.incremental_assign([TopicPartition(TOPIC, 5, 0)])
    assert pair.read_before_pause([(TOPIC, 5)], {(TOPIC, 5): 0}, 10, bound_s=0.01) == []  # nothing there: its bound
    assert ReaderClients(main, None).read_before_pause([(TOPIC, 0)], {}, 2) == []  # type: ignore[arg-type]
