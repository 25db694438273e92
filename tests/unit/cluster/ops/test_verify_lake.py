"""`verify` on an Iceberg lake whose table is not where the flags say (embedded SQLite catalog under
``tmp_path``, no servers; the topic read is replaced by its result)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import laminar_kafka.cluster.node as node_module
import laminar_kafka.cluster.ops.verify as verify_module
from laminar_kafka.cli.main import main
from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.iceberg.tables import iceberg_schema_of, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat
from laminar_kafka.cluster.ops.verify_lake import read_iceberg_output
from tests.unit.cluster.iceberg_fakes import rows

TOPIC = "orders"


def lake_with_table(output: Path, namespace: str = "p1", table: str = TOPIC) -> Any:
    """An output whose embedded catalog holds ``namespace.table`` with 3 rows of partition 0."""
    fs, root = open_output(str(output))
    catalog = open_catalog(IcebergSettings(namespace=namespace), fs, root)
    catalog.create_namespace_if_not_exists(namespace)
    data = rows(TOPIC, 0, range(3))
    created = catalog.create_table((namespace, table), iceberg_schema_of(data.schema), location=f"{root}/{table}")
    created.append(data.cast(created.schema().as_arrow()))
    return fs, root


def target(output: Path, pipeline: str, **iceberg: Any) -> LakeTarget:
    return LakeTarget(str(output), TableFormat.ICEBERG, pipeline,
                      IcebergSettings(namespace=iceberg.pop("namespace", pipeline), **iceberg))


def test_the_right_pipeline_reads_the_table(tmp_path: Path) -> None:
    fs, root = lake_with_table(tmp_path / "out")
    scan = read_iceberg_output(target(tmp_path / "out", "p1"), fs, root, TOPIC, topic_has_records=True)
    assert scan.rows == 3 and list(scan.offsets[0]) == [0, 1, 2]


def test_a_wrong_pipeline_names_the_table_the_catalog_and_the_namespaces(tmp_path: Path) -> None:
    fs, root = lake_with_table(tmp_path / "out")
    with pytest.raises(VerifyError) as error:
        read_iceberg_output(target(tmp_path / "out", "p2"), fs, root, TOPIC, topic_has_records=True)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"no Iceberg table p2.orders in catalog sqlite:///{root}/_catalog/catalog.db: "
                              "is --pipeline right?")
    assert "no namespace p2; namespaces: p1; table orders is in p1" in message


def test_a_missing_table_in_an_existing_namespace_lists_its_tables(tmp_path: Path) -> None:
    fs, root = lake_with_table(tmp_path / "out", table="other")
    with pytest.raises(VerifyError, match=r"no Iceberg table p1\.orders .*: is --pipeline right\? "
                                          r"\(tables in namespace p1: other\)"):
        read_iceberg_output(target(tmp_path / "out", "p1"), fs, root, TOPIC, topic_has_records=True)
    with pytest.raises(VerifyError, match=r"is --namespace / --table right\?"):
        read_iceberg_output(target(tmp_path / "out", "p1", namespace="ns", table="t"), fs, root, TOPIC,
                            topic_has_records=True)


def test_an_empty_topic_without_a_table_scans_as_empty(tmp_path: Path) -> None:
    # a pipeline that has landed nothing yet created no table: nothing to audit, nothing missing
    fs, root = open_output(str(tmp_path / "out"))
    scan = read_iceberg_output(target(tmp_path / "out", "p2"), fs, root, TOPIC, topic_has_records=False)
    assert scan.rows == 0 and scan.files == 0 and not scan.offsets


def test_verify_with_a_wrong_pipeline_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    lake_with_table(tmp_path / "out")
    monkeypatch.setattr(node_module, "topic_partitions", lambda *_a, **_k: [(TOPIC, 0)])
    monkeypatch.setattr(verify_module, "read_topic", lambda *_a, **_k: ({0: np.arange(3)}, {0: 3}, {0: 0}))
    argv = ["verify", "--output", str(tmp_path / "out"), "--bootstrap", "127.0.0.1:1", "--topic", TOPIC,
            "--table-format", "iceberg"]
    assert main([*argv, "--pipeline", "p1"]) == 0
    assert "missing" in capsys.readouterr().out
    assert main([*argv, "--pipeline", "p2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: no Iceberg table p2.orders in catalog sqlite:///")
    assert "namespaces: p1" in err
