"""Upsert mode's Iceberg commit on a local SQLite catalog: copy-on-write of the touched keys, the
epoch property and the record in one catalog commit, read back exactly by pyiceberg and DuckDB."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table, Transaction

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.maintenance import compact
from laminar_kafka.cluster.lake.iceberg.tables import data_file_count
from laminar_kafka.cluster.lake.iceberg.upsert_commit import commit_upsert
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.errors import ConfigurationError
from tests import duckdb_queries as q
from tests.unit.cluster.iceberg_fakes import DAY_1, Lake

NONE = PartitionSpec.parse("none")
BUCKETS = PartitionSpec.parse("bucket[4](id)")


def changes(partition: int, offsets: list[int], ids: list[int], ops: list[str],
            values: list[str | None] | None = None, when: dt.datetime = DAY_1) -> pa.Table:
    """Change rows as the source decodes them in upsert mode (a delete's payload is null)."""
    count = len(offsets)
    payload = values if values is not None else [None if op == "d" else f"{i}@{o}" for i, o, op in zip(ids, offsets, ops, strict=True)]
    return pa.table({
        "_topic": pa.array(["orders"] * count).dictionary_encode(),
        "_partition": pa.array([partition] * count, pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array([when] * count, pa.timestamp("ms")),
        "id": pa.array(ids, pa.int64()),
        "_op": pa.array(ops, pa.string()),
        "name": pa.array(payload, pa.string()),
    })


def keyed_lake(tmp_path: Path, partitioning: PartitionSpec = NONE, keys: tuple[str, ...] = ("id",)) -> Lake:
    return Lake(tmp_path, partitioning=partitioning, settings=IcebergSettings(namespace="pipe", upsert_keys=keys))


def stage(lake: Lake, epoch: int, table: pa.Table, node: int = 1) -> None:
    lake.stage(epoch, table, node=node, directory="orders")


def current(table: Table) -> dict[int, str]:
    rows = table.scan().to_arrow().to_pylist()
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), f"a key twice: {sorted(ids)}"
    return {row["id"]: row["name"] for row in rows}


def duckdb_state(tmp_path: Path, table: Table) -> dict[int, str]:
    connection = q.connect(tmp_path / "duckdb-extensions", q.ICEBERG)
    q.run(connection, q.METADATA_FILE, metadata=table.metadata_location)
    rows = q.rows_as_dicts(connection, q.SCAN_ROWS)
    assert len(rows) == len({row["id"] for row in rows})
    return {row["id"]: row["name"] for row in rows}


def three_epochs(lake: Lake) -> dict[int, str]:
    """Stage creates, then updates and deletes (two nodes), then a delete-and-recreate; the final state."""
    stage(lake, 1, changes(0, [0, 1, 2, 3], [1, 2, 3, 4], ["c", "c", "c", "c"]), node=1)
    stage(lake, 1, changes(1, [0, 1], [10, 11], ["r", "r"]), node=2)
    stage(lake, 2, changes(0, [4, 5, 6, 7], [1, 2, 1, 9], ["u", "d", "u", "c"]), node=1)
    stage(lake, 2, changes(1, [2], [10], ["d"]), node=2)
    stage(lake, 3, changes(0, [8, 9, 10], [3, 3, 2], ["d", "c", "c"], ["gone", "again", "back"]))
    return {1: "1@6", 3: "again", 4: "4@3", 9: "9@7", 11: "11@1", 2: "back"}


@pytest.mark.parametrize("partitioning", [NONE, BUCKETS], ids=["unpartitioned", "bucket"])
def test_epochs_of_changes_land_as_the_final_state_per_key(tmp_path: Path, partitioning: PartitionSpec) -> None:
    lake = keyed_lake(tmp_path, partitioning)
    expected = three_epochs(lake)
    output = lake.output()
    for epoch in (1, 2, 3):
        assert lake.publish(output, epoch) == 1
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 3
    assert current(table) == expected
    assert duckdb_state(tmp_path, table) == expected
    assert table.schema().identifier_field_names() == {"id"} and table.schema().find_field("id").required
    assert "_op" not in table.schema().column_names
    assert {"_topic", "_partition", "_offset", "_timestamp"} <= set(table.schema().column_names)
    summaries = [s.summary for s in table.snapshots() if s.summary is not None]
    assert [s["laminar.epoch"] for s in summaries] == ["1", "2", "3"]  # one snapshot per epoch
    assert lake.publish(output, 3) == 0  # idempotent
    assert lake.publish(lake.output(), 3) == 0  # another node: finds it done
    assert current(output.table("orders")) == expected


def test_catching_up_several_epochs_applies_them_in_order(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    output = lake.output()
    assert lake.publish(output, 3) == 3
    assert current(output.table("orders")) == expected


def test_a_crash_before_the_catalog_commit_leaves_the_previous_epoch_and_the_retry_is_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    output = lake.output()
    lake.publish(output, 1)
    before = output.table("orders")
    state_1, snapshot_1 = current(before), before.current_snapshot()

    def killed(self: Transaction) -> Table:
        raise KeyboardInterrupt("killed between writing the files and the catalog commit")

    monkeypatch.setattr(Transaction, "commit_transaction", killed)
    with pytest.raises(KeyboardInterrupt):
        lake.publish(output, 2)
    monkeypatch.undo()
    after = lake.output().table("orders")
    assert committed_epoch(after, "pipe") == 1
    assert after.current_snapshot() == snapshot_1 and current(after) == state_1
    data_dir = tmp_path / "out" / "orders" / "data"
    referenced = {task.file.file_path for task in after.scan().plan_files()}
    assert {str(p) for p in data_dir.rglob("*.parquet")} == referenced  # the abandoned outputs are deleted
    restarted = lake.output()
    assert lake.publish(restarted, 3) == 2
    assert current(restarted.table("orders")) == expected


def test_a_key_in_two_partitions_within_one_epoch_refuses_the_commit(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [0], [1], ["c"]), node=1)
    stage(lake, 1, changes(2, [0], [1], ["c"]), node=2)
    output = lake.output()
    with pytest.raises(SinkError, match="key id=1 has changes in Kafka partitions 0 and 2 within one epoch"):
        lake.publish(output, 1)
    assert committed_epoch(output.table("orders"), "pipe") == 0


def test_a_key_may_move_partition_across_epochs_the_later_epoch_wins(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [0], [1], ["c"], ["first"]))
    stage(lake, 2, changes(3, [0], [1], ["u"], ["moved"]))
    output = lake.output()
    lake.publish(output, 2)
    assert current(output.table("orders")) == {1: "moved"}


