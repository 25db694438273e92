"""The audit's pure logic and the output scan (local files, no servers)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.ops.verify import OutputScan, audit, read_output


def scan_of(rows: dict[int, list[int]]) -> OutputScan:
    return OutputScan(offsets={p: np.array(o, np.int64) for p, o in rows.items()}, files=1,
                      rows=sum(map(len, rows.values())))


def test_exact_output_is_ok() -> None:
    report = audit("t", {0: np.arange(10), 1: np.arange(3)}, {0: 10, 1: 3}, scan_of({0: list(range(10)), 1: [2, 0, 1]}))
    assert report.ok and report.missing == 0 and report.duplicated == 0
    assert [p.present for p in report.partitions] == [10, 3]


def test_missing_and_duplicated_are_counted_per_partition() -> None:
    report = audit("t", {0: np.arange(5), 1: np.arange(4)}, {0: 5, 1: 4}, scan_of({0: [0, 1, 1, 1, 4], 1: [0, 1, 2, 3]}))
    p0, p1 = report.partitions
    assert (p0.expected, p0.present, p0.missing, p0.duplicated) == (5, 3, 2, 2)
    assert p0.first_missing == (2, 3)
    assert p1.ok and not report.ok


def test_rows_beyond_the_high_watermark_do_not_fail_but_unexpected_ones_do() -> None:
    # offsets 2 is a transaction marker (not expected); 9 is beyond the watermark taken first
    report = audit("t", {0: np.array([0, 1, 3])}, {0: 4}, scan_of({0: [0, 1, 3, 9]}))
    assert report.ok and report.partitions[0].beyond == 1
    bad = audit("t", {0: np.array([0, 1, 3])}, {0: 4}, scan_of({0: [0, 1, 2, 3]}))
    assert not bad.ok and bad.partitions[0].unexpected == 1


def test_partition_with_nothing_published_is_all_missing() -> None:
    report = audit("t", {0: np.arange(3), 1: np.arange(0)}, {0: 3, 1: 0}, scan_of({}))
    assert report.missing == 3 and report.partitions[1].ok


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(0, 60))
def test_counts_are_consistent(rows: list[int], high: int) -> None:
    expected = np.arange(high)
    p = audit("t", {0: expected}, {0: high}, scan_of({0: rows})).partitions[0]
    in_range = [r for r in rows if r < high]
    assert p.present + p.missing == p.expected == high
    assert p.present == len(set(in_range))
    assert p.duplicated == len(in_range) - len(set(in_range))
    assert p.ok == (p.missing == 0 and p.duplicated == 0)


def write(path: Path, partitions: list[int], offsets: list[int], topic: str = "t") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "_topic": [topic] * len(offsets), "_partition": pa.array(partitions, pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
    }), path)


def test_read_output_skips_staging_checks_order_and_filters_topic(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [0, 1, 0, 1], [0, 0, 1, 1])
    write(tmp_path / "b.parquet", [0, 0], [3, 2])  # out of order within the file
    write(tmp_path / "c.parquet", [0], [99], topic="other")
    write(tmp_path / "_staging" / "epoch-0000000001.node-1.boot-x.seq-00000001.parquet", [0], [7])
    fs, root = open_output(str(tmp_path))
    scan = read_output(fs, root, "t")
    assert scan.files == 3 and scan.rows == 6
    assert sorted(scan.offsets[0].tolist()) == [0, 1, 2, 3]
    assert len(scan.order_violations) == 1 and "b.parquet" in scan.order_violations[0]
    report = audit("t", {0: np.arange(4), 1: np.arange(2)}, {0: 4, 1: 2}, scan)
    assert report.missing == 0 and report.duplicated == 0 and not report.ok


def test_foreign_parquet_is_an_error(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "x.parquet")
    fs, root = open_output(str(tmp_path))
    with pytest.raises(VerifyError, match="lacks column"):
        read_output(fs, root, "t")


def test_rows_below_the_low_watermark_are_not_unexpected_but_still_count_as_duplicates() -> None:
    # Retention deleted offsets 0..4 after they landed; the topic now starts at 5.
    scan = scan_of({0: [0, 1, 2, 2, 3, 4, 5, 6, 7]})
    report = audit("t", {0: np.arange(5, 8)}, {0: 8}, scan, {0: 5})
    partition = report.partitions[0]
    assert (partition.missing, partition.unexpected, partition.duplicated) == (0, 0, 1)
    assert not report.ok  # the duplicate of offset 2 is still caught
    clean = audit("t", {0: np.arange(5, 8)}, {0: 8}, scan_of({0: [3, 4, 5, 6, 7]}), {0: 5})
    assert clean.ok
    # Without low watermarks the old rows cannot be told apart from strangers.
    assert audit("t", {0: np.arange(5, 8)}, {0: 8}, scan_of({0: [3, 4, 5, 6, 7]})).partitions[0].unexpected == 2


def test_a_file_gone_between_listing_and_reading_restarts_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction exchanged a directory after the scan listed it: the scan lists again and counts
    the new files once (never the old ones beside them); a tree whose files keep vanishing is a
    VerifyError naming why."""
    import laminar_kafka.cluster.ops.verify as verify_module

    write(tmp_path / "t" / "a.parquet", [0, 0], [0, 1])
    write(tmp_path / "t" / "b.parquet", [0], [2])
    fs, root = open_output(str(tmp_path))
    real = verify_module.list_published
    listings = []

    def compacting(fs_: object, directory: str) -> list[str]:
        listed = real(fs_, directory)  # type: ignore[arg-type]
        listings.append(directory)
        if len(listings) == 1:  # the first listing is stale: a compaction replaces a.parquet and b.parquet
            write(tmp_path / "t" / "c.parquet", [0, 0, 0], [0, 1, 2])
            (tmp_path / "t" / "a.parquet").unlink()
            (tmp_path / "t" / "b.parquet").unlink()
        return listed

    monkeypatch.setattr(verify_module, "list_published", compacting)
    scan = read_output(fs, root, "t")
    assert scan.files == 1 and sorted(scan.offsets[0].tolist()) == [0, 1, 2]

    monkeypatch.setattr(verify_module, "list_published", lambda fs_, directory: [f"{directory}/gone.parquet"])
    with pytest.raises(VerifyError, match="files kept vanishing while it was read"):
        read_output(fs, root, "t")
