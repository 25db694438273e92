"""The preflight's topic read (`read_topology`): a broker that refused the client (its credentials,
its TLS handshake) ends the wait at once in one line; any other failure (refused connection,
timeout) is retried until the connect timeout, as a broker starting may answer later."""
from __future__ import annotations

import logging
import time
from typing import cast

import pytest
from confluent_kafka import KafkaError

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.kafka_metadata import ClientErrors, MetadataUnavailable, TopologyReader
from laminar_kafka.cluster.node import read_topology
from laminar_kafka.kafka_source.clients import client_config
from laminar_kafka.kafka_source.config.topics import TopicSelector


class FailingReader:
    """A reader whose every read fails after its client reported ``error``."""

    def __init__(self, error: KafkaError) -> None:
        self.kafka = client_config("broker:9093")
        self.selector = TopicSelector(("orders",))
        self.timeout_s = 0.1
        self.errors = ClientErrors()
        self.reads = 0
        self._error = error

    def read(self) -> object:
        self.reads += 1
        self.errors(self._error)
        raise MetadataUnavailable(f"timed out{self.errors.cause()}")


@pytest.mark.parametrize("code, text", [
    (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed due to invalid credentials"),
    (KafkaError._SSL, "SSL handshake failed: certificate verify failed"),
])
def test_a_refusal_ends_the_wait_at_once_naming_it(code: int, text: str) -> None:
    reader = FailingReader(KafkaError(code, text))
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"^Kafka at broker:9093 refused this client: timed out: ") as raised:
        read_topology(cast(TopologyReader, reader), 30.0)
    assert time.monotonic() - started < 5 and reader.reads == 1
    assert text in str(raised.value)


def test_another_failure_is_retried_until_the_timeout_in_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    reader = FailingReader(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="laminar_kafka.cluster.node"), \
            pytest.raises(UsageError, match=r"^cannot reach Kafka at broker:9093 within 1.2s: .*Connection refused"):
        read_topology(cast(TopologyReader, reader), 1.2)
    assert time.monotonic() - started >= 1.2 and reader.reads >= 2
    assert [r.levelno for r in caplog.records if "retrying" in r.getMessage()] == [logging.INFO]
