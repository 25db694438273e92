"""The conformance kit: the source-connector protocol's contract as scenarios any connector can run.

A connector author gives the kit a :class:`ConnectorKit`: a factory of fresh connector generations,
the configuration they start with, and a :class:`LogBackend` over the partitioned log they read (append
records to a partition, read a partition's end, add a partition). Each scenario
(:data:`~laminar_kafka.kafka_source.conformance.scenarios.SCENARIOS`) drives generations through the
protocol the way the node runtime does and raises :class:`ConformanceError`, naming the rule, when
the connector breaks it. :func:`~laminar_kafka.kafka_source.conformance.pytest_kit.conformance_tests`
turns them into pytest tests (``pytest -k conformance``); ``docs/connector-guide.md`` says how.

Two connectors run it here: :class:`~laminar_kafka.kafka_source.source.KafkaSource` against real
Kafka, and :class:`~laminar_kafka.kafka_source.conformance.memory.MemorySource`, the reference
connector over in-memory logs (also the example to start a connector from).
"""
from laminar_kafka.kafka_source.conformance.backend import ConformanceError, ConnectorKit, LogBackend

__all__ = ["ConformanceError", "ConnectorKit", "LogBackend"]
