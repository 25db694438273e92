"""``batch-wait-ms``: the consumer's fetch.min.bytes / fetch.wait.max.ms, and their bounds."""
from __future__ import annotations

import pytest

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import BATCH_MIN_BYTES, KafkaSourceConfig

BASE = {"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "group.id": "g"}


def consumer(**extra: str) -> dict[str, object]:
    return KafkaSourceConfig.from_properties({**BASE, **extra}).consumer_config(guaranteed=True)


def test_by_default_a_fetch_waits_250_ms_for_a_batch() -> None:
    props = consumer()
    assert props["fetch.wait.max.ms"] == 250 and props["fetch.min.bytes"] == BATCH_MIN_BYTES


def test_the_batch_is_at_most_half_the_partition_fetch_limit() -> None:
    # the broker counts at most max.partition.fetch.bytes per partition towards fetch.min.bytes
    assert BATCH_MIN_BYTES * 2 <= consumer()["max.partition.fetch.bytes"]  # type: ignore[operator]
    props = consumer(**{"kafka.max.partition.fetch.bytes": "65536"})
    assert props["fetch.min.bytes"] == 32768


def test_zero_restores_librdkafka_defaults_and_kafka_properties_win() -> None:
    props = consumer(**{"batch-wait-ms": "0"})
    assert props["fetch.min.bytes"] == 1 and "fetch.wait.max.ms" not in props
    props = consumer(**{"batch-wait-ms": "100", "kafka.fetch.min.bytes": "1", "kafka.fetch.wait.max.ms": "20"})
    assert props["fetch.min.bytes"] == "1" and props["fetch.wait.max.ms"] == "20"


def test_a_negative_wait_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="batch-wait-ms"):
        consumer(**{"batch-wait-ms": "-1"})
