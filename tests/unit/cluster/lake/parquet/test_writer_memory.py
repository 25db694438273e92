"""The sink's writers: one file per schema version per directory in an epoch, and writer memory
bounded by ``writer_memory_bytes`` (the pure choice of :func:`relieve`, and the sink under it: no
row lost or written twice, Arrow's allocations within the cap). Local filesystem, no servers."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published, open_output, publish
from laminar_kafka.cluster.lake.parquet.staged_files import DirectoryFiles
from laminar_kafka.cluster.lake.parquet.writer_memory import (
    LOW_WATER,
    OPEN_FILE_BYTES,
    ROW_GROUP_COLUMN_BYTES,
    UPLOAD_PART_BYTES,
    Relief,
    WriterUse,
    flush_growth,
    open_file_bytes,
    relieve,
)
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.staged_names import OutputStream

KIB = 1024


def use(key: int, buffered: int, open_: int = 0, growth: int = 0, last_used: int | None = None) -> WriterUse:
    return WriterUse(key, buffered, open_, growth, key if last_used is None else last_used)


# -- the pure choice ---------------------------------------------------------------------------


def test_nothing_is_relieved_under_the_cap_or_without_one() -> None:
    writers = [use(1, 40), use(2, 60)]
    assert relieve(writers, 100) == Relief()
    assert relieve(writers, 0) == Relief()
    assert relieve([], 10) == Relief()


def test_the_coldest_buffers_are_flushed_until_the_low_water_mark() -> None:
    # 4 x 30 = 120 > 100; the low-water mark is 75: the two coldest flushes bring it to 60
    writers = [use(1, 30, last_used=9), use(2, 30, last_used=3), use(3, 30, last_used=5), use(4, 30, last_used=7)]
    assert relieve(writers, 100) == Relief(flush=(2, 3))


def test_a_flush_that_frees_nothing_is_skipped_and_the_writer_retired_instead() -> None:
    # writer 1 (coldest) keeps as much as it flushes (its last column is the row): retired, not flushed
    writers = [use(1, 50, open_=10, growth=50), use(2, 50, open_=10, growth=0)]
    relief = relieve(writers, 100)
    assert relief.flush == (2,)  # 120 - 50 = 70 <= 75: done by the flush of 2
    assert relief.retire == ()
    hot_heavy = [use(1, 50, open_=10, growth=50), use(2, 10, open_=60, growth=0)]
    relief = relieve(hot_heavy, 100)  # 130: flushing 2 frees 10 (120), then retiring 1 frees 60
    assert relief == Relief(flush=(2,), retire=(1,))


def test_open_files_alone_over_the_cap_are_retired_coldest_first() -> None:
    writers = [use(key, 0, open_=30) for key in range(1, 6)]  # 150, nothing buffered
    assert relieve(writers, 100) == Relief(retire=(1, 2, 3))  # 150 -> 120 -> 90 -> 60


def test_ties_in_recency_go_by_key() -> None:
    writers = [use(2, 60, last_used=1), use(1, 60, last_used=1)]
    assert relieve(writers, 100).flush == (1,)  # 120 - 60 = 60: one flush is enough


writer_uses_strategy = st.lists(
    st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(0, 500), st.integers(0, 20)),
    max_size=12,
)


@given(writer_uses_strategy, st.integers(1, 2000))
def test_relief_reaches_the_low_water_mark_or_retires_everyone(raw: list[tuple[int, int, int, int]], cap: int) -> None:
    writers = [WriterUse(key, b, o, g, t) for key, (b, o, g, t) in enumerate(raw)]
    relief = relieve(writers, cap)
    total = sum(w.total for w in writers)
    if total <= cap:
        assert relief == Relief()
        return
    assert len(set(relief.flush)) == len(relief.flush) and len(set(relief.retire)) == len(relief.retire)
    by_key = {w.key: w for w in writers}
    after = {w.key: w.total for w in writers}
    for key in relief.flush:
        w = by_key[key]
        assert w.buffered_bytes > w.flush_growth  # only a flush that frees memory
        after[key] = w.open_bytes + w.flush_growth
    for key in relief.retire:
        after[key] = 0
    holding = [w for w in writers if w.total]
    assert sum(after.values()) <= cap * LOW_WATER or len(relief.retire) == len(holding)
    # retirement goes coldest first
    order = sorted(holding, key=lambda w: (w.last_used, w.key))
    assert list(relief.retire) == [w.key for w in order[: len(relief.retire)]]


def test_the_cost_of_an_open_file() -> None:
    local = open_file_bytes(columns=6, row_groups=3, last_column_bytes=100 * KIB, written=50 * 1024 * KIB,
                            buffered_output=False)
    assert local == OPEN_FILE_BYTES + 18 * ROW_GROUP_COLUMN_BYTES + 200 * KIB
    remote = open_file_bytes(columns=6, row_groups=3, last_column_bytes=100 * KIB, written=50 * 1024 * KIB,
                             buffered_output=True)
    assert remote == local + UPLOAD_PART_BYTES
    assert flush_growth(is_open=True, last_column_bytes=100, flushed_last_column_bytes=80) == 0
    assert flush_growth(is_open=True, last_column_bytes=100, flushed_last_column_bytes=130) == 60
    assert flush_growth(is_open=False, last_column_bytes=0, flushed_last_column_bytes=10) == OPEN_FILE_BYTES + 20


# -- one file per schema version ---------------------------------------------------------------


def rows(start: int, count: int, *, customer: int | None = None, note: bool = False) -> pa.RecordBatch:
    offsets = np.arange(start, start + count, dtype=np.int64)
    columns: dict[str, pa.Array] = {
        "customer_id": pa.array(offsets % 16 if customer is None else np.full(count, customer, np.int64)),
        "_topic": pa.array(["t"] * count),
        "_partition": pa.array(np.zeros(count, np.int32)),
        "_offset": pa.array(offsets),
        "_timestamp": pa.array(np.full(count, 1_700_000_000_000, np.int64), pa.timestamp("ms")),
        "payload": pa.array(np.full(count, 7, np.int64)).cast(pa.string()),
    }
    if note:
        columns["note"] = pa.array([f"n{o}" for o in offsets])
    return pa.record_batch(columns)


def sink_at(tmp_path: Path, **kwargs: object) -> tuple[ParquetSink, object, str]:
    fs, root = open_output(str(tmp_path / "out"))
    sink = ParquetSink(root, node_id=1, boot_id="b00t", filesystem=(fs, root), **kwargs)  # type: ignore[arg-type]
    return sink, fs, root


def published_offsets(fs: object, root: str, staged: tuple[str, ...]) -> tuple[list[str], Counter[int]]:
    publish(fs, root, staged)  # type: ignore[arg-type]
    files = list_published(fs, root)  # type: ignore[arg-type]
    return files, Counter(o for f in files for o in pq.read_table(f)["_offset"].to_pylist())


def test_alternating_schema_versions_write_one_file_per_version(tmp_path: Path) -> None:
    sink, fs, root = sink_at(tmp_path, row_group_rows=3, partitioning=PartitionSpec.parse("none"))
    for start in range(0, 40, 5):  # A, B, A, B...: 8 batches of 5 rows, row groups flushed in between
        sink.write(rows(start, 5, note=(start // 5) % 2 == 1))
    staged = sink.seal(1)
    assert len(staged) == 2
    files, offsets = published_offsets(fs, root, staged)
    assert offsets == Counter(range(40))  # every row exactly once
    by_columns = {pq.read_schema(f).names[-1]: pq.read_table(f)["_offset"].to_pylist() for f in files}
    assert sorted(by_columns["payload"]) == [o for o in range(40) if (o // 5) % 2 == 0]
    assert sorted(by_columns["note"]) == [o for o in range(40) if (o // 5) % 2 == 1]


def test_schema_versions_in_many_directories_write_one_file_per_version_and_directory(tmp_path: Path) -> None:
    sink, fs, root = sink_at(tmp_path, partitioning=PartitionSpec.parse("bucket[4](customer_id)"))
    for start in range(0, 400, 50):
        sink.write(rows(start, 50, note=(start // 50) % 2 == 1))
    staged = sink.seal(1)
    directories = Counter(path.rsplit("/", 1)[0] for path in staged)
    assert len(directories) == 4 and set(directories.values()) == {2}
    assert published_offsets(fs, root, staged)[1] == Counter(range(400))


def test_schema_metadata_alone_does_not_make_a_new_writer(tmp_path: Path) -> None:
    sink, fs, root = sink_at(tmp_path, partitioning=PartitionSpec.parse("none"))
    sink.write(rows(0, 3))
    tagged = rows(3, 3)
    sink.write(tagged.replace_schema_metadata({"registry.schema.id": "7"}))
    staged = sink.seal(1)
    assert len(staged) == 1
    assert published_offsets(fs, root, staged)[1] == Counter(range(6))


# -- the sink under a cap ------------------------------------------------------------------------


def test_a_negative_cap_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SinkError, match="writer_memory_bytes"):
        sink_at(tmp_path, writer_memory_bytes=-1)


def wide(start: int, count: int, customers: int, seed: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    payload = pa.array([bytes(b) for b in rng.integers(0, 256, (count, 512), dtype=np.uint8)], pa.binary())
    return pa.record_batch({
        "customer_id": pa.array(rng.integers(0, customers, count, dtype=np.int64)),
        "_topic": pa.array(["t"] * count),
        "_partition": pa.array(np.zeros(count, np.int32)),
        "_offset": pa.array(np.arange(start, start + count, dtype=np.int64)),
        "_timestamp": pa.array(np.full(count, 1_700_000_000_000, np.int64), pa.timestamp("ms")),
        "payload": payload,
    })


@pytest.mark.parametrize("cap", [256 * KIB, 1024 * KIB])
def test_under_a_cap_every_row_lands_once_and_arrow_holds_no_more_than_counted(tmp_path: Path, cap: int) -> None:
    sink, fs, root = sink_at(tmp_path, writer_memory_bytes=cap, partitioning=PartitionSpec.parse("bucket[16](customer_id)"))
    before = pa.total_allocated_bytes()
    written = 0
    staged: list[str] = []
    for epoch in (1, 2):
        for seed in range(12):
            batch = wide(written, 500, 1000, seed + 100 * epoch)  # ~270 KiB: 500 rows of 512 B payloads
            sink.write(batch)
            written += batch.num_rows
            assert sink.writer_memory <= cap
            # what Arrow holds beyond this test's own batch: the buffers and the open writers, counted
            assert pa.total_allocated_bytes() - before - batch.get_total_buffer_size() <= cap
            del batch
        staged += sink.seal(epoch)
        assert sink.writer_memory == 0 and sink.open_files == 0
    assert sink.early_closes > 0 and len(staged) > 2 * 16  # files came out smaller and more numerous
    assert published_offsets(fs, root, tuple(staged))[1] == Counter(range(written))


def test_without_a_cap_nothing_is_flushed_or_closed_early(tmp_path: Path) -> None:
    sink, fs, root = sink_at(tmp_path, writer_memory_bytes=0, partitioning=PartitionSpec.parse("bucket[16](customer_id)"))
    for seed in range(6):
        sink.write(wide(seed * 500, 500, 1000, seed))
    assert sink.writer_memory > 1024 * KIB
    staged = sink.seal(1)
    assert (sink.early_flushes, sink.early_closes, len(staged)) == (0, 0, 16)
    assert published_offsets(fs, root, staged)[1] == Counter(range(3000))


def test_narrow_rows_are_flushed_early_into_their_open_files(tmp_path: Path) -> None:
    # a small last column: a flush frees most of a buffer, so writers flush rather than close
    sink, fs, root = sink_at(tmp_path, writer_memory_bytes=256 * KIB, partitioning=PartitionSpec.parse("bucket[4](customer_id)"))
    narrow = [wide(i * 2000, 2000, 50, i).drop_columns(["payload"]) for i in range(10)]
    for batch in narrow:
        sink.write(batch.append_column("flag", pa.array(np.ones(batch.num_rows, np.int8))))
    assert sink.early_flushes > 0 and sink.writer_memory <= 256 * KIB
    staged = sink.seal(1)
    assert published_offsets(fs, root, staged)[1] == Counter(range(20000))


def test_a_buffered_slice_does_not_hold_its_whole_batch() -> None:
    files = DirectoryFiles(OutputStream.ROWS, "t", rows(0, 1).schema)
    big = rows(0, 10_000)
    files.add(big.slice(0, 10))
    assert files.buffer[0].get_total_buffer_size() < big.get_total_buffer_size() / 100
    assert files.buffer[0]["_offset"].to_pylist() == list(range(10))
    files.add(big)  # a whole batch is buffered as it is
    assert files.buffer[1] is big
