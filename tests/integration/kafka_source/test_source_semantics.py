"""KafkaSource against a real Kafka: transactions, advisory commits, bad records, new partitions."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from laminar_kafka.kafka_source import (
    DecodeError,
    DeliveryGuarantee,
    ErrorRateExceededError,
    KafkaSource,
    SourceCheckpoint,
)
from tests import support
from tests.integration.kafka_source.helpers import (
    offsets_by_partition,
    poll_until,
    props,
    row_count,
    rows,
    start_source,
    transactional_producer,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_transactions_aborted_records_never_emitted_and_resume_past_markers(
    kafka, unique: Callable[[str], str]
) -> None:
    topic = unique("src-txn")
    support.create_topic(kafka.bootstrap, topic, 1)
    producer = transactional_producer(kafka.bootstrap, unique("txn"))
    expected: list[bytes] = []
    for txn in range(6):
        producer.begin_transaction()
        batch = [b"txn%d-%d" % (txn, i) for i in range(10)]
        for value in batch:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0  # the aborted records reach the log too
        if txn % 2 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected.extend(batch)
    end = support.high_watermarks(kafka.bootstrap, topic)[0]
    assert end == 66  # 60 records + 6 markers
    properties = props(kafka.bootstrap, topic, unique("g"))

    source = await start_source(properties)
    try:
        batches = await poll_until(source, row_count(30), max_records=10)
        assert [v for _, _, v in rows(batches)] == expected
        first_cursor = batches[0].checkpoint
        # The cursor after the last committed record lies past the trailing markers.
        await poll_until(
            source, lambda _: source.checkpoint().next_offset(topic, 0) == end, timeout=15
        )
        final = source.checkpoint()
    finally:
        await source.close()
    assert final.next_offset(topic, 0) == end

    # Resume from the cursor after the first transaction: exactly the committed rest, no re-read.
    resumed = await start_source(properties, first_cursor)
    try:
        batches = await poll_until(resumed, row_count(20), max_records=7)
        assert [v for _, _, v in rows(batches)] == expected[10:]
    finally:
        await resumed.close()

    # Resume from the final cursor: nothing to read, and the cursor neither stalls nor regresses.
    at_end = await start_source(properties, final)
    try:
        assert at_end.checkpoint() == final
        assert await at_end.poll_batch(100) is None
        assert at_end.checkpoint() == final
        # No sleep-then-assert-nothing: the record produced next must be the very first row read,
        # at exactly the resumed cursor, which proves nothing was read before it.
        producer.begin_transaction()
        producer.produce(topic, value=b"later", partition=0)
        producer.commit_transaction(30)
        batches = await poll_until(at_end, row_count(1))
        assert [(o, v) for _, o, v in rows(batches)] == [(end, b"later")]
    finally:
        await at_end.close()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


async def test_advisory_offsets_visible_and_never_backwards(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-commit")
    group = unique("g")
    support.create_topic(kafka.bootstrap, topic, 2)
    support.produce(kafka.bootstrap, topic, [b"c%d" % i for i in range(200)])
    properties = props(kafka.bootstrap, topic, group)
    source = await start_source(properties)
    try:
        batches = await poll_until(source, row_count(100), max_records=50)
        early = batches[0].checkpoint
        middle = source.checkpoint()
        await source.notify_epoch_committed(1, SourceCheckpoint.empty())
        assert group_offsets(kafka.bootstrap, group, topic, 2) == {}
        await source.notify_epoch_committed(2, middle)
        expected = {p: middle.next_offset(topic, p) for p in range(2)}
        assert group_offsets(kafka.bootstrap, group, topic, 2) == expected
        await source.notify_epoch_committed(2, middle)  # idempotent retry
        await source.notify_epoch_committed(1, early)  # older: must not move backwards
        assert group_offsets(kafka.bootstrap, group, topic, 2) == expected
        await poll_until(source, row_count(100), max_records=50)
        final = source.checkpoint()
        await source.notify_epoch_committed(3, final)
        assert group_offsets(kafka.bootstrap, group, topic, 2) == {p: final.next_offset(topic, p) for p in range(2)}
        assert source.metrics.commit_failures == 0
    finally:
        await source.close()
    # A new generation reads the group's offsets once and still never moves them backwards.
    again = await start_source(properties, early)
    try:
        await again.notify_epoch_committed(4, early)
        assert group_offsets(kafka.bootstrap, group, topic, 2) == {p: final.next_offset(topic, p) for p in range(2)}
    finally:
        await again.close()


JSON_PROPS = {"format": "json", "json-schema": "id:int64,name:string"}


def produce_with_bad(bootstrap: str, topic: str) -> None:
    values = [b'{"id":%d,"name":"n%d"}' % (i, i) for i in range(10)]
    values[4] = b"{not json"
    values[7] = b'{"id":"seven"}'
    support.produce(bootstrap, topic, values, partition=0)


@pytest.mark.parametrize("delivery", [DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE])
async def test_bad_record_fails_guaranteed_delivery_without_moving(
    kafka, unique: Callable[[str], str], delivery: DeliveryGuarantee
) -> None:
    topic = unique("src-bad")
    support.create_topic(kafka.bootstrap, topic, 1)
    produce_with_bad(kafka.bootstrap, topic)
    source = await start_source(props(kafka.bootstrap, topic, unique("g"), **JSON_PROPS), delivery=delivery)
    try:
        batches = await poll_until(source, row_count(4), max_records=4)
        assert [i for i in batches[0].records.column("id").to_pylist()] == [0, 1, 2, 3]
        before = source.checkpoint()
        assert before.next_offset(topic, 0) == 4
        for _ in range(2):  # the records stay: the same failure again, nothing moves
            with pytest.raises(DecodeError) as info:
                await source.poll_batch(100)
            assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 0, 4)
            assert source.checkpoint() == before
    finally:
        await source.close()


async def test_bad_records_skipped_and_counted_under_best_effort(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-bad-be")
    support.create_topic(kafka.bootstrap, topic, 1)
    produce_with_bad(kafka.bootstrap, topic)
    source = await start_source(
        props(kafka.bootstrap, topic, unique("g"), **JSON_PROPS, **{"max-error-rate": "0.5"}),
        delivery=DeliveryGuarantee.BEST_EFFORT,
    )
    try:
        batches = await poll_until(source, row_count(8))
        table_ids = [i for b in batches for i in b.records.column("id").to_pylist()]
        assert table_ids == [0, 1, 2, 3, 5, 6, 8, 9]
        assert source.metrics.records_skipped == 2
        assert source.checkpoint().next_offset(topic, 0) == 10
    finally:
        await source.close()


async def test_best_effort_error_rate_is_enforced(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-bad-rate")
    support.create_topic(kafka.bootstrap, topic, 1)
    values = [b'{"id":%d}' % i if i % 4 else b"garbage" for i in range(400)]
    support.produce(kafka.bootstrap, topic, values, partition=0)
    source = await start_source(
        props(kafka.bootstrap, topic, unique("g"), **JSON_PROPS, **{"max-error-rate": "0.1"}),
        delivery=DeliveryGuarantee.BEST_EFFORT,
    )
    try:
        with pytest.raises(ErrorRateExceededError):
            await poll_until(source, row_count(400), max_records=50)
        with pytest.raises(ErrorRateExceededError):  # terminal for this generation
            await source.poll_batch(50)
    finally:
        await source.close()


async def test_json_schema_discovery(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-discover")
    support.create_topic(kafka.bootstrap, topic, 1)
    support.produce(kafka.bootstrap, topic, [b'{"id":%d,"name":"x","price":1.5}' % i for i in range(5)], partition=0)
    properties = props(kafka.bootstrap, topic, unique("g"), format="json")
    source = KafkaSource()
    await source.discover_schema(properties)
    assert source.schema().names == ["id", "name", "price", "_partition", "_offset"]
    from laminar_kafka.kafka_source import ConnectorConfig, SourcePosition, SourceStart

    await source.start(SourceStart(ConnectorConfig("kafka", properties), SourcePosition.Initial(), DeliveryGuarantee.EXACTLY_ONCE))
    try:
        batches = await poll_until(source, row_count(5))
        assert batches[0].records.column("price").to_pylist()[0] == 1.5
    finally:
        await source.close()


async def test_partition_added_while_running(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-grow")
    support.create_topic(kafka.bootstrap, topic, 2)
    support.produce(kafka.bootstrap, topic, [b"old%d" % i for i in range(20)])
    source = await start_source(
        props(kafka.bootstrap, topic, unique("g"), **{"partition-discovery-interval-ms": "300"})
    )
    try:
        await poll_until(source, row_count(20))
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while support.partition_count(kafka.bootstrap, topic) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        support.produce(kafka.bootstrap, topic, [b"new%d" % i for i in range(6)], partition=3)
        batches = await poll_until(source, row_count(6), timeout=30)
        emitted = rows(batches)
        assert offsets_by_partition(emitted) == {3: list(range(6))}
        checkpoint = source.checkpoint()
        assert checkpoint.next_offset(topic, 2) == 0  # discovered, starts at earliest
        assert checkpoint.next_offset(topic, 3) == 6
        assert source.metrics.partitions_discovered == 2
    finally:
        await source.close()
