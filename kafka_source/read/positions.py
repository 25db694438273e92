"""Blocking client calls about partitions' positions: the watermarks of many partitions in one
batched request, a partition's first offset, and where to read on after the broker answered a
fetch with "offset out of range" (the last two on the reader thread, between two ``consume`` calls).

The one home of watermark reads: the node's lag metrics, ``status``, the chaos probe and the test
and bench helpers all call :func:`high_watermarks` (every partition or an error) or
:func:`answered_high_watermarks` (those that answer)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.read.catch_up import PartitionClient

__all__ = [
    "OutOfRangeResolver", "answered_high_watermarks", "high_watermarks", "low_watermark", "read_on_after_out_of_range",
    "watermarks",
]

#: ListOffsets' special timestamps: the first offset, and the end (the high watermark, or the last
#: stable offset under ``isolation.level=read_committed``, as ``get_watermark_offsets`` answers)
EARLIEST, LATEST = -2, -1

#: ``(tp, read offset, low, high) -> the offset to read on at``, or raises :class:`OffsetOutOfRangeError`
#: (:func:`laminar_kafka.kafka_source.read.startup.resolve_out_of_range`)
OutOfRangeResolver = Callable[[TopicPartitionId, int, int, int], int]


def watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionId], timeout_s: float
) -> dict[TopicPartitionId, tuple[int, int]]:
    """``{tp: (low, high)}`` of ``partitions`` in two requests per leader broker (``offsets_for_times``
    at :data:`EARLIEST` and :data:`LATEST`), where ``get_watermark_offsets`` takes a round trip per
    partition (512 partitions on loopback: 7 ms instead of 260 ms; on a real cluster each round trip
    is a network RTT). Raises ``KafkaException`` when the client fails or any partition has an error
    (e.g. unknown to the client's metadata, or without a leader)."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    lows = _offsets_at(consumer, wanted, EARLIEST, timeout_s)
    highs = _offsets_at(consumer, wanted, LATEST, timeout_s)
    return {tp: (lows[tp], highs[tp]) for tp in wanted}


def high_watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionId], timeout_s: float
) -> dict[TopicPartitionId, int]:
    """``{tp: high}`` of ``partitions`` in one request per leader broker (see :func:`watermarks`)."""
    wanted = sorted(set(partitions))
    return _offsets_at(consumer, wanted, LATEST, timeout_s) if wanted else {}


def answered_high_watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartitionId], timeout_s: float
) -> dict[TopicPartitionId, int]:
    """``{tp: high}`` of the partitions of ``partitions`` that answer; one that fails (no leader now, a
    broker away, unknown after ``timeout_s``) is left out, never raised. One request per partition:
    a batched request (:func:`high_watermarks`) fails whole when a single partition has no leader,
    so an observer of a cluster under faults (the chaos probe) reads them one by one."""
    result: dict[TopicPartitionId, int] = {}
    for tp in sorted(set(partitions)):
        try:
            result[tp] = _partition_watermarks(consumer, tp, timeout_s)[1]
        except KafkaException:
            continue
    return result


def _offsets_at(
    consumer: Consumer, wanted: list[TopicPartitionId], spec: int, timeout_s: float
) -> dict[TopicPartitionId, int]:
    answered = consumer.offsets_for_times([KafkaTopicPartition(t, p, spec) for t, p in wanted], timeout=timeout_s)
    offsets: dict[TopicPartitionId, int] = {}
    for tp in answered:
        if tp.error is not None:
            raise KafkaException(KafkaError(tp.error.code(), f"{tp.topic}:{tp.partition}: {tp.error.str()}"))
        offsets[(tp.topic, tp.partition)] = tp.offset
    return offsets


def low_watermark(consumer: PartitionClient, tp: TopicPartitionId, timeout_s: float) -> int:
    """The partition's first offset (see :func:`_partition_watermarks`)."""
    return _partition_watermarks(consumer, tp, timeout_s)[0]


def _partition_watermarks(consumer: PartitionClient, tp: TopicPartitionId, timeout_s: float) -> tuple[int, int]:
    """``(low, high)`` of one partition, asked of its leader (never the client's cache). A partition
    added to its topic moments ago may be unknown to the client's metadata cache ("Local: Unknown
    partition"): the topic's metadata is read again until it is known, within ``timeout_s``. Raises
    ``KafkaException`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition(*tp), timeout=timeout_s, cached=False)
            return low, high
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
            consumer.list_topics(tp[0], timeout=timeout_s)
            time.sleep(0.05)


def read_on_after_out_of_range(
    consumer: PartitionClient, tp: TopicPartitionId, offset: int, timeout_s: float, resolve: OutOfRangeResolver | None,
    answer: KafkaError,
) -> int:
    """The broker answered a fetch of ``tp`` at ``offset`` with "out of range" (``answer``), which
    stops the partition's fetching (``auto.offset.reset=error``; a ``seek`` is refused in that
    state): read its watermarks, ask ``resolve`` where to read on, and assign the partition again there.

    Returns the offset reading goes on at. Raises :class:`OffsetOutOfRangeError` when ``resolve``
    refuses, when there is no ``resolve`` (naming the retained range), or when the watermarks cannot
    be read (naming the broker's answer).
    """
    try:
        low, high = consumer.get_watermark_offsets(KafkaTopicPartition(*tp), timeout=timeout_s, cached=False)
    except KafkaException as exc:
        raise OffsetOutOfRangeError(
            f"{tp[0]}:{tp[1]}: read offset {offset} is out of the retained range ({answer.str()}; "
            f"the partition's watermarks could not be read: {exc.args[0].str()})",
            topic=tp[0], partition=tp[1], offset=offset, cause=answer,
        ) from exc
    if resolve is None:
        raise OffsetOutOfRangeError(
            f"{tp[0]}:{tp[1]}: read offset {offset} is outside the retained range [{low}, {high}]",
            topic=tp[0], partition=tp[1], offset=offset, low=low, high=high,
        )
    resumed = resolve(tp, offset, low, high)
    consumer.incremental_unassign([KafkaTopicPartition(*tp)])
    consumer.incremental_assign([KafkaTopicPartition(tp[0], tp[1], resumed)])
    return resumed
