"""The conformance kit on the reference connector (``MemorySource`` over in-memory logs)."""
from __future__ import annotations

import pytest

from laminar_kafka.kafka_source.connector import ConnectorConfig
from laminar_kafka.kafka_source.conformance import ConnectorKit
from laminar_kafka.kafka_source.conformance.memory import MemoryBackend, MemoryLog, MemorySource
from laminar_kafka.kafka_source.conformance.pytest_kit import conformance_tests

TOPIC = "events"


@pytest.fixture
def conformance_kit() -> ConnectorKit:
    log = MemoryLog.of(TOPIC, 3, 10)
    return ConnectorKit(MemoryBackend(log, TOPIC), lambda: MemorySource(log), ConnectorConfig("memory", {}),
                        read_timeout_s=5.0)


NAMES = conformance_tests(globals())


def test_every_scenario_became_a_test() -> None:
    from laminar_kafka.kafka_source.conformance.scenarios import SCENARIOS

    assert len(NAMES) == len(SCENARIOS) and all(n.startswith("test_conformance_") for n in NAMES)
