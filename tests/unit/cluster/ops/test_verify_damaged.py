"""A lake holding a damaged file (truncated, corrupted) is a finding of `verify`: the report names the
file and what is wrong, exit 1; before, it was exit 2 with a line that named neither. The lakes are
landed by the sink itself (Parquet) and by pyiceberg (Iceberg, embedded SQLite catalog); no servers:
the topic read is replaced by its result."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import laminar_kafka.cluster.node as node_module
import laminar_kafka.cluster.ops.verify as verify_module
from laminar_kafka.cli.main import main
from laminar_kafka.cluster.errors import VerifyError
from laminar_kafka.cluster.lake.iceberg.tables import open_catalog
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published, open_output, publish
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.cluster.ops.verify import DamagedFile, audit, read_offset_columns, read_output
from laminar_kafka.cluster.ops.verify_lake import read_iceberg_output
from tests.unit.cluster.ops.test_verify_lake import lake_with_table, target

TOPIC = "orders"


def rows(partition: int, offsets: range) -> pa.RecordBatch:
    return pa.record_batch({
        "value": pa.array([b"v%d" % o for o in offsets], pa.binary()),
        "_topic": pa.array([TOPIC] * len(offsets)),
        "_partition": pa.array([partition] * len(offsets), pa.int32()),
        "_offset": pa.array(list(offsets), pa.int64()),
        "_timestamp": pa.array([1_700_000_000_000] * len(offsets), pa.timestamp("ms")),
    })


def landed_lake(output: Path) -> list[str]:
    """Two epochs of partitions 0 and 1 (offsets 0..9 each) landed by the sink; the published files."""
    fs, root = open_output(str(output))
    sink = ParquetSink(root, node_id=1, boot_id="b00t", filesystem=(fs, root))
    for epoch, offsets in ((1, range(0, 5)), (2, range(5, 10))):
        sink.write(rows(0, offsets), None)
        sink.write(rows(1, offsets), None)
        publish(fs, root, sink.seal(epoch))
    return list_published(fs, root)


def truncate(path: str, keep: int | None = None) -> int:
    """Cut the file at ``path`` to ``keep`` bytes (half by default); returns the size kept."""
    data = Path(path).read_bytes()
    kept = len(data) // 2 if keep is None else keep
    Path(path).write_bytes(data[:kept])
    return kept


EXPECTED = {0: np.arange(10), 1: np.arange(10)}
HIGHS = {0: 10, 1: 10}


def test_a_truncated_file_of_a_landed_lake_is_named_and_fails_the_audit(tmp_path: Path) -> None:
    files = landed_lake(tmp_path / "out")
    fs, root = open_output(str(tmp_path / "out"))
    assert audit(TOPIC, EXPECTED, HIGHS, read_output(fs, root, TOPIC)).ok  # the lake as landed
    damaged = files[0]
    lost = pq.read_metadata(damaged).num_rows
    kept = truncate(damaged)
    scan = read_output(fs, root, TOPIC)
    assert scan.damaged == [DamagedFile(damaged, f"not a readable Parquet file ({kept} bytes): Parquet magic bytes not "
                                                 "found in footer. Either the file is corrupted or this is not a "
                                                 "parquet file.")]
    report = audit(TOPIC, EXPECTED, HIGHS, scan)
    assert not report.ok and report.damaged == tuple(scan.damaged)
    assert scan.files == len(files) - 1  # the rest is audited: the damaged file's rows are missing
    assert report.missing == lost > 0
    lines = report.table().splitlines()
    assert f"damaged file {damaged}: not a readable Parquet file ({kept} bytes): Parquet magic bytes" in lines[-2]
    assert lines[-1].endswith("FAILED")
    assert report.to_json()["damaged"] == [{"path": damaged, "problem": scan.damaged[0].problem}]


@pytest.mark.parametrize("keep", [0, 5])
def test_an_empty_or_tiny_file_is_damaged_too(tmp_path: Path, keep: int) -> None:
    files = landed_lake(tmp_path / "out")
    truncate(files[-1], keep)
    fs, root = open_output(str(tmp_path / "out"))
    (damaged,) = read_output(fs, root, TOPIC).damaged
    assert damaged.path == files[-1] and damaged.problem.startswith(f"not a readable Parquet file ({keep} bytes): ")
    assert "\n" not in damaged.line()


def test_corrupted_pages_are_damaged(tmp_path: Path) -> None:
    files = landed_lake(tmp_path / "out")
    data = bytearray(Path(files[0]).read_bytes())
    data[4:len(data) // 2] = b"\xff" * (len(data) // 2 - 4)  # the pages, the footer intact
    Path(files[0]).write_bytes(bytes(data))
    fs, root = open_output(str(tmp_path / "out"))
    (damaged,) = read_output(fs, root, TOPIC).damaged
    assert damaged.path == files[0] and damaged.problem.startswith(f"not a readable Parquet file ({len(data)} bytes): ")


class FlakyFile:
    """A file whose first ``failures`` opens fail on read (an object store that dropped a request)."""

    def __init__(self, path: str, failures: int, error: Exception) -> None:
        self.path, self.failures, self.error, self.opens = path, failures, error, 0

    @contextmanager
    def open(self) -> Iterator[Any]:
        self.opens += 1
        if self.opens <= self.failures:
            raise self.error
        with pa.OSFile(self.path) as handle:
            yield handle


def test_a_failed_read_of_a_sound_file_is_read_again_not_damage(tmp_path: Path) -> None:
    files = landed_lake(tmp_path / "out")
    flaky = FlakyFile(files[0], 1, OSError("AWS Error NETWORK_CONNECTION during GetObject operation"))
    table = read_offset_columns(flaky.open, files[0])
    assert isinstance(table, pa.Table) and table.column_names == ["_topic", "_partition", "_offset"]
    assert flaky.opens == 2


def test_a_file_that_cannot_be_read_at_all_is_an_error_of_the_audit_not_a_finding(tmp_path: Path) -> None:
    files = landed_lake(tmp_path / "out")
    broken = FlakyFile(files[0], 2, OSError("AWS Error NETWORK_CONNECTION during GetObject operation"))
    with pytest.raises(OSError, match="NETWORK_CONNECTION"):
        read_offset_columns(broken.open, files[0])
    gone = FlakyFile(files[0], 1, FileNotFoundError(files[0]))
    with pytest.raises(FileNotFoundError):  # vanished (a compaction): read_output lists again
        read_offset_columns(gone.open, files[0])
    assert gone.opens == 1


def test_a_truncated_rejected_file_is_named_too(tmp_path: Path) -> None:
    from tests.unit.cluster.lake.parquet.test_sink_rejected import rejected

    fs, root = open_output(str(tmp_path / "out"))
    sink = ParquetSink(root, node_id=1, boot_id="b00t", filesystem=(fs, root))
    sink.write(rows(0, range(0, 3)), rejected(0, [3]).set_column(0, "_topic", pa.array([TOPIC])))
    publish(fs, root, sink.seal(1))
    (dead_letter,) = list_published(fs, f"{root}/_rejected")
    truncate(dead_letter)
    (damaged,) = read_output(fs, root, TOPIC).damaged
    assert damaged.path == dead_letter


def test_a_truncated_iceberg_data_file_is_named(tmp_path: Path) -> None:
    fs, root = lake_with_table(tmp_path / "out")
    (data_file,) = [str(p) for p in (tmp_path / "out" / TOPIC).rglob("*.parquet")]
    truncate(data_file)
    scan = read_iceberg_output(target(tmp_path / "out", "p1"), fs, root, TOPIC, topic_has_records=True)
    (damaged,) = scan.damaged
    assert damaged.path.removeprefix("file:").endswith(data_file) and "Parquet magic bytes" in damaged.problem
    assert scan.files == 0
    assert not audit(TOPIC, {0: np.arange(3)}, {0: 3}, scan).ok


@pytest.fixture
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify` reads a topic of partitions 0 and 1 holding offsets 0..9 (no broker)."""
    monkeypatch.setattr(node_module, "topic_partitions", lambda *_a, **_k: [(TOPIC, 0), (TOPIC, 1)])
    monkeypatch.setattr(verify_module, "read_topic", lambda *_a, **_k: (EXPECTED, HIGHS, {0: 0, 1: 0}))


