"""Upsert mode's change files go once their epoch is in the table: the committing node deletes them,
another node that finds them gone while publishing or reducing the same epoch finds the epoch done,
and a change file missing from an epoch not committed is still committed output lost."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg import commit as commit_module
from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput, committed_epoch
from laminar_kafka.cluster.lake.iceberg.upsert_commit import commit_upsert
from laminar_kafka.cluster.lake.parquet.staged_publish import publish_found
from tests.unit.cluster.iceberg_fakes import FAST_RETRY, Lake, layout_final_path, layout_publish
from tests.unit.cluster.lake.iceberg.test_upsert_commit import changes, current, keyed_lake, stage, three_epochs


def change_files(tmp_path: Path) -> list[str]:
    """Parquet files of the output that are neither the table's (``data/``) nor staged."""
    table_dir = tmp_path / "out" / "orders"
    return sorted(str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet")
                  if p.relative_to(table_dir).parts[0] not in ("data", "metadata"))


def node(lake: Lake, publish_files: object = layout_publish) -> IcebergOutput:
    """Another node's output on the same lake, with its own publish (a race hook)."""
    return IcebergOutput(lake.settings, lake.partitioning, lake.pipeline, lake.root, lake.fs, lake.root,
                         final_path_of=layout_final_path, publish_files=publish_files,  # type: ignore[arg-type]
                         retry=FAST_RETRY)


def test_no_change_file_remains_after_the_epochs_commit(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    output = lake.output()
    for epoch in (1, 2, 3):
        assert lake.publish(output, epoch) == 1
        assert change_files(tmp_path) == []
    assert not list((tmp_path / "out" / "_staging").rglob("*.parquet"))
    table = output.table("orders")
    assert current(table) == expected and committed_epoch(table, "pipe") == 3
    data = {task.file.file_path for task in table.scan().plan_files()}
    assert data and all(Path(path).exists() for path in data)  # the table's own files stay
    assert lake.publish(lake.output(), 3) == 0  # another node later: done, no file needed


def test_a_node_that_finds_the_change_files_published_and_deleted_by_the_committer_finds_the_epoch_done(
        tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    first = lake.output()
    assert lake.publish(first, 1) == 1

    def first_wins_then_publish(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
        lake.publish(first, 2)  # the first node publishes, commits epoch 2 and deletes its change files
        return layout_publish(fs, root, staged)  # "neither staged nor published"

    second = node(lake, first_wins_then_publish)
    second.table("orders")  # known table: it loads it, sees epoch 1, then its publish meets the race
    assert lake.publish(second, 2) == 0
    assert committed_epoch(second.table("orders"), "pipe") == 2
    assert lake.publish(second, 3) == 1 and change_files(tmp_path) == []
    assert current(second.table("orders")) == expected
    epochs = [s.summary["laminar.epoch"] for s in second.table("orders").snapshots() if s.summary is not None]
    assert epochs == ["1", "2", "3"]  # each epoch once


def test_a_change_file_gone_while_the_epoch_is_reduced_finds_the_epoch_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    first, second = lake.output(), node(lake)
    assert lake.publish(first, 2) == 2
    raced: list[int] = []

    def first_commits_meanwhile(*args: object, **kwargs: object) -> object:
        if not raced:  # between the second node's publish and its read of the change rows
            raced.append(0)
            raced[0] = lake.publish(first, 3)
        return commit_upsert(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_module, "commit_upsert", first_commits_meanwhile)
    assert lake.publish(second, 3) == 0
    assert raced == [1] and change_files(tmp_path) == []
    assert current(second.table("orders")) == expected


def test_a_change_file_missing_from_an_uncommitted_epoch_is_still_a_sink_error(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    three_epochs(lake)
    output = lake.output()
    assert lake.publish(output, 1) == 1
    (tmp_path / "out" / lake.manifests[2][0]).unlink()  # lost before anyone published it
    with pytest.raises(SinkError, match="neither staged nor published"):
        lake.publish(output, 2)
    assert committed_epoch(output.table("orders"), "pipe") == 1

    def publish_then_lose(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
        listed = list(staged)
        renamed = layout_publish(fs, root, listed)
        fs.delete_file(f"{root}/{layout_final_path(listed[0])}")  # lost after its publish
        return renamed

    fresh = keyed_lake(tmp_path / "fresh")
    stage(fresh, 1, changes(0, [0], [1], ["c"]))
    stage(fresh, 2, changes(0, [1], [1], ["u"]))
    assert fresh.publish(fresh.output(), 1) == 1
    with pytest.raises(SinkError, match="cannot read the schema of published file"):
        fresh.publish(node(fresh, publish_then_lose), 2)
    assert committed_epoch(fresh.output().table("orders"), "pipe") == 1


def test_recovery_skips_a_staged_file_another_node_published_meanwhile(tmp_path: Path) -> None:
    fs, root = pafs.LocalFileSystem(), str(tmp_path)
    staged = ["_staging/orders/epoch-0000000001.node-1.boot-b.seq-00000001.parquet",
              "_staging/orders/epoch-0000000001.node-2.boot-b.seq-00000002.parquet"]
    for relative in staged:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(b"rows")
    (tmp_path / staged[1]).unlink()  # another node published it, committed its epoch and deleted it
    publish_found(fs, root, staged)
    assert (tmp_path / "orders" / "epoch-0000000001.node-1.boot-b.seq-00000001.parquet").exists()
    blocked = "_staging/orders/epoch-0000000002.node-1.boot-b.seq-00000003.parquet"
    (tmp_path / blocked).write_bytes(b"rows")
    (tmp_path / "orders" / "epoch-0000000002.node-1.boot-b.seq-00000003.parquet").mkdir()  # cannot be renamed
    with pytest.raises(SinkError, match="cannot publish"):
        publish_found(fs, root, [blocked])


def test_compact_sweeps_the_change_files_a_killed_committer_left_and_keeps_a_later_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from laminar_kafka.cli.main import main

    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    output = lake.output()
    monkeypatch.setattr(commit_module, "delete_change_files", lambda *args: 0)  # killed after each commit
    assert lake.publish(output, 1) == 1 and lake.publish(output, 2) == 1
    monkeypatch.undo()
    left = change_files(tmp_path)
    assert left and all(name.startswith(("epoch-0000000001", "epoch-0000000002")) for name in left)
    layout_publish(lake.fs, lake.root, lake.manifests[3])  # epoch 3 published, not committed yet
    later = [name for name in change_files(tmp_path) if name.startswith("epoch-0000000003")]
    assert later
    assert main(["compact", "--output", lake.root, "--pipeline", "pipe", "--topic", "orders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["change_files_deleted"] == len(left)
    assert change_files(tmp_path) == later  # a later epoch's are its commit's input: kept
    assert lake.publish(lake.output(), 3) == 1 and change_files(tmp_path) == []
    assert current(lake.output().table("orders")) == expected


def test_compact_of_a_plain_table_never_sweeps_its_published_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from laminar_kafka.cli.main import main
    from tests.unit.cluster.iceberg_fakes import rows

    lake = Lake(tmp_path)  # not keyed: the published epoch files are the table's data files
    lake.stage(1, rows("orders", 0, range(3)))
    assert lake.publish(lake.output(), 1) == 1
    assert main(["compact", "--output", lake.root, "--pipeline", "pipe", "--topic", "orders", "--json"]) == 0
    assert "change_files_deleted" not in json.loads(capsys.readouterr().out)
    assert lake.output().table("orders").scan().to_arrow().num_rows == 3
