"""The conformance kit: the source-connector protocol's contract as scenarios any connector can run.

A connector author gives the kit a :class:`ConnectorKit`: a factory of fresh connector generations,
the configuration they start with, and a :class:`LogBackend` over the partitioned log they read (append
records to a partition, read a partition's end, add a partition). Each scenario
(:data:`~laminar_kafka.connector.conformance.scenarios.SCENARIOS`) drives generations through the
protocol the way the node runtime does and raises :class:`ConformanceError`, naming the rule, when
the connector breaks it. :func:`conformance_tests` turns them into pytest tests
(``pytest -k conformance``); ``docs/connector-guide.md`` says how.

The kit needs pytest, pytest-asyncio and hypothesis besides the core dependencies: the ``kit``
extra (``pip install 'laminar-kafka[kit]'``); it starts no server. Importing this package does not
import pytest: :func:`conformance_tests` is loaded on first use.

Three connectors run it here: :class:`~laminar_kafka.kafka_source.source.KafkaSource` against real
Kafka, :class:`~laminar_kafka.redis_source.source.RedisStreamsSource` against a real Redis server
and :class:`~laminar_kafka.connector.memory.MemorySource`, the reference connector over in-memory
logs.
"""
from __future__ import annotations

from typing import Any

from laminar_kafka.connector.conformance.backend import ConformanceError, ConformanceSkipped, ConnectorKit, LogBackend

__all__ = ["ConformanceError", "ConformanceSkipped", "ConnectorKit", "LogBackend", "conformance_tests"]


def __getattr__(name: str) -> Any:
    """``conformance_tests`` (:mod:`laminar_kafka.connector.conformance.pytest_kit`), imported on first use."""
    if name == "conformance_tests":
        from laminar_kafka.connector.conformance.pytest_kit import conformance_tests

        return conformance_tests
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
