"""Compaction and snapshot expiry: atomic Iceberg commits that never change the rows a reader sees."""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

import laminar_kafka.cluster.lake.iceberg.maintenance as maintenance
from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.maintenance import compact, expire, plan_bins
from laminar_kafka.cluster.lake.iceberg.tables import data_file_count
from laminar_kafka.cluster.lake.parquet.compaction_plan import Codec
from tests.unit.cluster.iceberg_fakes import DAY_1, DAY_2, Lake, rows


def all_rows(table: Table) -> Counter[tuple[object, ...]]:
    data = table.scan().to_arrow()
    return Counter(tuple((k, v) for k, v in sorted(row.items())) for row in data.to_pylist())


def landed(tmp_path: Path, epochs: int = 6) -> tuple[Lake, Table]:
    """Two nodes, two days, ``epochs`` epochs: 4 small files per epoch."""
    lake = Lake(tmp_path)
    output = lake.output()
    for epoch in range(1, epochs + 1):
        for node, when in ((1, DAY_1), (2, DAY_2)):
            base = epoch * 100 + node * 10
            lake.stage(epoch, rows("orders", node, range(base, base + 3), when=when), node=node)
            lake.stage(epoch, rows("orders", node + 2, range(base, base + 2), when=when), node=node)
        lake.publish(output, epoch)
    return lake, output.table("orders")


def test_plan_bins_packs_small_files_up_to_the_target() -> None:
    sizes = [("a", 40), ("b", 40), ("c", 40), ("big", 60), ("d", 10)]
    assert plan_bins(sizes, target_file_bytes=100, min_input_files=2) == [["a", "b"], ["c", "d"]]
    assert plan_bins(sizes, target_file_bytes=100, min_input_files=3) == []
    assert plan_bins([("a", 1)], target_file_bytes=100, min_input_files=1) == []


def test_compact_rewrites_small_files_per_partition_and_keeps_every_row(tmp_path: Path) -> None:
    _, table = landed(tmp_path)
    before = all_rows(table)
    assert data_file_count(table) == 24
    report = compact(table, target_file_bytes=64 * 1024 * 1024)
    assert (report.files_before, report.files_after) == (24, 2)
    assert report.bytes_rewritten > 0 and report.snapshot_id == table.current_snapshot().snapshot_id
    assert all_rows(table) == before
    assert committed_epoch(table, "pipe") == 6
    snapshot = table.current_snapshot()
    assert snapshot.summary["laminar.operation"] == "compact"
    assert snapshot.summary.operation.value == "overwrite"
    for task in table.scan().plan_files():
        assert "/orders/data/_timestamp_day=" in task.file.file_path
        days = pq.read_table(task.file.file_path, columns=["_timestamp"]).column(0).cast("date32").unique()
        assert len(days) == 1  # each output file stays within one partition
        assert {"_topic", "_partition", "_offset"} <= set(pq.read_schema(task.file.file_path).names)
    assert compact(table, target_file_bytes=64 * 1024 * 1024).snapshot_id is None  # nothing left to do


@pytest.mark.parametrize(("codec", "parquet_name"), [(Codec.ZSTD, "ZSTD"), (Codec.GZIP, "GZIP"), (Codec.NONE, "UNCOMPRESSED")])
def test_compact_writes_its_files_with_the_codec(tmp_path: Path, codec: Codec, parquet_name: str) -> None:
    _, table = landed(tmp_path, epochs=2)
    before = all_rows(table)
    compact(table, target_file_bytes=64 * 1024 * 1024, codec=codec)
    table.refresh()
    assert all_rows(table) == before
    for task in table.scan().plan_files():
        metadata = pq.read_metadata(task.file.file_path)
        assert {metadata.row_group(0).column(i).compression for i in range(metadata.num_columns)} == {parquet_name}


def test_compact_retries_when_a_pipeline_commit_lands_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake, table = landed(tmp_path, epochs=3)
    lake.stage(4, rows("orders", 0, range(7), when=DAY_1))
    original = maintenance._rewrite
    pipeline_commits: list[int] = []
    rewrites: list[int] = []

    def rewrite_while_the_pipeline_commits(table, group, written, codec):  # type: ignore[no-untyped-def]
        if not pipeline_commits:
            pipeline_commits.append(lake.publish(lake.output(), 4))
        rewrites.append(len(group))
        return original(table, group, written, codec)

    monkeypatch.setattr(maintenance, "_rewrite", rewrite_while_the_pipeline_commits)
    expected = all_rows(lake.output().table("orders")) + Counter()
    report = compact(table, target_file_bytes=64 * 1024 * 1024)
    assert pipeline_commits == [1]
    fresh = lake.output().table("orders")
    assert len(all_rows(fresh)) == len(expected) + 7
    assert all(count == 1 for count in all_rows(fresh).values())
    # the lost race is committed again on top of the pipeline's commit, without rewriting: the
    # compacted files plus epoch 4's file, which arrived after the planning
    assert len(rewrites) == 2  # one per day partition, once (planning again would rewrite them twice)
    assert report.files_after == 3 and committed_epoch(fresh, "pipe") == 4
    abandoned = [p for p in (tmp_path / "out" / "orders" / "data").rglob("*.parquet")
                 if str(p) not in {t.file.file_path for t in fresh.scan().plan_files()}]
    assert abandoned == []  # the outputs of the lost attempt were deleted


def test_expire_deletes_only_files_no_retained_snapshot_references(tmp_path: Path) -> None:
    lake, table = landed(tmp_path, epochs=3)
    staged_later = lake.stage(9, rows("orders", 0, [1]))
    old_files = {t.file.file_path for t in table.scan().plan_files()}
    before = all_rows(table)
    compact(table, target_file_bytes=64 * 1024 * 1024)
    compacted = {t.file.file_path for t in table.scan().plan_files()}
    report = expire(table, older_than=dt.timedelta(0), retain_last=1)
    assert report.snapshots_expired == len(old_files) // 4  # the 3 epoch snapshots
    assert report.files_deleted == len(old_files)
    assert not any(os.path.exists(path) for path in old_files)
    assert all(os.path.exists(path) for path in compacted)
    assert (tmp_path / "out" / staged_later).exists()
    assert all_rows(table) == before and len(table.snapshots()) == 1


def test_expire_keeps_files_still_referenced(tmp_path: Path) -> None:
    _, table = landed(tmp_path, epochs=3)
    files = {t.file.file_path for t in table.scan().plan_files()}
    report = expire(table, older_than=dt.timedelta(0), retain_last=1)
    assert report.snapshots_expired == 2 and report.files_deleted == 0  # appends only: all still live
    assert all(os.path.exists(path) for path in files)
    assert expire(table, older_than=dt.timedelta(days=1)).snapshots_expired == 0