def test_composite_keys(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path, keys=("id", "region"))
    first = changes(0, [0, 1, 2], [1, 1, 2], ["c", "c", "c"]).append_column("region", pa.array(["eu", "us", "eu"]))
    second = changes(0, [3, 4], [1, 2], ["d", "u"], [None, "two"]).append_column("region", pa.array(["us", "eu"]))
    stage(lake, 1, first)
    stage(lake, 2, second)
    output = lake.output()
    lake.publish(output, 2)
    table = output.table("orders")
    assert table.schema().identifier_field_names() == {"id", "region"}
    rows = sorted((r["id"], r["region"], r["name"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [(1, "eu", "1@0"), (2, "eu", "two")]


def test_a_new_column_evolves_the_keyed_table(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [0, 1], [1, 2], ["c", "c"]))
    stage(lake, 2, changes(0, [2], [1], ["u"]).append_column("score", pa.array([5], pa.int64())))
    output = lake.output()
    lake.publish(output, 2)
    rows = {r["id"]: r["score"] for r in output.table("orders").scan().to_arrow().to_pylist()}
    assert rows == {1: 5, 2: None}


def test_bucket_partitioning_on_the_key_reads_only_the_touched_buckets(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path, BUCKETS)
    ids = list(range(64))
    stage(lake, 1, changes(0, ids, ids, ["c"] * 64))
    output = lake.output()
    lake.publish(output, 1)
    table = output.table("orders")
    files = data_file_count(table)
    assert files == 4  # one per bucket
    path = tmp_path / "out" / "one.parquet"
    pq.write_table(changes(0, [100], [5], ["u"], ["five"]), path)
    stats = commit_upsert(table, ("id",), [str(path)], {"laminar.pipeline": "pipe", "laminar.epoch": "2"},
                          {"laminar.epoch.pipe": "2"})
    assert (stats.keys, stats.upserted, stats.files_read, stats.files_rewritten) == (1, 1, 1, 1)
    table = output.table("orders")
    assert current(table)[5] == "five" and len(current(table)) == 64
    assert data_file_count(table) == 4  # the touched bucket's file replaced by one: its survivors and the new row


def test_compaction_keeps_the_state_and_the_identifier_fields(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    expected = three_epochs(lake)
    stage(lake, 4, changes(0, [11], [50], ["c"]))  # a new key only: no file rewritten, one added
    expected[50] = "50@11"
    output = lake.output()
    lake.publish(output, 4)
    table = output.table("orders")
    assert data_file_count(table) == 2
    report = compact(table)
    assert report.snapshot_id is not None and report.files_after == 1
    table = output.table("orders")
    assert current(table) == expected and duckdb_state(tmp_path, table) == expected
    assert table.schema().identifier_field_names() == {"id"}
    assert not any(task.delete_files for task in table.scan().plan_files())  # copy-on-write: none to fold


def test_the_start_check_refuses_a_table_keyed_otherwise(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [0], [1], ["c"]))
    lake.publish(lake.output(), 1)
    lake.output().check(["orders"], None)  # the same keys: fine
    append_only = Lake(tmp_path, partitioning=NONE)
    with pytest.raises(ConfigurationError, match="iceberg table pipe.orders is keyed by id, but setting "
                                                 "upsert-keys is nothing \\(append mode\\) here"):
        append_only.output().check(["orders"], None)
    other = keyed_lake(tmp_path, keys=("id", "region"))
    with pytest.raises(ConfigurationError, match="keyed by id, but setting upsert-keys is id,region"):
        other.output().check(["orders"], None)


def test_a_replayed_change_never_overwrites_a_later_row_of_its_key(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [5, 6, 7], [1, 2, 3], ["c", "c", "c"]))
    output = lake.output()
    lake.publish(output, 1)
    replay = tmp_path / "out" / "replay.parquet"
    # offsets 2 and 6 of partition 0 are older than (or the same as) the table's rows of keys 1 and 2;
    # key 3's change at offset 9 is newer; key 4's is new; a change of key 1 from partition 1 applies
    pq.write_table(changes(0, [2, 6, 9, 10], [1, 2, 3, 4], ["d", "u", "u", "c"], ["old", "same", "new", "four"]),
                   replay)
    table = output.table("orders")
    commit_upsert(table, ("id",), [str(replay)], {}, {})
    assert current(output.table("orders")) == {1: "1@5", 2: "2@6", 3: "new", 4: "four"}
    moved = tmp_path / "out" / "moved.parquet"
    pq.write_table(changes(1, [0], [1], ["u"], ["moved"]), moved)
    commit_upsert(output.table("orders"), ("id",), [str(moved)], {}, {})
    assert current(output.table("orders"))[1] == "moved"


def test_an_epoch_that_changes_nothing_still_commits_its_epoch(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path)
    stage(lake, 1, changes(0, [0], [1], ["c"]))
    stage(lake, 2, changes(0, [1], [77], ["d"]))  # a delete of a key the table never held
    output = lake.output()
    assert lake.publish(output, 2) == 2
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 2 and current(table) == {1: "1@0"}
    assert duckdb_state(tmp_path, table) == {1: "1@0"}


def test_a_replay_with_composite_keys(tmp_path: Path) -> None:
    lake = keyed_lake(tmp_path, keys=("id", "region"))
    stage(lake, 1, changes(0, [5, 6], [1, 1], ["c", "c"]).append_column("region", pa.array(["eu", "us"])))
    output = lake.output()
    lake.publish(output, 1)
    replay = tmp_path / "out" / "replay.parquet"
    pq.write_table(changes(0, [4, 8], [1, 1], ["u", "u"], ["old", "new"]).append_column("region", pa.array(["eu", "us"])),
                   replay)
    commit_upsert(output.table("orders"), ("id", "region"), [str(replay)], {}, {})
    rows = sorted((r["region"], r["name"]) for r in output.table("orders").scan().to_arrow().to_pylist())
    assert rows == [("eu", "1@5"), ("us", "new")]