@pytest.mark.usefixtures("no_kafka")
def test_verify_of_a_lake_with_a_truncated_file_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    files = landed_lake(tmp_path / "out")
    argv = ["verify", "--output", str(tmp_path / "out"), "--bootstrap", "127.0.0.1:1", "--topic", TOPIC]
    assert main(argv) == 0
    capsys.readouterr()
    kept = truncate(files[1])
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert err == ""
    named = [line for line in out.splitlines() if files[1] in line]
    assert named == [f"damaged file {files[1]}: not a readable Parquet file ({kept} bytes): Parquet magic bytes not "
                     "found in footer. Either the file is corrupted or this is not a parquet file."]
    assert main([*argv, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and [d["path"] for d in report["damaged"]] == [files[1]]


@pytest.mark.usefixtures("no_kafka")
def test_verify_of_an_unreadable_output_is_still_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    landed_lake(tmp_path / "out")

    def unreachable(*_a: object, **_k: object) -> None:
        raise VerifyError("cannot read the output under 'x': AWS Error NETWORK_CONNECTION")

    monkeypatch.setattr("laminar_kafka.cluster.ops.verify_lake.read_output", unreachable)
    assert main(["verify", "--output", str(tmp_path / "out"), "--bootstrap", "127.0.0.1:1", "--topic", TOPIC]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read the output under 'x'")


def test_an_iceberg_data_file_the_snapshot_lists_and_that_is_gone_is_named(tmp_path: Path) -> None:
    fs, root = lake_with_table(tmp_path / "out")
    (data_file,) = [p for p in (tmp_path / "out" / TOPIC).rglob("*.parquet")]
    data_file.unlink()
    scan = read_iceberg_output(target(tmp_path / "out", "p1"), fs, root, TOPIC, topic_has_records=True)
    (damaged,) = scan.damaged
    assert damaged.path.removeprefix("file:").endswith(str(data_file))
    assert re.fullmatch(r"not found \(listed by snapshot \d+ of the table\)", damaged.problem)
    assert not audit(TOPIC, {0: np.arange(3)}, {0: 3}, scan).ok


def test_a_data_file_gone_with_a_snapshot_a_compaction_replaced_is_no_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit loaded the table, then a compaction committed a new snapshot and expired the old one
    (its files deleted) before the audit read them: the new snapshot is scanned, nothing is damaged."""
    import laminar_kafka.cluster.lake.iceberg.tables as tables_module
    from tests.unit.cluster.iceberg_fakes import rows as iceberg_rows

    fs, root = lake_with_table(tmp_path / "out")
    catalog = open_catalog(IcebergSettings(namespace="p1"), fs, root)
    stale = catalog.load_table(("p1", TOPIC))
    (old_file,) = [p for p in (tmp_path / "out" / TOPIC).rglob("*.parquet")]
    fresh = catalog.load_table(("p1", TOPIC))
    fresh.overwrite(iceberg_rows(TOPIC, 0, range(3)).cast(fresh.schema().as_arrow()))  # the compaction's commit
    old_file.unlink()  # and its expiry
    real = tables_module.load_table_or_none
    loads: list[object] = []

    def stale_first(catalog_: Any, identifier: tuple[str, str]) -> Any:
        loads.append(identifier)
        return stale if len(loads) == 1 else real(catalog_, identifier)

    monkeypatch.setattr(tables_module, "load_table_or_none", stale_first)
    scan = read_iceberg_output(target(tmp_path / "out", "p1"), fs, root, TOPIC, topic_has_records=True)
    assert scan.damaged == [] and scan.rows == 3 and list(scan.offsets[0]) == [0, 1, 2]
    assert len(loads) == 2
