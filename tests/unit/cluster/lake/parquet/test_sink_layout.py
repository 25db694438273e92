"""The sink's Hive-style layout: partition directories, recovery below them, the open-file bound,
and what lake readers (pyarrow.dataset, DuckDB) see (local filesystem, no servers)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.sink import (
    REJECTED_DIR,
    STAGING_DIR,
    ParquetSink,
    final_path,
    list_published,
    open_output,
    parse_staged,
    publish,
    recover,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec

DAY0 = dt.datetime(2024, 5, 1, 10, 30)


def rows(offsets: list[int], stamps: list[dt.datetime | None], topics: list[str] | None = None) -> pa.RecordBatch:
    return pa.record_batch({
        "_topic": pa.array(topics or ["t"] * len(offsets)).dictionary_encode(),
        "_partition": pa.array([0] * len(offsets), pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array(stamps, pa.timestamp("ms")),
    })


def days(count: int) -> list[dt.datetime]:
    return [DAY0 + dt.timedelta(days=i) for i in range(count)]


def sink_at(tmp_path: Path, boot: str = "b", node: int = 1, **kwargs: object) -> ParquetSink:
    fs, root = open_output(str(tmp_path / "out"))
    return ParquetSink(root, node_id=node, boot_id=boot, filesystem=(fs, root), **kwargs)  # type: ignore[arg-type]


def relative(sink: ParquetSink, paths: list[str]) -> list[str]:
    return [p[len(sink.root) + 1:] for p in paths]


def offsets_of(paths: list[str]) -> list[int]:
    return sorted(o for p in paths for o in pq.read_table(p)["_offset"].to_pylist())


def test_rows_are_staged_and_published_in_topic_and_day_directories(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    sink.write(rows([0, 1, 2, 3], [DAY0, None, DAY0 + dt.timedelta(days=1), DAY0], ["a", "a", "a", "b.c"]))
    assert sink.open_directories == 4
    staged = sink.seal(4)
    assert sink.open_directories == 0
    assert sorted(posix.rsplit("/", 1)[0] for posix in staged) == [
        f"{STAGING_DIR}/a/dt=2024-05-01", f"{STAGING_DIR}/a/dt=2024-05-02",
        f"{STAGING_DIR}/a/dt=__HIVE_DEFAULT_PARTITION__", f"{STAGING_DIR}/b.c/dt=2024-05-01",
    ]
    assert all(parse_staged(s).epoch == 4 for s in staged)  # type: ignore[union-attr]
    assert publish(sink.fs, sink.root, staged) == 4
    published = relative(sink, list_published(sink.fs, sink.root))
    assert sorted(published) == sorted(final_path(s) for s in staged)
    assert [p.rsplit("/", 1)[0] for p in published] == [
        "a/dt=2024-05-01", "a/dt=2024-05-02", "a/dt=__HIVE_DEFAULT_PARTITION__", "b.c/dt=2024-05-01",
    ]
    assert offsets_of(list_published(sink.fs, f"{sink.root}/a")) == [0, 1, 2]


@pytest.mark.parametrize(("granularity", "directories"), [
    (PartitionSpec.parse("hour"), ["t/dt=2024-05-01/hour=10", "t/dt=2024-05-01/hour=11"]),
    (PartitionSpec(), ["t"]),
])
def test_hour_and_no_granularity(tmp_path: Path, granularity: PartitionSpec, directories: list[str]) -> None:
    sink = sink_at(tmp_path, partitioning=granularity)
    sink.write(rows([0, 1], [DAY0, DAY0 + dt.timedelta(hours=1)]))
    publish(sink.fs, sink.root, sink.seal(1))
    assert sorted({p.rsplit("/", 1)[0] for p in relative(sink, list_published(sink.fs, sink.root))}) == directories


def test_the_rejected_stream_stays_flat(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    bad = pa.record_batch({"_offset": pa.array([9], pa.int64())})
    sink.write(rows([0], [DAY0]), bad)
    staged = sink.seal(1)
    assert sorted(staged)[0] == f"{STAGING_DIR}/rejected.epoch-0000000001.node-1.boot-b.seq-00000002.parquet"
    publish(sink.fs, sink.root, staged)
    assert relative(sink, list_published(sink.fs, f"{sink.root}/{REJECTED_DIR}")) == [
        f"{REJECTED_DIR}/epoch-0000000001.node-1.boot-b.seq-00000002.parquet",
    ]


def test_recover_settles_staged_files_in_sub_directories(tmp_path: Path) -> None:
    live, dead = sink_at(tmp_path, "live", 1), sink_at(tmp_path, "dead", 2)
    live.write(rows([0, 1], days(2)))
    committed = live.seal(1)
    dead.write(rows([10, 11], days(2)))
    dropped = dead.seal(1)  # acked, but epoch 1 committed without it
    live.write(rows([2], [DAY0]))
    pending = live.seal(2)  # not committed yet
    dead.write(rows([12], [DAY0]))
    dead.flush()  # an open file of a dead boot, in a sub-directory
    report = recover(live.fs, live.root, latest_epoch=1, manifest_outputs={1: committed}.get, live_boots={"live"})
    assert (report.published, report.deleted, report.kept) == (2, 3, 1)
    assert offsets_of(list_published(live.fs, live.root)) == [0, 1]
    staged_now = sorted(str(p.relative_to(live.root)) for p in Path(live.root, STAGING_DIR).rglob("*.parquet"))
    assert staged_now == list(pending) and not set(dropped) & set(staged_now)


def test_at_most_max_open_files_stay_open_and_closed_ones_are_sealed_later(tmp_path: Path) -> None:
    sink = sink_at(tmp_path, row_group_rows=1, max_open_files=2)
    for offset, stamp in enumerate(days(5)):  # late data over five days: five directories
        sink.write(rows([offset], [stamp]))
        assert sink.open_files <= 2
    sink.write(rows([5], [DAY0]))  # back to the first day, whose file was closed: a new file
    assert (sink.open_files, sink.open_directories, sink.files_closed_early) == (2, 5, 4)
    staged = sink.seal(1)
    assert len(staged) == 6 and sink.open_files == 0
    publish(sink.fs, sink.root, staged)
    assert offsets_of(list_published(sink.fs, sink.root)) == list(range(6))
    assert len(list_published(sink.fs, f"{sink.root}/t/dt=2024-05-01")) == 2


def test_rows_that_cannot_be_partitioned_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    sink = sink_at(tmp_path)
    with pytest.raises(SinkError, match="lake readers skip"):
        sink.write(rows([0, 1], [DAY0, DAY0], ["ok", "__consumer_offsets"]))
    with pytest.raises(SinkError, match="_timestamp is missing"):
        sink.write(pa.record_batch({"_topic": pa.array(["t"])}))
    assert sink.seal(1) == ()
    with pytest.raises(SinkError):
        sink_at(tmp_path, default_topic="../up")


def test_a_batch_without_topic_lands_under_the_default_topic(tmp_path: Path) -> None:
    sink = sink_at(tmp_path, default_topic="events", partitioning=PartitionSpec())
    sink.write(pa.record_batch({"_offset": pa.array([0], pa.int64())}))
    (staged,) = sink.seal(1)
    assert final_path(staged) == "events/epoch-0000000001.node-1.boot-b.seq-00000001.parquet"


def test_list_published_walks_the_tree_and_skips_underscore_and_dot_directories(tmp_path: Path) -> None:
    root = tmp_path / "out"
    for path in ("t/dt=2024-05-01/a.parquet", "t/dt=2024-05-01/hour=01/b.parquet", "u/c.parquet",
                 "_staging/t/dt=2024-05-01/d.parquet", "_rejected/e.parquet", "t/.tmp/f.parquet",
                 "t/_temporary/g.parquet", "t/dt=2024-05-01/notes.txt", "top.parquet"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"")
    fs, base = open_output(str(root))
    assert relative(ParquetSink(base, node_id=1, boot_id="x", filesystem=(fs, base)), list_published(fs, base)) == [
        "t/dt=2024-05-01/a.parquet", "t/dt=2024-05-01/hour=01/b.parquet", "top.parquet", "u/c.parquet",
    ]


def lake_with_staged_and_open_files(tmp_path: Path) -> ParquetSink:
    """Epoch 1 published; epoch 2 sealed but not published; epoch 3's rows in open files."""
    sink = sink_at(tmp_path)
    sink.write(rows([0, 1, 2], [DAY0, None, DAY0 + dt.timedelta(days=1)]), pa.record_batch({"_offset": [99]}))
    publish(sink.fs, sink.root, sink.seal(1))
    sink.write(rows([3, 4], [DAY0, None]))
    sink.seal(2)
    sink.write(rows([5], [DAY0]))
    sink.flush()
    return sink


def test_pyarrow_dataset_reads_the_published_tree_and_never_the_staging_files(tmp_path: Path) -> None:
    sink = lake_with_staged_and_open_files(tmp_path)
    dataset = ds.dataset(sink.root, format="parquet", partitioning="hive", exclude_invalid_files=True,
                         ignore_prefixes=["_", "."])
    table = dataset.to_table().sort_by("_offset")
    assert table["_offset"].to_pylist() == [0, 1, 2]
    assert table["dt"].to_pylist() == ["2024-05-01", None, "2024-05-02"]
    assert all(STAGING_DIR not in f and REJECTED_DIR not in f for f in dataset.files)


def test_duckdb_reads_the_published_tree_with_hive_partitioning(tmp_path: Path) -> None:
    sink = lake_with_staged_and_open_files(tmp_path)
    query = (f"SELECT _offset, CAST(dt AS VARCHAR) FROM read_parquet('{sink.root}/t/**/*.parquet', "
             "hive_partitioning = true) ORDER BY _offset")
    with duckdb.connect() as connection:
        assert connection.sql(query).fetchall() == [(0, "2024-05-01"), (1, None), (2, "2024-05-02")]
