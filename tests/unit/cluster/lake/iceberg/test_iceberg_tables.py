"""Iceberg catalogs, preflight checks, paths and schemas (embedded SQLite catalog, no servers)."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.tables import (
    absolute_path,
    ensure_namespace,
    iceberg_ready,
    loggable_properties,
    open_catalog,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.errors import ConfigurationError
from tests.unit.cluster.iceberg_fakes import Lake, rows

SCHEMA = rows("orders", 0, [0]).schema


def test_absolute_path_of_local_and_s3_outputs() -> None:
    assert absolute_path(pafs.LocalFileSystem(), "/data/out", "t/dt=2026-01-01/f.parquet") == "/data/out/t/dt=2026-01-01/f.parquet"
    s3 = pafs.S3FileSystem(anonymous=True, region="us-east-1")
    assert absolute_path(s3, "bucket/prefix", "t/f.parquet") == "s3://bucket/prefix/t/f.parquet"
    assert absolute_path(s3, "bucket", "t") == "s3://bucket/t"
    with pytest.raises(SinkError, match="subtree"):
        absolute_path(pafs.SubTreeFileSystem("/x", pafs.LocalFileSystem()), "", "f")


def test_check_creates_namespace_and_table_and_nothing_else(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    output = lake.output()
    output.check(["orders"], SCHEMA)
    table = output.table("orders")
    assert table.current_snapshot() is None
    assert [f.name for f in table.spec().fields] == ["_timestamp_day"]
    assert str(table.schema().find_field("_topic").field_type) == "string"  # no dictionary type
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_catalog", "orders"]
    output.check(["orders"], SCHEMA)  # an existing, matching table passes


def test_check_without_schema_creates_no_table(tmp_path: Path) -> None:
    output = Lake(tmp_path).output()
    output.check(["orders"], None)
    with pytest.raises(SinkError, match="does not exist"):
        output.table("orders")


def test_check_refuses_a_table_partitioned_otherwise(tmp_path: Path) -> None:
    Lake(tmp_path, partitioning=PartitionSpec.parse("hour")).output().check(["orders"], SCHEMA)
    with pytest.raises(ConfigurationError, match=r"pipe\.orders is partitioned by hour\(_timestamp\), but setting "
                                          r"partition-by is day here \(day\(_timestamp\)\)$"):
        Lake(tmp_path, partitioning=PartitionSpec.parse("day")).output().check(["orders"], SCHEMA)
    with pytest.raises(ConfigurationError, match=r"pipe\.orders is partitioned by hour\(_timestamp\), but setting "
                                          r"partition-by is none here \(unpartitioned\)$") as refused:
        Lake(tmp_path, partitioning=PartitionSpec()).output().check(["orders"], SCHEMA)
    assert "\n" not in str(refused.value), "one line (a node's stderr line)"


def test_check_refuses_records_the_table_cannot_take(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.output().check(["orders"], SCHEMA)
    changed = SCHEMA.set(SCHEMA.get_field_index("value"), pa.field("value", pa.int64()))
    with pytest.raises(ConfigurationError, match=r"pipe\.orders .*column value is binary in the table but long"):
        lake.output().check(["orders"], changed)


def test_a_missing_partition_column_is_a_config_error(tmp_path: Path) -> None:
    schema = SCHEMA.remove(SCHEMA.get_field_index("_timestamp"))
    with pytest.raises(ConfigurationError, match="_timestamp"):
        Lake(tmp_path).output().check(["orders"], schema)


def test_bad_catalogs_are_one_line_config_errors(tmp_path: Path) -> None:
    local = pafs.LocalFileSystem()
    bad_sqlite = IcebergSettings(namespace="p", catalog_uri=f"sqlite:///{tmp_path}/missing/dir/c.db")
    with pytest.raises(ConfigurationError, match="sqlite:///.*missing/dir") as caught:
        open_catalog(bad_sqlite, local, str(tmp_path))
    assert "\n" not in str(caught.value)
    s3 = pafs.S3FileSystem(anonymous=True, region="us-east-1")
    with pytest.raises(ConfigurationError, match="an s3 output needs catalog-uri"):
        open_catalog(IcebergSettings(namespace="p"), s3, "bucket/out")
    with pytest.raises(ConfigurationError, match="not supported"):
        IcebergSettings(namespace="p", catalog_uri="thrift://hive:9083")
    started = time.monotonic()
    unreachable = IcebergSettings(namespace="p", catalog_uri="http://user:hunter2@127.0.0.1:9/catalog",
                                  properties={"token": "t0ps3cret"})
    with pytest.raises(ConfigurationError, match=r"cannot open iceberg catalog http://127\.0\.0\.1:9/catalog") as caught:
        open_catalog(unreachable, local, str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and "hunter2" not in message and "t0ps3cret" not in message
    assert time.monotonic() - started < 15


def test_explicit_sqlite_catalog(tmp_path: Path) -> None:
    settings = IcebergSettings(namespace="pipe", catalog_uri=f"sqlite:///{tmp_path}/cat.db")
    lake = Lake(tmp_path, settings=settings)
    lake.output().check(["orders"], SCHEMA)
    assert (tmp_path / "cat.db").exists()
    assert not (tmp_path / "out" / "_catalog").exists()


def test_secret_properties_are_masked() -> None:
    shown = loggable_properties({"s3.endpoint": "http://x", "s3.secret-access-key": "s", "token": "t",
                                 "credential": "c", "s3.access-key-id": "k", "rest.password": "p"})
    assert shown == {"s3.endpoint": "http://x", "s3.secret-access-key": "***", "token": "***",
                     "credential": "***", "s3.access-key-id": "***", "rest.password": "***"}


def test_dictionaries_become_their_value_type_at_any_depth() -> None:
    dictionary = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema([
        pa.field("a", dictionary),
        pa.field("s", pa.struct([pa.field("d", dictionary)])),
        pa.field("l", pa.list_(dictionary)),
        pa.field("m", pa.map_(pa.string(), dictionary)),
    ])
    ready = iceberg_ready(schema)
    assert ready.field("a").type == pa.string()
    assert ready.field("s").type == pa.struct([pa.field("d", pa.string())])
    assert ready.field("l").type.value_type == pa.string()
    assert ready.field("m").type.item_type == pa.string()


def _start_like_a_node(tmp_path: Path, start: Any, failures: Any) -> None:
    start.wait(timeout=60)
    try:
        Lake(tmp_path).output().check(["orders"], SCHEMA)  # opens the catalog, creates namespace and table
    except ConfigurationError as exc:
        failures.put(str(exc))


def test_nodes_starting_together_on_a_fresh_embedded_catalog_all_succeed(tmp_path: Path) -> None:
    # Regression (CI): SqlCatalog creates its tables check-then-create, so nodes starting together
    # on a fresh output raced and one exited with "table iceberg_tables already exists"; the
    # namespace and the table are created check-then-create too.
    context = multiprocessing.get_context("fork")
    failures = context.Queue()
    for attempt in range(5):
        start = context.Barrier(6)
        openers = [context.Process(target=_start_like_a_node, args=(tmp_path / f"try{attempt}", start, failures))
                   for _ in range(6)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(timeout=120)
            assert opener.exitcode == 0
    assert failures.empty()


class _LateNamespaceCatalog:
    """A catalog where another node created the namespace between our check and our insert."""

    def __init__(self, *, exists_after: bool) -> None:
        self.exists_after = exists_after

    def create_namespace_if_not_exists(self, namespace: str) -> None:
        raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed")

    def namespace_exists(self, namespace: str) -> bool:
        return self.exists_after


def test_a_namespace_created_concurrently_is_fine_and_other_failures_are_not() -> None:
    ensure_namespace(_LateNamespaceCatalog(exists_after=True), "pipe")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="IntegrityError"):
        ensure_namespace(_LateNamespaceCatalog(exists_after=False), "pipe")  # type: ignore[arg-type]
