"""The bad-record policy (``on-bad-record``, ``max-error-rate``) without a broker: a source wired to
a FIFO the test fills, and the policy object on its own."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source.config.source_config import BadRecordPolicy, Format, KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder, BuiltBatch
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA
from laminar_kafka.kafka_source.errors import DecodeError, ErrorRateExceededError
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.batches import ERROR_RATE_MIN_RECORDS, DecodeFailures
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo, RecordChunk
from tests.unit.kafka_source.wiring import records_of
from tests.unit.kafka_source.wiring import running_source as wired_source

TOPIC = "orders"
BASE = {"bootstrap.servers": "127.0.0.1:1", "topic": TOPIC, "group.id": "g", "format": "json", "json-schema": "id:int64"}


def running_source(delivery: DeliveryGuarantee, **props: str) -> tuple[KafkaSource, ByteBoundedFifo]:
    return wired_source({**BASE, **props}, delivery, TOPIC)


def message(offset: int, bad: bool) -> Message:
    value = b"{not json %d" % offset if bad else b'{"id":%d}' % offset
    return Message(topic=TOPIC, partition=0, offset=offset, value=value, key=b"k%d" % offset,
                   timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + offset))


def put(fifo: ByteBoundedFifo, first: int, count: int, bad: frozenset[int] = frozenset()) -> None:
    messages = [message(o, o in bad) for o in range(first, first + count)]
    fifo.put_chunk(RecordChunk(records_of(messages), {(TOPIC, 0): first + count}, nbytes=count), threading.Event())


@pytest.mark.parametrize("delivery", [DeliveryGuarantee.EXACTLY_ONCE, DeliveryGuarantee.BEST_EFFORT])
async def test_fail_stops_at_the_bad_record_without_moving(delivery: DeliveryGuarantee) -> None:
    source, fifo = running_source(delivery, **{"on-bad-record": "fail"})
    put(fifo, 0, 10, bad=frozenset({4}))
    for _ in range(2):  # the same records fail again: nothing was consumed
        with pytest.raises(DecodeError) as info:
            await source.poll_batch(100)
        assert (info.value.topic, info.value.partition, info.value.offset) == (TOPIC, 0, 4)
        assert source.checkpoint().next_offset(TOPIC, 0) == 0


async def test_guaranteed_delivery_fails_by_default() -> None:
    source, fifo = running_source(DeliveryGuarantee.EXACTLY_ONCE)
    put(fifo, 0, 3, bad=frozenset({1}))
    with pytest.raises(DecodeError):
        await source.poll_batch(100)


async def test_skip_under_exactly_once_hands_over_the_rejected_records_and_moves_past_them() -> None:
    source, fifo = running_source(DeliveryGuarantee.EXACTLY_ONCE, **{"on-bad-record": "skip", "max-error-rate": "0.5"})
    put(fifo, 0, 10, bad=frozenset({4, 7}))
    batch = await source.poll_batch(100)
    assert batch is not None
    assert batch.records.column("id").to_pylist() == [0, 1, 2, 3, 5, 6, 8, 9]
    assert batch.checkpoint.next_offset(TOPIC, 0) == 10
    rejected = batch.rejected
    assert rejected is not None and rejected.schema == REJECTED_SCHEMA
    rows = rejected.to_pylist()
    assert [(r["_topic"], r["_partition"], r["_offset"], r["_key"], r["value"]) for r in rows] == [
        (TOPIC, 0, 4, b"k4", b"{not json 4"), (TOPIC, 0, 7, b"k7", b"{not json 7"),
    ]
    assert all(r["error"] for r in rows)
    assert rows[0]["_timestamp"] == pa.scalar(1_700_000_000_004, pa.timestamp("ms")).as_py()
    assert source.metrics.records_skipped == 2
    assert await source.poll_batch(100) is None


async def test_a_poll_of_only_bad_records_is_a_batch_with_no_rows_and_the_rejected_ones() -> None:
    source, fifo = running_source(DeliveryGuarantee.EXACTLY_ONCE, **{"on-bad-record": "skip", "max-error-rate": "1"})
    put(fifo, 0, 3, bad=frozenset({0, 1, 2}))
    batch = await source.poll_batch(100)
    assert batch is not None and batch.num_rows == 0
    assert batch.rejected is not None and batch.rejected.column("_offset").to_pylist() == [0, 1, 2]
    assert batch.checkpoint.next_offset(TOPIC, 0) == 3


async def test_good_batches_carry_no_rejected_batch() -> None:
    source, fifo = running_source(DeliveryGuarantee.EXACTLY_ONCE, **{"on-bad-record": "skip"})
    put(fifo, 0, 5)
    batch = await source.poll_batch(100)
    assert batch is not None and batch.num_rows == 5 and batch.rejected is None


async def test_error_rate_exceeded_names_the_last_bad_record_and_the_rate_and_is_terminal() -> None:
    source, fifo = running_source(DeliveryGuarantee.EXACTLY_ONCE, **{"on-bad-record": "skip", "max-error-rate": "0.1"})
    put(fifo, 0, 100, bad=frozenset(range(0, 100, 20)))  # 5 of 100: within 10%
    batch = await source.poll_batch(100)
    assert batch is not None and batch.rejected is not None and batch.rejected.num_rows == 5
    put(fifo, 100, 100, bad=frozenset(range(100, 200, 5)))  # 25 of 200: above 10%
    with pytest.raises(ErrorRateExceededError) as info:
        await source.poll_batch(100)
    text = str(info.value)
    assert f"{TOPIC}:0@195" in text and "25 of 200" in text and "0.1250" in text and "max-error-rate=0.1" in text
    assert source.checkpoint().next_offset(TOPIC, 0) == 100  # the failing poll moved nothing
    with pytest.raises(ErrorRateExceededError):
        await source.poll_batch(100)


def built_with_bad(count: int, bad: int) -> tuple[Records, BuiltBatch]:
    builder = BatchBuilder(KafkaSourceConfig.from_properties(BASE))
    records = records_of([message(o, o < bad) for o in range(count)])
    return records, builder.build(records)


def test_the_rate_counts_against_at_least_the_minimum_number_of_records() -> None:
    # max-error-rate=0.02 allows 2 bad records among the first 100 seen, whatever came before
    policy = DecodeFailures(BadRecordPolicy.SKIP, Format.JSON, 0.02, SourceMetrics())
    assert policy.check(*built_with_bad(3, 2)) is not None
    with pytest.raises(ErrorRateExceededError):
        policy.check(*built_with_bad(3, 1))
    assert ERROR_RATE_MIN_RECORDS == 100


def test_zero_error_rate_fails_on_the_first_bad_record() -> None:
    policy = DecodeFailures(BadRecordPolicy.SKIP, Format.JSON, 0.0, SourceMetrics())
    assert policy.check(*built_with_bad(50, 0)) is None
    with pytest.raises(ErrorRateExceededError):
        policy.check(*built_with_bad(1, 1))


def test_policy_setting_and_defaults() -> None:
    assert KafkaSourceConfig.from_properties({**BASE, "on-bad-record": " SKIP "}).on_bad_record is BadRecordPolicy.SKIP
    default = KafkaSourceConfig.from_properties(BASE)
    assert default.bad_record_policy(guaranteed=True) is BadRecordPolicy.FAIL
    assert default.bad_record_policy(guaranteed=False) is BadRecordPolicy.SKIP
    explicit = KafkaSourceConfig.from_properties({**BASE, "on-bad-record": "fail"})
    assert explicit.bad_record_policy(guaranteed=False) is BadRecordPolicy.FAIL
    with pytest.raises(ConfigurationError, match="on-bad-record"):
        KafkaSourceConfig.from_properties({**BASE, "on-bad-record": "ignore"})
    assert "on-bad-record" not in default.identity_options()  # an operator may change it between runs
