"""KafkaSource against a real Kafka: round trip, exact resume, startup modes, retention."""
from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from laminar_kafka.kafka_source import (
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    OffsetOutOfRangeError,
    SourceCheckpoint,
    SourcePosition,
    SourceStart,
)
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from tests import support
from tests.integration.kafka_source.helpers import (
    assert_batch_cursors,
    delete_records_before,
    offsets_by_partition,
    poll_until,
    props,
    row_count,
    rows,
    start_source,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_round_trip_100k_records_over_8_partitions(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-roundtrip")
    support.create_topic(kafka.bootstrap, topic, 8)
    values = [b"value-%06d" % i for i in range(100_000)]
    support.produce(kafka.bootstrap, topic, values)
    source = await start_source(props(kafka.bootstrap, topic, unique("g")))
    try:
        batches = await poll_until(source, row_count(100_000), max_records=7_000, timeout=60)
        emitted = rows(batches)
        assert len(emitted) == 100_000
        assert sorted(v for _, _, v in emitted) == values
        by_partition = offsets_by_partition(emitted)
        ends = support.high_watermarks(kafka.bootstrap, topic)
        assert set(by_partition) == set(range(8))
        for partition, offsets in by_partition.items():
            assert offsets == list(range(ends[partition])), f"partition {partition} not contiguous"
        assert_batch_cursors(batches, topic)
        expected = SourceCheckpoint.from_partitions({(topic, p): end for p, end in ends.items()}, connector=CONNECTOR_NAME)
        assert batches[-1].checkpoint == expected
        assert source.checkpoint() == expected
        assert source.metrics.records == 100_000
        assert await source.poll_batch(1_000) is None
    finally:
        await source.close()


async def test_close_and_resume_is_exact_continuation(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-resume")
    support.create_topic(kafka.bootstrap, topic, 4)
    support.produce(kafka.bootstrap, topic, [b"r%d" % i for i in range(2_000)])
    properties = props(kafka.bootstrap, topic, unique("g"))
    first = await start_source(properties)
    try:
        head = await poll_until(first, row_count(700), max_records=100)
        checkpoint = first.checkpoint()
        assert checkpoint == head[-1].checkpoint
    finally:
        await first.close()
    encoded = checkpoint.to_bytes()
    second = await start_source(properties, SourceCheckpoint.from_bytes(encoded), epoch=7)
    try:
        assert second.checkpoint() == checkpoint  # the position is installed before any record
        tail = await poll_until(second, row_count(2_000 - 700), max_records=333)
    finally:
        await second.close()
    emitted = rows(head) + rows(tail)
    assert len(emitted) == 2_000
    assert len({(p, o) for p, o, _ in emitted}) == 2_000  # no duplicate
    tail_first = {}
    for partition, offset, _ in rows(tail):
        tail_first.setdefault(partition, offset)
    for partition, offset in tail_first.items():
        assert offset == checkpoint.next_offset(topic, partition)  # continuation starts at the cursor


async def test_checkpoint_before_first_record(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-early-cp")
    support.create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"x"] * 30)
    ends = support.high_watermarks(kafka.bootstrap, topic)
    earliest = await start_source(props(kafka.bootstrap, topic, unique("g")))
    try:
        assert earliest.checkpoint() == SourceCheckpoint.from_partitions({(topic, p): 0 for p in range(3)}, connector=CONNECTOR_NAME)
        assert earliest.try_checkpoint() == earliest.checkpoint()
    finally:
        await earliest.close()
    latest_props = props(kafka.bootstrap, topic, unique("g"), startup_mode="latest")
    latest = await start_source(latest_props)
    try:
        pinned = latest.checkpoint()
        assert pinned == SourceCheckpoint.from_partitions({(topic, p): e for p, e in ends.items()}, connector=CONNECTOR_NAME)
        support.produce(kafka.bootstrap, topic, [b"after-%d" % i for i in range(9)])
        batches = await poll_until(latest, row_count(9))
        assert sorted(v for _, _, v in rows(batches)) == sorted(b"after-%d" % i for i in range(9))
    finally:
        await latest.close()
    # Recovery from the pinned checkpoint never re-resolves "latest": it reads what came after it.
    resumed = await start_source(latest_props, pinned)
    try:
        batches = await poll_until(resumed, row_count(9))
        assert sorted(v for _, _, v in rows(batches)) == sorted(b"after-%d" % i for i in range(9))
    finally:
        await resumed.close()


async def test_startup_modes(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-modes")
    support.create_topic(kafka.bootstrap, topic, 1)
    producer = support.producer(kafka.bootstrap)
    base_ts = int(time.time() * 1000) - 600_000  # recent: older records fall to retention
    for i in range(20):
        producer.produce(topic, value=b"m%d" % i, partition=0, timestamp=base_ts + i * 1000)
    assert producer.flush(30) == 0

    async def first_offset(**extra: str) -> tuple[int, int]:
        source = await start_source(props(kafka.bootstrap, topic, unique("g"), **extra))
        try:
            start = source.checkpoint().next_offset(topic, 0)
            if start == 20:
                return start, -1
            batches = await poll_until(source, row_count(1), max_records=1)
            return start, rows(batches)[0][1]
        finally:
            await source.close()

    assert await first_offset() == (0, 0)
    assert await first_offset(startup_mode="latest") == (20, -1)
    assert await first_offset(
        startup_mode="timestamp", startup_timestamp_ms=str(base_ts + 7_500)
    ) == (8, 8)
    assert await first_offset(
        startup_mode="timestamp", startup_timestamp_ms=str(base_ts + 999_999)
    ) == (20, -1)
    assert await first_offset(
        startup_mode="specific-offsets", **{"startup-specific-offsets": f"{topic}:0:13"}
    ) == (13, 13)


async def test_resume_below_retention(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-retention")
    support.create_topic(kafka.bootstrap, topic, 1, config={"segment.bytes": "1048576"})
    support.produce(kafka.bootstrap, topic, [b"d%d" % i for i in range(100)], partition=0)
    delete_records_before(kafka.bootstrap, topic, 0, 50)
    properties = props(kafka.bootstrap, topic, unique("g"))
    stale = SourceCheckpoint.from_partitions({(topic, 0): 10})
    for delivery in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE):
        source = KafkaSource()
        with pytest.raises(OffsetOutOfRangeError) as info:
            await source.start(
                SourceStart(
                    ConnectorConfig("kafka", properties),
                    SourcePosition.Resume(_attempt(), stale),
                    delivery,
                )
            )
        assert (info.value.offset, info.value.low) == (10, 50)
        await source.close()
    best_effort = await start_source(properties, stale, delivery=DeliveryGuarantee.BEST_EFFORT)
    try:
        assert best_effort.metrics.offset_resets == 1
        assert best_effort.checkpoint().next_offset(topic, 0) == 50
        batches = await poll_until(best_effort, row_count(50))
        assert [o for _, o, _ in rows(batches)] == list(range(50, 100))
    finally:
        await best_effort.close()


def _attempt():
    from laminar_kafka.kafka_source import CheckpointAttempt

    return CheckpointAttempt(3, 3)


async def test_a_small_fetch_bound_does_not_stall_a_backlog(kafka, unique: Callable[[str], str]) -> None:
    # With max-fetched-bytes far below the backlog the client's queue is full most of the time;
    # librdkafka then postponed the next fetch by its default fetch.queue.backoff.ms (1 s), so
    # this read took 38 s. The source sets 10 ms: about 2 s.
    topic = unique("src-backlog")
    support.create_topic(kafka.bootstrap, topic, 2)
    values = [b"%06d" % i + b"x" * 1000 for i in range(40_000)]
    support.produce(kafka.bootstrap, topic, values)
    source = await start_source(props(kafka.bootstrap, topic, unique("g"), **{"max-fetched-bytes": str(128 * 1024)}))
    try:
        started = time.monotonic()
        batches = await poll_until(source, row_count(40_000), max_records=1_000, timeout=60)
        elapsed = time.monotonic() - started
        assert sorted(v for _, _, v in rows(batches)) == values
        assert elapsed < 20, f"40 MB behind a 128 KiB fetch bound took {elapsed:.1f} s"
    finally:
        await source.close()
