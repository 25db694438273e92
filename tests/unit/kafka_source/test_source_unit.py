"""KafkaSource logic that needs no broker: the best-effort error rate, advisory-commit error paths,
and a client-rejected configuration at start."""
from __future__ import annotations

import concurrent.futures
import threading
import time
import types

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import FatalError
from laminar_kafka.connector.protocol import ConnectorConfig, DeliveryGuarantee, InitialPosition, SourceStart
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source import source as source_module
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.read import startup
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo, RecordChunk
from laminar_kafka.kafka_source.read.reader import Reader
from laminar_kafka.kafka_source.read.reader_seam import ReaderSettings
from laminar_kafka.kafka_source.read.startup import StartupPlan
from tests.unit.kafka_source.read.fake_callbacks import FakeCallbacks
from tests.unit.kafka_source.wiring import records_of
from tests.unit.kafka_source.wiring import running_source as wired_source

TOPIC = "t"
PROPS = {
    "bootstrap.servers": "127.0.0.1:1",
    "topic": TOPIC,
    "group.id": "g",
    "format": "json",
    "json-schema": "id:int64",
    "max-error-rate": "0.01",
}


def running_source(delivery: DeliveryGuarantee) -> tuple[KafkaSource, ByteBoundedFifo]:
    return wired_source(PROPS, delivery, TOPIC)


def chunk(first: int, count: int, bad: frozenset[int] = frozenset()) -> RecordChunk:
    messages = [
        Message(topic=TOPIC, partition=0, offset=o, value=b"garbage" if o in bad else b'{"id":%d}' % o)
        for o in range(first, first + count)
    ]
    return RecordChunk(records_of(messages), {(TOPIC, 0): first + count}, nbytes=count)


async def test_error_rate_counts_every_record_seen_not_only_batches_with_bad_ones() -> None:
    source, fifo = running_source(DeliveryGuarantee.BEST_EFFORT)
    for first in range(0, 400, 50):  # 400 good records
        fifo.put_chunk(chunk(first, 50), threading.Event())
    fifo.put_chunk(chunk(400, 50, bad=frozenset({420})), threading.Event())
    fifo.put_chunk(chunk(450, 50, bad=frozenset({470})), threading.Event())
    rows = 0
    while (batch := await source.poll_batch(50)) is not None:
        rows += batch.num_rows
    # 2 bad of 500 seen (0.4%) is under max-error-rate=1%
    assert rows == 498
    assert source.metrics.records_skipped == 2
    assert source.checkpoint().next_offset(TOPIC, 0) == 500


async def test_commit_that_cannot_be_issued_fails_at_once() -> None:
    source = KafkaSource(request_timeout_s=5.0)
    fifo = ByteBoundedFifo(1024)
    source._reader = Reader(  # never started: every submit fails at once
        None, fifo, {}, ReaderSettings(TopicSelector((TOPIC,)), 1), FakeCallbacks()  # type: ignore[arg-type]
    )
    source._cursor = {(TOPIC, 0): 10}
    source._commits.loaded = True
    started = time.monotonic()
    await source.notify_epoch_committed(1, SourceCheckpoint.from_partitions({(TOPIC, 0): 10}))
    assert time.monotonic() - started < 1.0
    assert source.metrics.commit_failures == 1
    assert source.metrics.commits == 0


class _CancelledAfterCheck(concurrent.futures.Future):  # type: ignore[type-arg]
    """A future the waiter cancels right after the callback saw it pending (its timeout)."""

    def done(self) -> bool:
        if not self.cancelled():
            self.cancel()
            return False
        return True


def test_commit_result_racing_the_waiters_timeout_does_not_raise_on_the_reader_thread() -> None:
    source = KafkaSource()
    source._commits.pending = _CancelledAfterCheck()
    source._commits.on_commit(None, [TopicPartition(TOPIC, 0, 5)])  # must not raise InvalidStateError
    assert source._commits.committed == {(TOPIC, 0): 5}


