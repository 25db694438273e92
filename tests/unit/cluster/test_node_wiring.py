"""How the node builds its runtime, without a broker: the lake output of its table format, built with
the runtime's collaborators, and source generations that report their counts to the node's metrics
from construction (no hook set on a built source)."""
from __future__ import annotations

from pathlib import Path

from laminar_kafka.cluster.config import NodeSettings
from laminar_kafka.cluster.lake.parquet.tree import ParquetTree
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.node import build_runtime
from laminar_kafka.kafka_source import KafkaSource
from tests.unit.cluster.fakes import FakeCoordinator


def test_the_node_runtime_gets_its_lake_and_sources_that_report_to_the_node(tmp_path: Path) -> None:
    settings = NodeSettings(bootstrap="127.0.0.1:1", topics=("t",), output=str(tmp_path / "out"), node_id=1)
    metrics = NodeMetrics(1)
    runtime = build_runtime(settings, FakeCoordinator(), metrics)
    assert isinstance(runtime.lake, ParquetTree)

    source = runtime.generations._source_factory()  # what each generation starts with
    assert isinstance(source, KafkaSource)
    source.metrics.count_lost(3)
    source.metrics.count_client_replaced()
    sample = metrics.registry.get_sample_value
    assert sample("laminar_offsets_lost_total", {"node": "1"}) == 3
    assert sample("laminar_kafka_clients_replaced_total", {"node": "1"}) == 1
