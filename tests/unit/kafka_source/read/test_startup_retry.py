"""The pipeline's start position is resolved through transient broker errors (a topic created
moments ago: partitions without a leader yet, brokers that do not know it yet) within a bound, with
one WARNING per retry streak; past the bound, or at once for a non-transient error, one clear error.
No servers: a fake consumer stands in for Kafka, a fake clock for time."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from laminar_kafka.connector.errors import CheckpointError, TransientError
from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.read import startup
from laminar_kafka.kafka_source.read.positions import EARLIEST
from laminar_kafka.kafka_source.read.startup import (
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    MIN_CALL_TIMEOUT_S,
    is_retriable,
    resolve_start_offsets,
    retry_transient,
)

ALO = DeliveryGuarantee.AT_LEAST_ONCE
BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}
#: the fake topic ``t``: partition -> (low, high)
LOGS = {0: (0, 10), 1: (5, 7), 2: (3, 3), 3: (100, 250)}


def config(**extra: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({**BASE, **extra})


@dataclass
class Answer:
    """What ``offsets_for_times`` answers for one partition (a TopicPartition's error is read-only)."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


@dataclass
class FakeConsumer:
    """Topic ``t`` with :data:`LOGS`. The first ``metadata_failures`` metadata reads answer the topic
    with ``metadata_error``; the first ``watermark_failures`` ListOffsets calls answer partition 1
    with ``watermark_error`` (the others answered, as a broker does per partition)."""

    watermark_failures: int = 0
    watermark_error: int = KafkaError.NOT_LEADER_FOR_PARTITION
    metadata_failures: int = 0
    metadata_error: int = KafkaError.LEADER_NOT_AVAILABLE
    metadata_calls: int = 0
    list_offsets_calls: int = 0
    timeouts: list[float] = field(default_factory=list)
    closed: bool = False

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.metadata_calls += 1
        self.timeouts.append(timeout)
        if self.metadata_failures > 0:
            self.metadata_failures -= 1
            info = SimpleNamespace(error=KafkaError(self.metadata_error, "topic being created"), partitions={})
        else:
            info = SimpleNamespace(error=None, partitions={p: None for p in LOGS})
        return SimpleNamespace(topics={"t": info})

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[Answer]:
        self.list_offsets_calls += 1
        self.timeouts.append(timeout)
        failing = self.watermark_failures > 0
        self.watermark_failures -= failing
        answers = []
        for tp in partitions:
            if failing and tp.partition == 1:
                answers.append(Answer(tp.topic, tp.partition, -1,
                                      KafkaError(self.watermark_error, "Broker: Not leader for partition")))
            else:
                low, high = LOGS[tp.partition]
                answers.append(Answer(tp.topic, tp.partition, low if tp.offset == EARLIEST else high))
        return answers

    def close(self) -> None:
        self.closed = True


class FakeClock:
    """``clock()`` reads ``now``; ``sleep(s)`` moves it on at once and records ``s``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def resolve(monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer, clock: FakeClock,
            cfg: KafkaSourceConfig | None = None, **kwargs: Any) -> dict[tuple[str, int], int]:
    """:func:`resolve_start_offsets` with ``consumer`` as its client and ``clock``'s time."""
    monkeypatch.setattr(startup, "make_consumer", lambda *args, **kwargs: consumer)
    return resolve_start_offsets(cfg or config(), ALO, sleep=clock.sleep, clock=clock.clock, **kwargs)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "laminar_kafka.kafka_source.read.startup"]


@pytest.mark.parametrize("mode", ["earliest", "latest"])
def test_not_leader_failures_then_success_give_the_result_of_no_failure(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock, caplog: pytest.LogCaptureFixture, mode: str) -> None:
    cfg = config(**{"startup-mode": mode})
    expected = resolve(monkeypatch, FakeConsumer(), clock, cfg)
    assert expected == {("t", p): LOGS[p][0 if mode == "earliest" else 1] for p in LOGS} and clock.sleeps == []

    flaky = FakeConsumer(watermark_failures=4)
    with caplog.at_level("DEBUG", logger="laminar_kafka.kafka_source.read.startup"):
        assert resolve(monkeypatch, flaky, clock, cfg) == expected
    assert flaky.closed
    assert clock.sleeps == [0.2, 0.4, 0.8, 1.6]  # backoff from 0.2 s doubling
    assert flaky.metadata_calls == 5  # each attempt reads the metadata again (leaders moved)
    [warning] = warnings_of(caplog)  # one line for the streak, not one per attempt
    assert "resolving the start position of topic(s) t failed, retrying for up to 30 s" in warning
    assert "NOT_LEADER_FOR_PARTITION" in warning and "t:1" in warning
    assert any(r.levelname == "INFO" and "succeeded after 3.0 s (5 attempts)" in r.getMessage()
               for r in caplog.records)


