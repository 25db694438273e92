"""The reader thread's partitions, and the commands that change them.

:class:`ReaderPartitions` is what the reader thread knows of its assignment: the partitions
assigned, the position read of each, the positions moved by seeks and not reported yet, and the
partitions *blocked* (paused for a drain: their records are dropped and their positions never
reported). Its commands are the drain pause (:meth:`ReaderPartitions.pause`), the assignment
change of an ownership move (:meth:`ReaderPartitions.change`) and the assignment of new
partitions (:meth:`ReaderPartitions.add`). Each runs on the reader thread between two
``consume`` calls with the consumer passed in, and returns the FIFO marker that announces it; the
reader puts the marker, so it follows every record fetched before the change.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.read.catch_up import PartitionClient
from laminar_kafka.kafka_source.read.fifo import AssignmentApplied, DrainBoundary, PartitionsAssigned
from laminar_kafka.kafka_source.read.positions import low_watermark

__all__ = ["ReaderPartitions"]


class ReaderPartitions:
    """The assignment, positions and blocked partitions of one reader thread (used by it alone)."""

    def __init__(self, assigned: Mapping[TopicPartitionId, int]) -> None:
        #: the partitions assigned to the consumer (the values are reused for position requests)
        self.assigned: dict[TopicPartitionId, KafkaTopicPartition] = {tp: KafkaTopicPartition(*tp) for tp in assigned}
        #: the position last read of each assigned partition
        self.positions: dict[TopicPartitionId, int] = dict(assigned)
        #: positions moved without a record (reading resumed past an out-of-range offset), reported
        #: with the next chunk
        self.jumps: dict[TopicPartitionId, int] = {}
        #: partitions whose records are dropped and positions not reported (paused for a drain)
        self.blocked: frozenset[TopicPartitionId] = frozenset()

    def fetching(self) -> list[TopicPartitionId]:
        """The assigned partitions that are not blocked."""
        return [tp for tp in self.assigned if tp not in self.blocked]

    # -- positions ------------------------------------------------------------------------------

    def read_positions(self, consumer: PartitionClient, partitions: list[KafkaTopicPartition]) -> dict[TopicPartitionId, int]:
        """Read ``consumer``'s positions of ``partitions`` into :attr:`positions`; returns those
        that moved (blocked partitions excepted: their positions are not reported)."""
        moved: dict[TopicPartitionId, int] = {}
        if not partitions:
            return moved
        blocked = self.blocked
        for tp in consumer.position(partitions):
            if tp.offset < 0:
                continue
            key = (tp.topic, tp.partition)
            if blocked and key in blocked:
                continue
            if self.positions.get(key) != tp.offset:
                self.positions[key] = tp.offset
                moved[key] = tp.offset
        return moved

    def read_all_positions(self, consumer: PartitionClient) -> dict[TopicPartitionId, int]:
        """:meth:`read_positions` of every assigned partition (a sweep)."""
        return self.read_positions(consumer, list(self.assigned.values()))

    def read_positions_of(self, consumer: PartitionClient, parts: list[Records]) -> dict[TopicPartitionId, int]:
        """:meth:`read_positions` of the assigned partitions ``parts`` has records of."""
        touched: set[TopicPartitionId] = set()
        for part in parts:
            if isinstance(part.topics, str):
                topic = part.topics
                touched.update((topic, p) for p in set(part.partitions))
            else:
                touched.update(zip(part.topics, part.partitions, strict=True))
        return self.read_positions(consumer, [self.assigned[tp] for tp in touched if tp in self.assigned])

    def with_jumps(self, moved: dict[TopicPartitionId, int]) -> dict[TopicPartitionId, int]:
        """``moved`` with the positions set by seeks since the last call (:attr:`jumps`, then cleared)."""
        if self.jumps:
            for key, offset in self.jumps.items():
                if key in self.assigned and self.positions.get(key) != offset:
                    self.positions[key] = moved[key] = offset
            self.jumps.clear()
        return moved

    # -- commands -------------------------------------------------------------------------------

    def pause(self, consumer: PartitionClient, round: AssignmentDrainId, revoked: frozenset[TopicPartitionId]) -> DrainBoundary:
        """Pause ``revoked``, read their positions and block them; returns the boundary marker
        holding those positions (the cut).

        Post: no record of a revoked partition is read and no position reported for one until
        :meth:`change` releases or resumes it.
        """
        if revoked:
            consumer.pause([KafkaTopicPartition(t, p) for t, p in sorted(revoked)])
            self.read_positions(consumer, [self.assigned[tp] for tp in sorted(revoked) if tp in self.assigned])
        self.blocked = self.blocked | revoked
        return DrainBoundary(round, MappingProxyType({tp: self.positions[tp] for tp in sorted(revoked)}))

    def change(
        self,
        consumer: PartitionClient,
        op_id: int,
        release: frozenset[TopicPartitionId],
        acquire: Mapping[TopicPartitionId, int | None],
        resume: Mapping[TopicPartitionId, int],
        timeout_s: float,
    ) -> AssignmentApplied:
        """Unassign ``release``; seek each partition of ``resume`` to its offset and resume it;
        assign ``acquire`` at its offsets (``None``: the low watermark, read within ``timeout_s``).
        Returns the marker naming what was released, acquired and resumed."""
        if release:
            released = [KafkaTopicPartition(t, p) for t, p in sorted(release)]
            # Resumed first: a partition unassigned while paused (for a drain) and assigned
            # again later fetched nothing for about a second at times (librdkafka 2.16,
            # reproduced outside the source); resumed before it is released, never.
            consumer.resume(released)
            consumer.incremental_unassign(released)
            for tp in release:
                self.assigned.pop(tp, None)
                self.positions.pop(tp, None)
            self.blocked = self.blocked - release
        if resume:
            for (topic, partition), offset in sorted(resume.items()):
                consumer.seek(KafkaTopicPartition(topic, partition, offset))
            consumer.resume([KafkaTopicPartition(t, p) for t, p in sorted(resume)])
            self.positions.update(resume)
            self.blocked = self.blocked - frozenset(resume)
        offsets: dict[TopicPartitionId, int] = {}
        for tp, at in sorted(acquire.items()):
            offsets[tp] = low_watermark(consumer, tp, timeout_s) if at is None else at
        if offsets:
            assignment = [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()]
            consumer.incremental_assign(assignment)
            # librdkafka keeps a partition's pause flag across unassign/assign: a partition
            # paused for an earlier drain of this consumer would otherwise never fetch again.
            consumer.resume(assignment)
            for tp, offset in offsets.items():
                self.assigned[tp] = KafkaTopicPartition(*tp)
                self.positions[tp] = offset
            self.blocked = self.blocked - frozenset(offsets)
        return AssignmentApplied(op_id, frozenset(release), MappingProxyType(offsets), MappingProxyType(dict(resume)))

    def add(self, consumer: PartitionClient, found: Iterable[TopicPartitionId], timeout_s: float) -> PartitionsAssigned | None:
        """Assign each partition of ``found`` not held yet at its low watermark (read within
        ``timeout_s``); returns the marker announcing them, or None when every one was held."""
        offsets: dict[TopicPartitionId, int] = {}
        for tp in sorted(set(found) - set(self.assigned)):
            offsets[tp] = low_watermark(consumer, tp, timeout_s)
        if not offsets:
            return None
        consumer.incremental_assign([KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()])
        for tp, offset in offsets.items():
            self.assigned[tp] = KafkaTopicPartition(*tp)
            self.positions[tp] = offset
        return PartitionsAssigned(offsets)
