"""A compaction pass over a real Parquet tree on the local filesystem (:mod:`compaction_trees`):
rewritten and exchanged, with readers and publishers around it."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.errors import SinkError, UsageError
from laminar_kafka.cluster.lake.parquet import compaction as compaction_module
from laminar_kafka.cluster.lake.parquet.compaction import (
    AFTER_EXCHANGE,
    AFTER_WRITE,
    WORK_DIR,
    TreeCompaction,
    check_local_output,
)
from laminar_kafka.cluster.lake.parquet.compaction_plan import CompactionSettings, epochs_of
from laminar_kafka.cluster.lake.parquet.records import read_parquet_facts
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, final_path, publish
from laminar_kafka.cluster.lake.record import record_path
from tests.compaction_readers import Readers
from tests.unit.cluster.lake.parquet.compaction_trees import DAY0, MIB, TOPIC, Tree, work_dirs


def test_a_pass_rewrites_the_settled_small_files_and_leaves_the_recorded_ones_alone(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(12)
    tree.keep_records_from(9)
    recorded = {f: os.stat(Path(tree.root, f)).st_ino for e in range(9, 13) for f in tree.files[e]}
    before = tree.published()
    assert len(before) == 24 and tree.rows() == tree.expected()
    inputs_bytes = sum(os.path.getsize(Path(tree.root, f)) for e in range(1, 9) for f in tree.files[e])

    report = tree.compaction().run_pass([TOPIC])

    after = tree.published()
    (directory,) = {os.path.dirname(f) for f in after}
    output = f"{directory}/{report.directories[0].outputs[0]}"
    assert sorted(after) == sorted([output, *recorded])
    assert {f: os.stat(Path(tree.root, f)).st_ino for f in recorded} == recorded  # the same files, never moved
    assert tree.rows() == tree.expected()  # every row once
    data = pq.read_table(Path(tree.root, output))
    keys = list(zip(data["_partition"].to_pylist(), data["_offset"].to_pylist(), strict=True))
    assert keys == sorted(keys) and len(keys) == 8 * 4 * 3
    assert data.schema == pq.read_schema(Path(tree.root, tree.files[9][0]))  # the same schema, metadata included
    metadata = pq.read_metadata(Path(tree.root, output))
    assert {metadata.row_group(0).column(i).compression for i in range(metadata.num_columns)} == {"ZSTD"}
    assert epochs_of(os.path.basename(output)).first == 1 and epochs_of(os.path.basename(output)).last == 8  # type: ignore[union-attr]
    assert (report.files_before, report.files_after, report.bytes_rewritten) == (24, 9, inputs_bytes)
    assert (report.leaf_directories, report.oldest_record_epoch, report.leftovers_deleted) == (1, 9, 1)
    assert work_dirs(tree) == []  # grace 0: the replaced directory is gone at once
    facts = read_parquet_facts(tree.fs, tree.root, "p", [TOPIC])
    assert (facts.epoch, facts.rolled_back_from, facts.hole) == (12, 0, "")  # a node starting now sees no rollback


def test_a_later_pass_rewrites_an_earlier_output_with_the_newly_settled_files(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(6)
    tree.keep_records_from(5)
    compaction = tree.compaction()
    assert compaction.run_pass([TOPIC]).files_after == 1 + 4
    assert compaction.run_pass([TOPIC]).directories == ()  # nothing new is settled: nothing to do
    tree.land(4)
    tree.keep_records_from(9)
    report = compaction.run_pass([TOPIC])
    names = [os.path.basename(f) for f in tree.published()]
    compacted = [epochs_of(n) for n in names if n.startswith("epochs-")]
    assert len(compacted) == 1 and (compacted[0].first, compacted[0].last) == (1, 8)  # type: ignore[union-attr]
    assert (report.files_before, report.files_after) == (1 + 12, 1 + 4)  # epochs 1-4's output + 5-8 -> one file
    assert tree.rows() == tree.expected()


def test_nothing_is_rewritten_without_epoch_records(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    for epoch in range(1, 6):
        Path(tree.root, record_path(epoch)).unlink()
    before = tree.published()
    report = tree.compaction().run_pass([TOPIC])
    assert report.directories == () and report.oldest_record_epoch is None
    assert "no epoch record in the tree" in report.lines()[-1]
    assert tree.published() == before


def test_files_of_different_schemas_are_rewritten_apart(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(3)
    tree.land(3, extra="new_column")  # the schema grew
    tree.keep_records_from(7)
    tree.land(1)
    report = tree.compaction().run_pass([TOPIC])
    outputs = report.directories[0].outputs
    assert len(outputs) == 2
    schemas = sorted(pq.read_schema(Path(tree.root, report.directories[0].directory, o)).names for o in outputs)
    assert [("new_column" in names) for names in schemas] == [False, True]
    assert tree.rows() == tree.expected()


def test_every_day_directory_is_compacted_and_the_topic_directory_itself_with_no_partitions(tmp_path: Path) -> None:
    days = Tree(tmp_path / "days")
    days.land(5, days=3)
    days.keep_records_from(5)
    report = days.compaction().run_pass([TOPIC])
    assert report.leaf_directories == 3 and len(report.directories) == 3
    assert days.rows() == days.expected()

    flat = Tree(tmp_path / "flat", partition_by="none")
    flat.land(5)
    flat.keep_records_from(5)
    report = flat.compaction().run_pass([TOPIC])
    assert [d.directory for d in report.directories] == [TOPIC] and report.files_after == 1 + 2
    assert flat.rows() == flat.expected()
    assert sorted(os.listdir(flat.root)) == ["_laminar", "_staging", TOPIC]


def test_a_directory_holding_subdirectories_is_skipped(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    tree.keep_records_from(5)
    (directory,) = {os.path.dirname(f) for f in tree.published()}
    Path(tree.root, directory, "_scratch").mkdir()
    before = tree.published()
    report = tree.compaction().run_pass([TOPIC])
    (skipped,) = report.directories
    assert skipped.skipped.startswith("it holds subdirectories (_scratch)") and skipped.files_before == skipped.files_after
    assert tree.published() == before and work_dirs(tree) == []
    assert "skipped, it holds subdirectories" in report.lines()[0]
    assert (report.files_before, report.files_after, report.rewritten) == (0, 0, ())


def test_a_file_that_cannot_be_read_stops_the_pass_naming_it_and_nothing_changes(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(6, days=2)
    tree.keep_records_from(6)
    broken = sorted(tree.files[2])[-1]  # in the second day directory
    Path(tree.root, broken).write_bytes(Path(tree.root, broken).read_bytes()[:-20])  # a torn footer
    before = {f: os.stat(Path(tree.root, f)).st_ino for f in tree.published()}
    with pytest.raises(SinkError, match=f"cannot read {Path(tree.root, broken)}.*nothing was compacted"):
        tree.compaction().run_pass([TOPIC])
    assert {f: os.stat(Path(tree.root, f)).st_ino for f in tree.published()} == before
    assert work_dirs(tree) == []


def test_a_file_whose_rows_cannot_be_read_stops_the_pass_before_any_exchange(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tree = Tree(tmp_path)
    tree.land(6, days=2)
    tree.keep_records_from(6)
    before = sorted(tree.published())
    real = pq.ParquetFile

    def unreadable(path: str) -> pq.ParquetFile:
        if path.endswith(os.path.basename(sorted(tree.files[3])[-1])):
            raise OSError(f"Couldn't deserialize thrift in {path}")
        return real(path)

    monkeypatch.setattr(compaction_module.pq, "ParquetFile", unreadable)
    with pytest.raises(SinkError, match="cannot read .*epoch-0000000003.*Couldn't deserialize"):
        tree.compaction().run_pass([TOPIC])
    assert sorted(tree.published()) == before and work_dirs(tree) == []


def test_a_replaced_directory_waits_out_its_grace(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    tree.keep_records_from(5)
    now = [1_000_000_000.0]
    compaction = tree.compaction(grace=60.0, clock=lambda: now[0])
    report = compaction.run_pass([TOPIC])
    assert (report.leftovers_deleted, report.leftovers_kept) == (0, 1)
    (leftover,) = work_dirs(tree)
    replaced = Path(tree.root, WORK_DIR, leftover)
    assert sorted(os.listdir(replaced)) == sorted(os.path.basename(f) for e in range(1, 6) for f in tree.files[e])
    now[0] = os.stat(replaced).st_mtime + 59
    assert compaction.clean_leftovers() == (0, 1)
    now[0] += 2
    assert compaction.clean_leftovers() == (1, 0) and work_dirs(tree) == []
    assert tree.rows() == tree.expected()


def test_an_output_holding_an_iceberg_table_is_refused(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(3)
    Path(tree.root, TOPIC, "metadata").mkdir()
    with pytest.raises(UsageError, match="holds an Iceberg table .metadata/.: compact it with --table-format iceberg"):
        tree.compaction().run_pass([TOPIC])


@pytest.mark.parametrize("output", ["s3://bucket/lake", "S3://bucket", "gs://b/l", "hdfs://nn/lake"])
def test_an_object_store_is_refused_pointing_at_iceberg(output: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_local_output(output)
    message = str(caught.value)
    assert "no atomic swap of a directory" in message and "table-format=iceberg" in message and "\n" not in message


@pytest.mark.parametrize("output", ["/data/lake", "lake", "file:///data/lake"])
def test_a_local_output_is_accepted(output: str) -> None:
    check_local_output(output)


def test_a_publish_during_the_exchange_waits_and_lands_in_the_live_directory(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tree = Tree(tmp_path, nodes=1)
    tree.land(5)
    tree.keep_records_from(5)
    late = ParquetSink(tree.root, node_id=9, boot_id="late", filesystem=(tree.fs, tree.root))
    late.write(pa.record_batch({"_topic": pa.array([TOPIC]).dictionary_encode(), "_partition": pa.array([99], pa.int32()),
                                "_offset": pa.array([0], pa.int64()), "_timestamp": pa.array([DAY0], pa.timestamp("ms")),
                                "value": pa.array([b"late"])}))
    (staged,) = late.seal(6)
    real_exchange = compaction_module.exchange_directories
    seen: list[bool] = []
    publisher = threading.Thread(target=publish, args=(tree.fs, tree.root, [staged]))

    def exchange_while_a_node_publishes(live: str, work: str) -> None:
        publisher.start()
        publisher.join(0.3)
        seen.append(Path(tree.root, staged).exists())  # the publish waits for the lock, its file still staged
        real_exchange(live, work)

    monkeypatch.setattr(compaction_module, "exchange_directories", exchange_while_a_node_publishes)
    tree.compaction().run_pass([TOPIC])
    publisher.join(10)
    assert seen == [True]
    assert Path(tree.root, final_path(staged)).exists()
    assert tree.rows() == tree.expected() + Counter({(99, 0): 1})


def test_a_file_renamed_in_without_the_lock_is_moved_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    tree = Tree(tmp_path, nodes=1)
    tree.land(5)
    tree.keep_records_from(5)
    real_exchange = compaction_module.exchange_directories
    stray = "epoch-0000000006.node-7.boot-old.seq-00000001.parquet"

    def exchange_after_a_lockless_rename(live: str, work: str) -> None:
        pq.write_table(pa.table({"_partition": pa.array([77], pa.int32()), "_offset": pa.array([5], pa.int64())}),
                       os.path.join(live, stray))  # a writer of an older version, not taking the lock
        real_exchange(live, work)

    monkeypatch.setattr(compaction_module, "exchange_directories", exchange_after_a_lockless_rename)
    report = tree.compaction(grace=60).run_pass([TOPIC])
    assert stray in os.listdir(Path(tree.root, report.directories[0].directory))
    assert "without the publish lock; moving it back" in caplog.text
    assert report.files_after == 1 + 1 + 1


def test_a_record_of_an_input_epoch_appearing_meanwhile_skips_the_directory(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    record_3 = Path(tree.root, record_path(3)).read_bytes()
    tree.keep_records_from(5)
    real_write = TreeCompaction._write

    def write_then_a_node_records_epoch_3(self: TreeCompaction, plan: object, work: str) -> None:
        real_write(self, plan, work)  # type: ignore[arg-type]
        Path(tree.root, record_path(3)).write_bytes(record_3)

    monkeypatch.setattr(TreeCompaction, "_write", write_then_a_node_records_epoch_3)
    before = sorted(tree.published())
    (skipped,) = tree.compaction().run_pass([TOPIC]).directories
    assert "an epoch record of epoch 3 appeared" in skipped.skipped
    assert sorted(tree.published()) == before and work_dirs(tree) == []


def test_a_stopped_pass_exchanges_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    tree.keep_records_from(5)
    stop = threading.Event()
    stop.set()
    before = sorted(tree.published())
    assert tree.compaction(stop=stop).run_pass([TOPIC]).directories == ()
    assert sorted(tree.published()) == before and work_dirs(tree) == []


def test_readers_never_see_a_row_twice_or_miss_one_while_epochs_land_and_passes_run(tmp_path: Path) -> None:
    """See tests/compaction_readers.py: a snapshot listing never misses a row; pyarrow's own
    discovery only when an exchange tore it (counted, never a row twice)."""
    tree = Tree(tmp_path)
    tree.land(4)
    compaction = tree.compaction()
    with Readers(tree.root, TOPIC) as readers:
        for _ in range(12):
            tree.land(2, days=2)
            tree.keep_records_from(tree.epoch - 2)
            compaction.run_pass([TOPIC])
            time.sleep(0.01)
    print(readers.summary())
    assert readers.problems == [], readers.problems[:10]
    assert readers.reads["default"] > 5 and readers.reads["snapshot"] > 5 and readers.reads["listings"] > 100, \
        readers.summary()
    assert tree.rows() == tree.expected()
    assert len(tree.published()) < 4 * tree.epoch / 2  # 4 files an epoch landed, fewer than half of them left


@pytest.mark.parametrize("fault", ["after-write", "after-exchange"])
def test_a_pass_killed_between_steps_leaves_the_tree_exact_and_the_next_pass_cleans_up(tmp_path: Path,
                                                                                        fault: str) -> None:
    tree = Tree(tmp_path)
    tree.land(6, days=2)
    tree.keep_records_from(6)
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal\n"
        "from laminar_kafka.cluster.lake.parquet.compaction import TreeCompaction\n"
        "from laminar_kafka.cluster.lake.parquet.compaction_plan import CompactionSettings\n"
        f"def kill(step):\n    if step == {fault!r}:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"TreeCompaction({tree.root!r}, CompactionSettings(target_file_bytes={MIB}, grace_s=0), after_step=kill)"
        f".run_pass([{TOPIC!r}])\n")], capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    assert tree.rows() == tree.expected()
    leftovers = work_dirs(tree)
    assert len(leftovers) == 2  # after-write: two never exchanged; after-exchange: one replaced, one never exchanged
    exchanged = [n for n in tree.published() if os.path.basename(n).startswith("epochs-")]
    assert len(exchanged) == (0 if fault == "after-write" else 1)
    facts = read_parquet_facts(tree.fs, tree.root, "p", [TOPIC])
    assert facts.rolled_back_from == 0 and facts.epoch == 6

    report = tree.compaction(grace=60).run_pass([TOPIC])  # the killed pass's leftovers are due at once but one:
    assert report.leftovers_deleted == (2 if fault == "after-write" else 1)
    assert tree.rows() == tree.expected()
    assert len([n for n in tree.published() if os.path.basename(n).startswith("epochs-")]) == 2
    assert tree.compaction(grace=0).clean_leftovers()[0] >= 1 and work_dirs(tree) == []


def test_check_refuses_what_is_not_a_directory_and_a_second_compaction(tmp_path: Path) -> None:
    from laminar_kafka.cluster.lake.parquet.tree_lock import CompactionRunning, compaction_lock

    with pytest.raises(UsageError, match="is not a directory"):
        TreeCompaction(str(tmp_path / "absent"), CompactionSettings()).check()
    tree = Tree(tmp_path)
    tree.land(1)
    compaction = tree.compaction()
    compaction.check()
    assert work_dirs(tree) == []  # the probe is gone
    with compaction_lock(tree.root):
        with pytest.raises(CompactionRunning):
            compaction.check()
        with pytest.raises(CompactionRunning):
            compaction.run_pass([TOPIC])


def test_a_pass_reports_its_steps_to_after_step_in_order(tmp_path: Path) -> None:
    """The crash points the test above kills the process at: after writing (once per pass), after
    each directory's exchange (two directories here); a pass with nothing left to compact exchanges nothing."""
    tree = Tree(tmp_path)
    tree.land(6, days=2)
    tree.keep_records_from(6)
    steps: list[str] = []
    settings = CompactionSettings(target_file_bytes=MIB, grace_s=0)
    TreeCompaction(tree.root, settings, after_step=steps.append).run_pass([TOPIC])
    assert steps == [AFTER_WRITE, AFTER_EXCHANGE, AFTER_EXCHANGE]
    TreeCompaction(tree.root, settings, after_step=steps.append).run_pass([TOPIC])
    assert steps == [AFTER_WRITE, AFTER_EXCHANGE, AFTER_EXCHANGE, AFTER_WRITE]