def test_a_topic_being_created_is_waited_for(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(metadata_failures=2, watermark_failures=1, watermark_error=KafkaError.LEADER_NOT_AVAILABLE)
    with caplog.at_level("WARNING", logger="laminar_kafka.kafka_source.read.startup"):
        offsets = resolve(monkeypatch, consumer, clock)
    assert offsets == {("t", p): low for p, (low, _high) in LOGS.items()}
    assert clock.sleeps == [0.2, 0.4, 0.8]
    [warning] = warnings_of(caplog)
    assert "topic 't' is not available: topic being created" in warning


def test_always_failing_raises_one_clear_transient_error_after_the_bound(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    consumer = FakeConsumer(watermark_failures=10**9)
    with caplog.at_level("DEBUG", logger="laminar_kafka.kafka_source.read.startup"), pytest.raises(TransientError) as info:
        resolve(monkeypatch, consumer, clock)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "resolving the start position of topic(s) t failed for 30.0 s (19 attempts); last error: "
        "cannot read the watermarks of 4 partition(s): ")
    assert "NOT_LEADER_FOR_PARTITION" in message and "t:1: Broker: Not leader for partition" in message
    assert info.value.cause.code() == KafkaError.NOT_LEADER_FOR_PARTITION
    assert consumer.closed
    assert sum(clock.sleeps) == pytest.approx(30.0)
    assert clock.sleeps[:5] == [0.2, 0.4, 0.8, 1.6, MAX_BACKOFF_S] and max(clock.sleeps) == MAX_BACKOFF_S
    # the streak's first failure, then one line per 10 s at most (at 11 s and 21 s), not 18 lines
    warnings = warnings_of(caplog)
    assert len(warnings) == 3
    assert "still failing after 11.0 s (9 attempts)" in warnings[1]
    assert "still failing after 21.0 s (14 attempts)" in warnings[2]
    # every client call's timeout stays within the call timeout, cut to the time left
    assert max(consumer.timeouts) == 10.0 and min(consumer.timeouts) == MIN_CALL_TIMEOUT_S


def test_the_bound_is_a_parameter(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    with pytest.raises(TransientError, match=r"failed for 1\.0 s \(4 attempts\)"):
        resolve(monkeypatch, FakeConsumer(watermark_failures=10**9), clock, retry_for_s=1.0)
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.4])  # the last pause cut to the time left


def test_a_named_topic_still_missing_after_the_bound_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    consumer = FakeConsumer(metadata_failures=10**9, metadata_error=KafkaError.UNKNOWN_TOPIC_OR_PART)
    with pytest.raises(ConfigurationError) as info:
        resolve(monkeypatch, consumer, clock, retry_for_s=5.0)
    assert str(info.value).startswith(
        "resolving the start position of topic(s) t failed for 5.0 s (6 attempts); last error: "
        "topic 't' is not available: topic being created")
    assert info.value.cause.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert consumer.list_offsets_calls == 0


@pytest.mark.parametrize("consumer, kind", [
    (FakeConsumer(metadata_failures=1, metadata_error=KafkaError.TOPIC_AUTHORIZATION_FAILED), ConfigurationError),
    (FakeConsumer(watermark_failures=1, watermark_error=KafkaError.TOPIC_AUTHORIZATION_FAILED), TransientError),
    (FakeConsumer(watermark_failures=1, watermark_error=KafkaError.SASL_AUTHENTICATION_FAILED), TransientError),
])
def test_a_non_transient_error_is_raised_at_once(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock, caplog: pytest.LogCaptureFixture,
        consumer: FakeConsumer, kind: type[Exception]) -> None:
    with caplog.at_level("WARNING", logger="laminar_kafka.kafka_source.read.startup"), pytest.raises(kind) as info:
        resolve(monkeypatch, consumer, clock)
    assert "failed for" not in str(info.value)  # the error itself, not wrapped in a retry summary
    assert clock.sleeps == [] and consumer.metadata_calls == 1 and warnings_of(caplog) == []
    assert consumer.closed


def test_an_impossible_start_is_not_retried(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    cfg = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:11"})
    consumer = FakeConsumer()
    with pytest.raises(ConfigurationError, match="beyond the high watermark 10"):
        resolve(monkeypatch, consumer, clock, cfg)
    assert clock.sleeps == [] and consumer.metadata_calls == 1


def test_a_configuration_the_client_rejects_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="rejects the configuration"):
        resolve_start_offsets(config(**{"kafka.no.such.property": "1"}), ALO,
                              sleep=pytest.fail, clock=lambda: 0.0)  # type: ignore[arg-type]


def test_which_errors_are_retried() -> None:
    def transient(code: int) -> TransientError:
        return TransientError("x", cause=KafkaError(code))

    def configuration(code: int | None) -> ConfigurationError:
        return ConfigurationError("x", cause=None if code is None else KafkaError(code))

    for code in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                 KafkaError.OFFSET_NOT_AVAILABLE):
        assert is_retriable(transient(code))
    assert is_retriable(TransientError("no cause"))
    for code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                 KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL):
        assert not is_retriable(transient(code))
    for code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError.LEADER_NOT_AVAILABLE):
        assert is_retriable(configuration(code))
    for code in (None, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG):
        assert not is_retriable(configuration(code))
    assert not is_retriable(CheckpointError("x", cause=KafkaError(KafkaError.LEADER_NOT_AVAILABLE)))


def test_retry_transient_lets_other_exceptions_through(clock: FakeClock) -> None:
    def attempt(_timeout_s: float) -> int:
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        retry_transient("x", attempt, timeout_s=1.0, sleep=clock.sleep, clock=clock.clock)
    assert clock.sleeps == [] and FIRST_BACKOFF_S == 0.2
