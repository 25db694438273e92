"""The reader's two consumers: the batching one, and a second one that fetches newly taken
partitions at once.

``batch-wait-ms`` makes the broker hold each fetch until ``fetch.min.bytes`` arrive or the wait
passes, and librdkafka keeps one fetch in flight per broker connection: a partition assigned to
the batching consumer joins only the fetch after the one in flight, and that one waits out the
batch wait too (a just-moved partition's backlog is far below ``fetch.min.bytes``). Measured with
a bare consumer on a trickle (``fetch.min.bytes`` 256 KiB, ``fetch.wait.max.ms`` 250): first
records 506-514 ms after ``incremental_assign``. librdkafka fixes both settings when the client
is created, and no call cuts a fetch in flight short.

So every partition taken (acquired in a handoff, resumed after an aborted drain, discovered, or
assigned again after an out-of-range answer) is assigned to the *catch-up* consumer instead:
``fetch.min.bytes`` 1 and a short ``fetch.wait.max.ms``
(:data:`~laminar_kafka.kafka_source.config.source_config.CATCH_UP_WAIT_MS`), so its fetch
is answered as soon as the partition has records (5-6 ms in the same measurement). Once the
reader's fresh window passes, :meth:`ReaderClients.hand_over` moves those partitions to the
batching consumer at the catch-up consumer's positions: from then on they cost what every other
partition does. The catch-up consumer holds nothing most of the time, and then sends no fetch.

:class:`ReaderClients` routes each partition call (pause, resume, seek, position, unassign) to the
consumer that holds the partition; a partition is held by exactly one of them at a time, so its
records keep their order. Used by the reader thread alone.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

__all__ = ["PartitionClient", "QUIET_S", "READ_BEFORE_PAUSE_S", "ReaderClients"]

#: :meth:`ReaderClients.read_before_pause` stops at a ``consume`` wait this long that brings nothing
#: (the catch-up consumer's fetch answers within milliseconds when the broker has records) ...
QUIET_S = 0.005
#: ``offsets_for_times``' timestamp of the end offset
LATEST = -1
#: ... or after this long (under steady production records keep coming: what the broker held at the
#: drain arrives in the first fetches)
READ_BEFORE_PAUSE_S = 0.03


def _key(tp: KafkaTopicPartition) -> TopicPartitionId:
    return (tp.topic, tp.partition)


class ReaderClients:
    """The batching consumer (``main``) and the catch-up one (``catch_up``; None when
    ``batch-wait-ms`` is 0: the batching consumer then answers at once itself).

    It offers the partition calls of a ``Consumer`` that the reader's assignment code makes, routed
    to the consumer holding each partition; ``incremental_assign`` goes to the catch-up consumer.
    Watermark and metadata requests go to ``main``.
    """

    def __init__(self, main: Consumer, catch_up: Consumer | None) -> None:
        self.main = main
        self.catch_up = catch_up
        #: the partitions the catch-up consumer holds
        self.held: set[TopicPartitionId] = set()

    def _split(self, partitions: Iterable[KafkaTopicPartition]) -> tuple[list[KafkaTopicPartition],
                                                                        list[KafkaTopicPartition]]:
        """``partitions`` as (those of ``main``, those of ``catch_up``)."""
        on_main: list[KafkaTopicPartition] = []
        on_catch_up: list[KafkaTopicPartition] = []
        for tp in partitions:
            (on_catch_up if _key(tp) in self.held else on_main).append(tp)
        return on_main, on_catch_up

    # -- the partition calls of a Consumer, routed -----------------------------------------------

    def position(self, partitions: list[KafkaTopicPartition]) -> list[KafkaTopicPartition]:
        on_main, on_catch_up = self._split(partitions)
        result = self.main.position(on_main) if on_main else []
        if on_catch_up and self.catch_up is not None:
            result = result + self.catch_up.position(on_catch_up)
        return result

    def pause(self, partitions: list[KafkaTopicPartition]) -> None:
        on_main, on_catch_up = self._split(partitions)
        if on_main:
            self.main.pause(on_main)
        if on_catch_up and self.catch_up is not None:
            self.catch_up.pause(on_catch_up)

    def resume(self, partitions: list[KafkaTopicPartition]) -> None:
        on_main, on_catch_up = self._split(partitions)
        if on_main:
            self.main.resume(on_main)
        if on_catch_up and self.catch_up is not None:
            self.catch_up.resume(on_catch_up)

    def seek(self, partition: KafkaTopicPartition) -> None:
        if _key(partition) in self.held and self.catch_up is not None:
            self.catch_up.seek(partition)
        else:
            self.main.seek(partition)

    def incremental_unassign(self, partitions: list[KafkaTopicPartition]) -> None:
        on_main, on_catch_up = self._split(partitions)
        if on_main:
            self.main.incremental_unassign(on_main)
        if on_catch_up and self.catch_up is not None:
            self.catch_up.incremental_unassign(on_catch_up)
            self.held.difference_update(map(_key, on_catch_up))

    def incremental_assign(self, partitions: list[KafkaTopicPartition]) -> None:
        """Assign ``partitions`` (held by neither consumer) to the catch-up consumer."""
        if self.catch_up is None:
            self.main.incremental_assign(partitions)
            return
        self.catch_up.incremental_assign(partitions)
        self.held.update(map(_key, partitions))

    def get_watermark_offsets(self, partition: KafkaTopicPartition, timeout: float = -1,
                              cached: bool = False) -> Any:
        return self.main.get_watermark_offsets(partition, timeout=timeout, cached=cached)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self.main.list_topics(topic, timeout=timeout)

    # -- the catch-up consumer's own steps -------------------------------------------------------

    def warm(self, partitions: list[KafkaTopicPartition], topics: tuple[str, ...] = (), timeout_s: float = 1.0) -> None:
        """Connect the catch-up consumer to the leader of the first of ``partitions`` (none: of the
        first partition of ``topics``' first) ahead of its first use (a watermark request, bounded by
        ``timeout_s``): its first fetch otherwise waited about 330 ms for the connection. Best effort
        (when the broker does not answer there is nothing to read anyway)."""
        candidates = partitions or [KafkaTopicPartition(topic, 0) for topic in topics]
        if self.catch_up is None or not candidates:
            return
        partition = candidates[0]
        try:
            self.catch_up.get_watermark_offsets(partition, timeout=timeout_s, cached=False)
        except KafkaException as exc:
            logger.info("the catch-up consumer could not reach %s yet (%s)", partition.topic, exc)

    def hand_over(self, known: Mapping[TopicPartitionId, int], keep: frozenset[TopicPartitionId]) -> int:
        """Move every held partition but ``keep`` (paused for a drain: released or resumed later)
        to the batching consumer, at the catch-up consumer's position of it (after the last record
        it returned, or past transaction markers), else at ``known`` (where the reader has it).

        Records of a moved partition then come from the batching consumer alone, from that offset:
        none twice, none skipped. Returns how many were moved.
        """
        if self.catch_up is None:
            return 0
        moving = [KafkaTopicPartition(*tp) for tp in sorted(self.held - keep)]
        if not moving:
            return 0
        at = {_key(tp): tp.offset for tp in self.catch_up.position(moving)}
        assignment = [
            KafkaTopicPartition(tp.topic, tp.partition, at[_key(tp)] if at.get(_key(tp), -1) >= 0 else known[_key(tp)])
            for tp in moving
        ]
        self.catch_up.incremental_unassign(moving)
        self.held.difference_update(map(_key, moving))
        self.main.incremental_assign(assignment)
        # librdkafka keeps a partition's pause flag across unassign/assign (a partition paused for
        # an earlier drain of this consumer would never fetch again).
        self.main.resume(assignment)
        return len(moving)

    def read_before_pause(self, partitions: Iterable[TopicPartitionId], known: Mapping[TopicPartitionId, int],
                          max_messages: int, bound_s: float = READ_BEFORE_PAUSE_S) -> list[Any]:
        """Move ``partitions`` (of the batching consumer) to the catch-up consumer where the batching
        one left them (else at ``known``), and return what the catch-up consumer then reads: until
        each partition's position reaches its end offset as the broker answers now (one batched
        request; when it does not answer within ``bound_s``, until a wait of :data:`QUIET_S` brings
        nothing), ``max_messages``, or ``bound_s`` after the request.

        A drain pauses the partitions it revokes right after this, so their last records before the
        cut are those the broker held at the drain, not those of the last batched fetch (up to
        ``batch-wait-ms`` old): the gap before a handoff is no longer the batch wait. Nothing to do
        without a catch-up consumer (no batch wait).
        """
        if self.catch_up is None:
            return []
        moving = [KafkaTopicPartition(*tp) for tp in sorted(set(partitions) - self.held)]
        if not moving:
            return []
        at = {_key(tp): tp.offset for tp in self.main.position(moving)}
        start = {_key(tp): at[_key(tp)] if at.get(_key(tp), -1) >= 0 else known[_key(tp)] for tp in moving}
        assignment = [KafkaTopicPartition(t, p, offset) for (t, p), offset in start.items()]
        self.main.incremental_unassign(moving)
        self.catch_up.incremental_assign(assignment)
        self.catch_up.resume(assignment)  # a pause flag kept from an earlier drain of this consumer
        self.held.update(start)
        ends = self._end_offsets(moving, bound_s)
        deadline = time.monotonic() + bound_s
        messages: list[Any] = []
        while len(messages) < max_messages and time.monotonic() < deadline:
            if ends is not None and self._reached(moving, start, ends):
                break
            got = self.catch_up.consume(num_messages=max_messages - len(messages), timeout=QUIET_S)
            if not got and messages and ends is None:
                break
            messages += got
        return messages

    def _end_offsets(self, partitions: list[KafkaTopicPartition], timeout_s: float) -> dict[TopicPartitionId, int] | None:
        """Each partition's end offset (the high watermark, or the last stable offset under
        ``read_committed``) in one request per leader; None when the broker does not answer in time."""
        assert self.catch_up is not None
        try:
            answered = self.catch_up.offsets_for_times(
                [KafkaTopicPartition(tp.topic, tp.partition, LATEST) for tp in partitions], timeout=timeout_s)
        except KafkaException:
            return None
        if any(tp.error is not None for tp in answered):
            return None
        return {_key(tp): tp.offset for tp in answered}

    def _reached(self, moving: list[KafkaTopicPartition], start: Mapping[TopicPartitionId, int],
                 ends: Mapping[TopicPartitionId, int]) -> bool:
        """Whether the catch-up consumer's position of each of ``moving`` is at ``ends`` (a position is
        negative until a record was returned: then where it started)."""
        assert self.catch_up is not None
        return all(max(tp.offset, start[_key(tp)]) >= ends[_key(tp)] for tp in self.catch_up.position(moving))

    def consume_catch_up(self, num_messages: int) -> list[Any]:
        """What the catch-up consumer has queued (without waiting); nothing while it holds nothing."""
        if self.catch_up is None or not self.held:
            return []
        return self.catch_up.consume(num_messages=num_messages, timeout=0)

    def release_all(self) -> None:
        """Unassign every held partition from the catch-up consumer: the replacement of a batching
        consumer that reaches no broker takes them all, at the positions the reader reported."""
        if self.catch_up is None or not self.held:
            return
        self.catch_up.incremental_unassign([KafkaTopicPartition(*tp) for tp in sorted(self.held)])
        self.held.clear()

    def close(self) -> None:
        """Close both consumers (the catch-up one best effort, logged); raises what closing ``main`` raises."""
        if self.catch_up is not None:
            try:
                self.catch_up.close()
            except Exception:  # closing is best effort
                logger.warning("closing the catch-up kafka consumer failed", exc_info=True)
        self.main.close()


#: What the reader's assignment code calls partition methods on: a consumer, or the reader's two.
PartitionClient = Consumer | ReaderClients
