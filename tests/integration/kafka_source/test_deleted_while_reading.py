"""Records deleted (by retention, or delete-records) ahead of a source that is still reading: the
broker answers its next fetch with "offset out of range". By default the source fails naming the
partition, the offsets and ``fail-on-data-loss``; with ``fail-on-data-loss=false`` it reads on at
the oldest offset Kafka still holds, its cursor moves past the lost offsets, and it counts them.
A topic deleted and re-created under a running source fails it, naming the re-creation."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from laminar_kafka.kafka_source import KafkaSource, OffsetOutOfRangeError
from tests import support
from tests.integration.kafka_source.helpers import (
    assert_batch_cursors,
    delete_records_before,
    poll_until,
    props,
    row_count,
    rows,
    start_source,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RECORDS, DELETED_UP_TO, READ_FIRST = 3000, 2500, 50
#: small fetches, so the client has fetched far less than DELETED_UP_TO when the records go
SMALL_FETCHES = {"max-fetched-bytes": "65536", "kafka.max.partition.fetch.bytes": "65536"}


def _topic(kafka, unique: Callable[[str], str], name: str) -> str:  # type: ignore[no-untyped-def]
    topic = unique(name)
    support.create_topic(kafka.bootstrap, topic, 1)
    support.produce(kafka.bootstrap, topic, [b"%06d" % i + b"x" * 1000 for i in range(RECORDS)], partition=0)
    return topic


async def _read_some(source: KafkaSource) -> list[int]:
    first = await poll_until(source, row_count(READ_FIRST), max_records=READ_FIRST)
    return [offset for _, offset, _ in rows(first)]


async def test_records_deleted_ahead_of_the_reader_fail_it_naming_the_setting(kafka, unique) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, unique, "deleted-ahead")
    source = await start_source(props(kafka.bootstrap, topic, unique("g"), **SMALL_FETCHES))
    try:
        await _read_some(source)
        delete_records_before(kafka.bootstrap, topic, 0, DELETED_UP_TO)
        with pytest.raises(OffsetOutOfRangeError, match=rf"read offset \d+ of {topic}:0 is below the low watermark "
                           rf"{DELETED_UP_TO} \(records were deleted by retention\).*fail-on-data-loss=false"):
            await poll_until(source, lambda _batches: False, timeout=30)
    finally:
        await source.close()


async def test_with_fail_on_data_loss_false_the_reader_reads_on_at_the_oldest_offset(kafka, unique) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, unique, "deleted-ahead-ok")
    properties = props(kafka.bootstrap, topic, unique("g"), **SMALL_FETCHES, **{"fail-on-data-loss": "false"})
    source = await start_source(properties)
    try:
        read = await _read_some(source)
        delete_records_before(kafka.bootstrap, topic, 0, DELETED_UP_TO)
        batches = await poll_until(source, lambda _b: source.checkpoint().next_offset(topic, 0) == RECORDS, timeout=30)
        offsets = read + [offset for _, offset, _ in rows(batches)]
        resumed_at = offsets.index(DELETED_UP_TO)
        assert offsets == list(range(resumed_at)) + list(range(DELETED_UP_TO, RECORDS))  # no gap but the lost one
        assert resumed_at < DELETED_UP_TO
        assert source.metrics.offsets_lost == DELETED_UP_TO - resumed_at and source.metrics.offset_resets == 1
        assert_batch_cursors(batches, topic)
    finally:
        await source.close()


async def test_a_topic_re_created_under_the_reader_fails_it_naming_the_re_creation(kafka, unique) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, unique, "recreated")
    properties = props(kafka.bootstrap, topic, unique("g"), **SMALL_FETCHES, **{"fail-on-data-loss": "false"})
    source = await start_source(properties)
    try:
        await _read_some(source)
        support.delete_topic(kafka.bootstrap, topic)
        support.create_topic(kafka.bootstrap, topic, 1)
        support.produce(kafka.bootstrap, topic, [b"new"] * 10, partition=0)
        with pytest.raises(OffsetOutOfRangeError, match=rf"{topic}:0 now ends at offset 10, below the read offset "
                           r"\d+: the topic was deleted and re-created"):
            await poll_until(source, lambda _batches: False, timeout=60)
    finally:
        await source.close()
