"""The Kafka Connect worker's and Iceberg sink's configuration (`devstack.jvm.connect_config`), and the
pure arithmetic of the side-by-side benchmark (`bench/connect_figures.py`)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pyiceberg.types import BinaryType, IntegerType, LongType, StringType, TimestampType

from laminar_kafka.devstack.jvm.artifacts import pinned_versions
from laminar_kafka.devstack.jvm.connect import CONNECT_POM_PATH, pinned_connect_versions
from laminar_kafka.devstack.jvm.connect_config import (
    BYTE_ARRAY_CONVERTER,
    SINK_CONNECTOR_CLASS,
    IcebergSinkSettings,
    WorkerSettings,
    iceberg_sink_config,
    render_properties,
    sink_table_schema,
    worker_properties,
)


def _figures() -> ModuleType:
    path = Path(__file__).resolve().parents[4] / "bench" / "connect_figures.py"
    spec = importlib.util.spec_from_file_location("connect_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


figures = _figures()


def test_worker_properties_name_the_internal_topics_with_replication_one() -> None:
    settings = WorkerSettings(bootstrap="127.0.0.1:9092", group_id="g1", rest_port=18083, storage_prefix="p")
    properties = worker_properties(settings)
    assert properties["bootstrap.servers"] == "127.0.0.1:9092"
    assert properties["group.id"] == "g1"
    assert (properties["config.storage.topic"], properties["offset.storage.topic"], properties["status.storage.topic"]) \
        == ("p-configs", "p-offsets", "p-status")
    assert all(properties[f"{kind}.storage.replication.factor"] == "1" for kind in ("config", "offset", "status"))
    assert properties["listeners"] == "http://127.0.0.1:18083"
    assert properties["rest.advertised.port"] == "18083"
    assert properties["value.converter"] == properties["key.converter"] == BYTE_ARRAY_CONVERTER
    assert properties["offset.flush.interval.ms"] == "500"


def test_sink_config_builds_the_raw_row_and_points_at_the_rest_catalog() -> None:
    config = iceberg_sink_config(IcebergSinkSettings(topic="t.1", table="ns.events", catalog_uri="http://127.0.0.1:1",
                                                     control_topic="ctl", commit_interval_ms=1500, tasks=2))
    assert config["connector.class"] == SINK_CONNECTOR_CLASS
    assert (config["topics"], config["tasks.max"], config["iceberg.tables"]) == ("t.1", "2", "ns.events")
    assert (config["iceberg.catalog.type"], config["iceberg.catalog.uri"]) == ("rest", "http://127.0.0.1:1")
    assert config["iceberg.control.topic"] == "ctl"
    assert config["iceberg.control.commit.interval-ms"] == "1500"
    assert config["value.converter"] == BYTE_ARRAY_CONVERTER
    # the transforms run in order: wrap the bytes, then add the coordinates
    assert config["transforms"] == "hoist,coordinates"
    assert config["transforms.hoist.type"].endswith("HoistField$Value")
    assert config["transforms.hoist.field"] == "value"
    assert config["transforms.coordinates.type"].endswith("InsertField$Value")
    inserted = {config[f"transforms.coordinates.{kind}.field"] for kind in ("topic", "partition", "offset", "timestamp")}
    # every column the sink's table has is either the hoisted value or an inserted coordinate
    assert inserted | {"value"} == {column.name for column in sink_table_schema().fields}
    assert "iceberg.tables.auto-create-enabled" not in config


def test_sink_table_schema_matches_a_raw_node_table() -> None:
    schema = sink_table_schema()
    assert [(f.field_id, f.name, f.field_type, f.required) for f in schema.fields] == [
        (1, "_topic", StringType(), True), (2, "_partition", IntegerType(), True), (3, "_offset", LongType(), True),
        (4, "_timestamp", TimestampType(), False), (5, "value", BinaryType(), False),
    ]


@pytest.mark.parametrize("settings", [
    {"table": "no_namespace"}, {"commit_interval_ms": 0}, {"tasks": 0}, {"commit_timeout_ms": -1},
])
def test_sink_settings_refuse_what_the_sink_would_reject(settings: dict[str, object]) -> None:
    values: dict[str, object] = {"topic": "t", "table": "ns.t", "catalog_uri": "http://x", "control_topic": "c",
                                 **settings}
    with pytest.raises(ValueError):
        IcebergSinkSettings(**values)  # type: ignore[arg-type]


def test_render_properties_escapes_what_java_properties_reads_specially() -> None:
    text = render_properties({"a": "http://h:1", "b": "x=y", "c": "C:\\dir"})
    assert text == "a=http\\://h\\:1\nb=x\\=y\nc=C\\:\\\\dir\n"


def test_connect_pom_pins_the_brokers_kafka() -> None:
    assert CONNECT_POM_PATH.exists()
    kafka, iceberg = pinned_connect_versions()
    assert kafka == pinned_versions()[0]
    assert iceberg.startswith("1.")


def test_cpu_seconds_reads_utime_and_stime_past_a_command_with_spaces() -> None:
    fields = ["S"] + [str(n) for n in range(4, 14)] + ["250", "150"] + ["0"] * 30
    stat = "4242 (java (main) x) " + " ".join(fields)
    assert figures.cpu_seconds(stat, 100) == pytest.approx(4.0)


def test_status_kib_finds_a_line_and_refuses_a_missing_one() -> None:
    text = "Name:\tjava\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
    assert figures.status_kib(text, "VmRSS") == 102400
    assert figures.status_kib(text, "VmHWM") == 204800
    with pytest.raises(KeyError):
        figures.status_kib(text, "VmSwap")


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert figures.percentile(values, 0.5) == 50
    assert figures.percentile(values, 0.99) == 99
    assert figures.percentile(values, 1.0) == 100
    assert figures.percentile(values, 0.0) == 1
    assert figures.percentile([7.0], 0.99) == 7
    assert figures.percentile([], 0.5) is None
    with pytest.raises(ValueError):
        figures.percentile(values, 1.5)


def test_audit_exact_missing_duplicated_and_foreign() -> None:
    ends = {0: 3, 1: 2}
    exact = figures.audit_coordinates([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)], ends)
    assert exact.exact and (exact.expected, exact.rows) == (5, 5)
    flawed = figures.audit_coordinates([(0, 0), (0, 0), (0, 0), (0, 2), (1, 1), (1, 5), (2, 0)], ends)
    assert (flawed.missing, flawed.duplicated, flawed.foreign, flawed.rows) == (2, 2, 2, 7)
    assert not flawed.exact
    assert figures.audit_coordinates([], {0: 0}).exact


def test_metric_means_and_their_delta_between_two_scrapes() -> None:
    families = ("laminar_publish_seconds", "laminar_checkpoint_seconds")
    first = figures.metric_means(
        'laminar_publish_seconds_sum{node="1"} 2.0\nlaminar_publish_seconds_count{node="1"} 4.0\n'
        'laminar_publish_seconds_bucket{le="1.0",node="1"} 4.0\n# HELP laminar_publish_seconds x\n', families)
    assert first == {"laminar_publish_seconds": {"count": 4.0, "mean": 0.5}}  # no checkpoint samples: left out
    second = figures.metric_means(
        'laminar_publish_seconds_sum{node="1"} 5.0\nlaminar_publish_seconds_count{node="1"} 6.0\n', families)
    assert figures.breakdown_delta(first, second) == {"publish_seconds": {"count": 2, "mean_s": 1.5}}
    assert figures.breakdown_delta(second, second) == {}
    assert figures.breakdown_delta({}, {}) == {}
