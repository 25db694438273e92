"""Iceberg output through the CLI, on real Kafka: `run --table-format iceberg` lands a topic into an
Iceberg table (embedded SQLite catalog), `verify` proves it exact, `compact` runs while the node
runs and changes no row, and bad lake input is one line and exit 2 with nothing written."""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _table(output: str, namespace: str, name: str):  # type: ignore[no-untyped-def]
    fs, root = open_output(output)
    return load_table_or_none(open_catalog(IcebergSettings(namespace=namespace), fs, root), (namespace, name))


def test_run_verify_compact_iceberg(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("ice.cli")
    create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(3000)])
    output = str(tmp_path / "lake")
    lake = LakeTarget(output, TableFormat.ICEBERG, "p", IcebergSettings(namespace="p"))
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="p",
                              log_dir=tmp_path, extra=["--checkpoint-interval-ms", "300", "--table-format", "iceberg"])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok
        support.produce(kafka.bootstrap, topic, [b"w%d" % i for i in range(3000)])  # more epochs, more files
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok
        table_name = topic.replace(".", "_").replace("-", "_")
        table = _table(output, "p", table_name)
        assert table is not None and committed_epoch(table, "p") >= 2
        summary = table.current_snapshot().summary.additional_properties
        assert summary["laminar.pipeline"] == "p" and int(summary["laminar.epoch"]) == committed_epoch(table, "p")
        assert str(table.location()).rstrip("/").endswith(f"lake/{topic}")
        files_before = int(summary["total-data-files"])
        assert files_before >= 2

        verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic,
                     "--table-format", "iceberg", "--pipeline", "p", "--json")
        assert verify.returncode == 0, verify.stderr
        report = json.loads(verify.stdout)
        assert report["ok"] and [p["expected"] for p in report["partitions"]] == [2000] * 3
        assert report["files"] == files_before

        rows_before = table.scan().to_arrow().sort_by([("_partition", "ascending"), ("_offset", "ascending")])
        compact = cli("compact", "--output", output, "--pipeline", "p", "--topic", topic, "--expire-after", "0", "--json")
        assert compact.returncode == 0, compact.stderr
        table = _table(output, "p", table_name)
        rows_after = table.scan().to_arrow().sort_by([("_partition", "ascending"), ("_offset", "ascending")])
        assert rows_after.equals(rows_before)
        assert int(table.current_snapshot().summary.additional_properties["total-data-files"]) < files_before
        assert committed_epoch(table, "p") >= 2  # the pipeline's mark survives the compaction

        support.produce(kafka.bootstrap, topic, [b"x%d" % i for i in range(300)])  # the node goes on committing
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    # the audit fails when the table lists an epoch's file twice
    table = _table(output, "p", table_name)
    path = next(iter(table.scan().plan_files())).file.file_path
    duplicate = str(Path(path).with_name("copy-" + Path(path).name))
    Path(duplicate).write_bytes(Path(path).read_bytes())
    table.add_files([duplicate], check_duplicate_files=False)
    result = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic,
                 "--table-format", "iceberg", "--pipeline", "p")
    assert result.returncode == 1 and "FAILED" in result.stdout


def _run_fails(kafka: KafkaHandle, topic: str, output: Path, *more: str) -> str:
    result = cli("run", "--bootstrap", kafka.bootstrap, "--topic", topic, "--output", str(output),
                 "--pipeline", "p", "--table-format", "iceberg", *more)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    return lines[0]


def test_bad_lake_input_is_one_line_and_exit_2(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("ice-bad")
    create_topic(kafka.bootstrap, topic, 1)
    line = _run_fails(kafka, topic, tmp_path / "a", "--catalog-uri", "thrift://metastore:9083")
    assert "catalog-uri" in line
    assert not (tmp_path / "a").exists()
    line = _run_fails(kafka, topic, tmp_path / "b", "--catalog-uri", "http://127.0.0.1:9/catalog")
    assert "127.0.0.1:9" in line

    # a table whose schema cannot take the records: `value` is a string column, the records are binary
    output = tmp_path / "c"
    fs, root = open_output(str(output))
    catalog = open_catalog(IcebergSettings(namespace="p"), fs, root)
    catalog.create_namespace_if_not_exists("p")
    table_name = topic.replace("-", "_")
    catalog.create_table(("p", table_name), schema=pa.schema([("value", pa.int64())]))
    line = _run_fails(kafka, topic, output)
    assert table_name in line and "value" in line
    table = load_table_or_none(catalog, ("p", table_name))
    assert table is not None and table.current_snapshot() is None  # nothing written

    # the catalog file is not a database
    output = tmp_path / "d"
    (output / "_catalog").mkdir(parents=True)
    (output / "_catalog" / "catalog.db").write_bytes(b"not a sqlite file" * 100)
    line = _run_fails(kafka, topic, output)
    assert "catalog" in line
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(output / "_catalog" / "catalog.db").execute("select 1 from sqlite_master").fetchall()
