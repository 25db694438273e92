"""librdkafka's log lines go through Python logging, a transient coordinator error at INFO: the
demo's idempotent producer on a fresh broker logged "Coordinator load in progress" as a WARNING on a
newcomer's terminal (no servers here: the lines are the ones librdkafka hands confluent_kafka)."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from laminar_kafka.cluster.logs import configure_logging
from laminar_kafka.kafka_source.clients import (
    _CLIENT_LOG,
    LIBRDKAFKA_LOGGER,
    KafkaClientConfig,
    librdkafka_level,
    make_producer,
)

#: the line the demo printed (confluent_kafka calls ``logger.log(level, "%s [%s] %s", facility, name, text)``)
COORDINATOR_LOADING = ("GETPID", "rdkafka#producer-3", "[thrd:main]: Failed to acquire idempotence PID from broker "
                       "127.0.0.1:35273/1: Broker: Coordinator load in progress: retrying")


@pytest.mark.parametrize("text", [
    "Failed to acquire idempotence PID from broker 127.0.0.1:1/1: Broker: Coordinator load in progress: retrying",
    "FindCoordinator response error: Broker: Coordinator not available",
    "OffsetCommit failed: Broker: Not coordinator",
])
def test_a_transient_coordinator_error_is_info_at_most(text: str) -> None:
    assert librdkafka_level(logging.WARNING, text) == logging.INFO
    assert librdkafka_level(logging.ERROR, text) == logging.INFO
    assert librdkafka_level(logging.DEBUG, text) == logging.DEBUG  # never raised


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL])
def test_every_other_line_keeps_its_level(level: int) -> None:
    text = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    assert librdkafka_level(level, text) == level


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root logger's handlers and level and the librdkafka logger's level, as they were."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, LIBRDKAFKA_LOGGER.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    LIBRDKAFKA_LOGGER.setLevel(saved[2])


def test_the_demo_line_is_not_on_stderr_unless_debugging(
    capsys: pytest.CaptureFixture[str], restored_logging: None,
) -> None:
    for level in ("warning", "info"):  # `laminar-kafka demo` logs at warning, a node at info
        configure_logging(level)
        _CLIENT_LOG.log(logging.WARNING, "%s [%s] %s", *COORDINATOR_LOADING)
        assert capsys.readouterr().err == "", level
    configure_logging("debug")
    _CLIENT_LOG.log(logging.WARNING, "%s [%s] %s", *COORDINATOR_LOADING)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f" INFO {LIBRDKAFKA_LOGGER.name}: GETPID [rdkafka#producer-3] " in err and "Coordinator load in progress" in err
    _CLIENT_LOG.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#producer-3", "Timed out 1 in-flight request")
    assert f" WARNING {LIBRDKAFKA_LOGGER.name}: REQTMOUT " in capsys.readouterr().err


def test_a_real_clients_lines_reach_logging_not_raw_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    LIBRDKAFKA_LOGGER.addHandler(keep)
    saved = LIBRDKAFKA_LOGGER.level
    LIBRDKAFKA_LOGGER.setLevel(logging.DEBUG)
    try:
        producer = make_producer(KafkaClientConfig("127.0.0.1:1"), {"debug": "broker", "reconnect.backoff.ms": 10})
        deadline = time.monotonic() + 10
        while not records and time.monotonic() < deadline:
            producer.poll(0.1)  # the client's log lines are delivered by poll
        producer.flush(0)
    finally:
        LIBRDKAFKA_LOGGER.removeHandler(keep)
        LIBRDKAFKA_LOGGER.setLevel(saved)
    assert records and all(r.name == LIBRDKAFKA_LOGGER.name for r in records)
    assert "rdkafka#producer" in records[0].getMessage()
    raw = capfd.readouterr().err
    assert "|BROKER|" not in raw and "%7|" not in raw  # librdkafka's own stderr format