async def test_client_rejected_property_is_a_configuration_error() -> None:
    source = KafkaSource()
    request = SourceStart(
        ConnectorConfig("kafka", {**PROPS, "kafka.no.such.property": "1"}),
        InitialPosition(),
        DeliveryGuarantee.EXACTLY_ONCE,
    )
    with pytest.raises(ConfigurationError):
        await source.start(request)
    with pytest.raises(FatalError):  # the generation is retired
        await source.start(request)


async def test_a_typed_config_gives_the_source_its_client_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node builds the source with its typed configuration: the start request carries no client
    property, and the consumer is built by the one factory from the client configuration value."""
    built: list[KafkaClientConfig] = []

    def make_consumer(kafka: KafkaClientConfig, group_id: str, overrides: object = None, *, defaults: object = None) -> None:
        built.append(kafka)
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "no client in a unit test"))

    monkeypatch.setattr(startup, "make_consumer", make_consumer)
    client = KafkaClientConfig("k:1", {"security.protocol": "SSL"})
    properties = {k: v for k, v in PROPS.items() if k != "bootstrap.servers"}
    source = KafkaSource(KafkaSourceConfig.from_properties(properties, client))
    request = SourceStart(ConnectorConfig("kafka", properties), InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE)
    with pytest.raises(ConfigurationError, match="the Kafka client rejects the configuration"):
        await source.start(request)
    assert built == [client]


def test_the_same_properties_are_parsed_once() -> None:
    config = ConnectorConfig("kafka", PROPS)
    source = KafkaSource(config)
    assert source._typed(ConnectorConfig("kafka", dict(PROPS))) is source.config
    assert source._typed(PROPS) is source.config
    other = source._typed({**PROPS, "max-error-rate": "0.5"})
    assert other is not source.config and other.max_error_rate == 0.5
    with pytest.raises(ConfigurationError, match="connector type"):
        source.contract(ConnectorConfig("other", PROPS))


class _IdleConsumer:
    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        time.sleep(timeout)
        return []

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return partitions

    def close(self) -> None:
        pass


def test_a_command_submitted_as_the_thread_exits_never_hangs() -> None:
    reader = Reader(
        _IdleConsumer(),  # type: ignore[arg-type]
        ByteBoundedFifo(1024),
        {},
        ReaderSettings(TopicSelector((TOPIC,)), 1, consume_timeout_s=0.01),
        FakeCallbacks(),
    )
    reader.start()
    # The thread exits; a submit that still sees it alive (the race window) must not queue a
    # command nobody will run or cancel.
    thread = reader.thread
    reader._stop.set()
    thread.join(5)
    reader._thread = types.SimpleNamespace(is_alive=lambda: True)  # type: ignore[assignment]
    reader._stop.clear()
    future = reader.submit(lambda consumer: None)
    with pytest.raises(FatalError):
        future.result(timeout=2)


async def test_terminal_task_tracker_covers_the_reader_thread_until_close(monkeypatch: pytest.MonkeyPatch) -> None:
    async def opened(*_args: object, **_kwargs: object) -> tuple[object, StartupPlan, dict[tuple[str, int], int]]:
        return _IdleConsumer(), StartupPlan({(TOPIC, 0): 0}), {(TOPIC, 0): 0}

    monkeypatch.setattr(source_module, "open_consumer", opened)
    config = KafkaSourceConfig.from_properties(PROPS)
    source = KafkaSource(config, close_timeout_s=5.0)
    await source.start(SourceStart(ConnectorConfig("kafka", dict(PROPS)), InitialPosition(), DeliveryGuarantee.AT_LEAST_ONCE))
    tracker = source.terminal_task_tracker()
    reader_thread = source._reader.thread  # type: ignore[union-attr]
    assert reader_thread.is_alive() and not tracker.is_terminated()
    await source.close()
    assert not reader_thread.is_alive()
    assert tracker.is_terminated() and await tracker.wait(0)