def test_the_report_in_json_and_text(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    tree.keep_records_from(5)
    report = tree.compaction().run_pass([TOPIC])
    body = report.to_json()
    assert body["format"] == "parquet" and body["files_before"] == 10 and body["files_after"] == 3
    assert body["directories"][0]["outputs"] == list(report.directories[0].outputs)  # type: ignore[index]
    text = report.lines()
    assert text[0].endswith(": 10 -> 3 files, " + f"{report.bytes_rewritten:,} bytes rewritten")
    assert text[-1].startswith("orders: 1 leaf directory, 1 rewritten: 10 -> 3 files")


def test_the_replacement_gets_the_directorys_mode_and_a_foreign_owner_is_skipped(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tree = Tree(tmp_path)
    tree.land(5)
    tree.keep_records_from(5)
    (directory,) = {os.path.dirname(f) for f in tree.published()}
    os.chmod(Path(tree.root, directory), 0o2770)
    tree.compaction().run_pass([TOPIC])
    assert os.stat(Path(tree.root, directory)).st_mode & 0o7777 == 0o2770

    tree.land(2)
    tree.keep_records_from(7)
    live_stat = os.stat(Path(tree.root, directory))
    real_stat = os.stat

    class Foreign:  # the live directory as if another user owned it
        def __init__(self, result: os.stat_result) -> None:
            self.st_uid, self.st_gid, self.st_mode = result.st_uid + 1, result.st_gid, result.st_mode

    def stat_of(path: object, *args: object, **kwargs: object) -> object:
        result = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        return Foreign(result) if str(path) == str(Path(tree.root, directory)) else result

    def chown(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(compaction_module.os, "stat", stat_of)
    monkeypatch.setattr(compaction_module.os, "chown", chown)
    before = sorted(tree.published())
    (skipped,) = tree.compaction().run_pass([TOPIC]).directories
    assert f"it belongs to uid {live_stat.st_uid + 1}" in skipped.skipped and "run compact as the user" in skipped.skipped
    monkeypatch.undo()
    assert sorted(tree.published()) == before and work_dirs(tree) == []
