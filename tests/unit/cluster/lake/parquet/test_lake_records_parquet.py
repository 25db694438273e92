"""The Parquet tree's epoch records (laminar_kafka.cluster.lake.parquet.records) and ParquetTree's read_facts / seal,
on pyarrow's LocalFileSystem under tmp_path."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.lake.parquet.records import (
    RECORDS_KEPT,
    drop_records_after,
    read_parquet_facts,
    read_record,
    write_record,
)
from laminar_kafka.cluster.lake.parquet.sink import StagedName, final_path
from laminar_kafka.cluster.lake.parquet.tree import ParquetTree
from laminar_kafka.cluster.lake.reconcile import Action, ControlFacts, LakeFacts, OnLakeBehind, reconcile
from laminar_kafka.cluster.lake.record import RECORDS_DIR, LakeRecord, record_path
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.coordinator.values import Manifest

PIPE = "pipe"
TOPICS = ["t"]


@pytest.fixture
def fs() -> pafs.FileSystem:
    return pafs.LocalFileSystem()


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "out")


def rows(epoch: int) -> pa.Table:
    return pa.table({"_offset": pa.array([epoch * 10, epoch * 10 + 1], pa.int64()), "value": [b"a", b"b"]})


def land(root: str, relative: str, epoch: int = 1) -> str:
    """A published Parquet file at ``root/relative``."""
    path = Path(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows(epoch), path)
    return relative


def data_file(epoch: int, n: int = 1) -> str:
    return f"t/dt=2026-01-01/epoch-{epoch:010d}.node-{n}.boot-b.seq-{n:08d}.parquet"


def record(epoch: int, files: tuple[str, ...] = (), pipeline: str = PIPE) -> LakeRecord:
    return LakeRecord(pipeline, epoch, 2, {"s": {"t:0": epoch * 10 + 2, "t:1": epoch}}, {"t": "id-t"}, files)


def record_files(root: str) -> list[str]:
    directory = Path(root) / RECORDS_DIR
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def publish_epoch(fs: pafs.FileSystem, root: str, epoch: int, files: int = 1) -> LakeRecord:
    """Land ``files`` data files of ``epoch`` and leave its record, as a published epoch does."""
    landed = tuple(land(root, data_file(epoch, n), epoch) for n in range(1, files + 1))
    rec = record(epoch, landed)
    assert write_record(fs, root, rec)
    return rec


# ---- write_record --------------------------------------------------------------------------------------


def test_a_record_is_written_once_every_file_it_lists_exists(fs: pafs.FileSystem, root: str) -> None:
    rec = record(3, (land(root, data_file(3, 1)), land(root, data_file(3, 2))))
    assert write_record(fs, root, rec)
    path = Path(root) / record_path(3)
    assert LakeRecord.from_json(path.read_bytes(), "r") == rec
    assert record_files(root) == ["epoch-0000000003.json"]  # no temporary file left


def test_a_record_with_a_missing_file_records_the_loss(fs: pafs.FileSystem, root: str) -> None:
    whole = publish_epoch(fs, root, 2)
    rec = record(3, (land(root, data_file(3, 1)), data_file(3, 2)))
    assert write_record(fs, root, rec)
    assert record_files(root) == ["epoch-0000000002.json", "epoch-0000000003.json"]
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)  # epoch 3 is not whole: the lake ends at 2
    assert (facts.epoch, facts.rolled_back_from, facts.cursors) == (2, 3, whole.cursors)
    assert facts.hole  # one of epoch 3's files is still there: a rewind to 2 would land it twice
    land(root, data_file(3, 2))  # the file is restored: the epoch is whole
    assert read_parquet_facts(fs, root, PIPE, TOPICS).epoch == 3


def test_a_directory_where_a_listed_file_should_be_does_not_count(fs: pafs.FileSystem, root: str) -> None:
    (Path(root) / "t" / "dir.parquet").mkdir(parents=True)
    assert write_record(fs, root, record(1, ("t/dir.parquet",)))
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts.epoch == 0 and facts.rolled_back_from == 1


def test_writing_a_record_is_idempotent(fs: pafs.FileSystem, root: str) -> None:
    rec = record(4, (land(root, data_file(4)),))
    assert write_record(fs, root, rec)
    path = Path(root) / record_path(4)
    first = path.read_bytes()
    stamp = path.stat().st_mtime_ns
    assert not write_record(fs, root, rec)
    assert not write_record(fs, root, record(4, ()))  # another node's: the record already exists
    assert path.read_bytes() == first and path.stat().st_mtime_ns == stamp
    assert record_files(root) == ["epoch-0000000004.json"]


def test_a_record_listing_no_file_is_written(fs: pafs.FileSystem, root: str) -> None:
    assert write_record(fs, root, record(7))
    assert record_files(root) == ["epoch-0000000007.json"]


def test_the_record_records_kept_epochs_older_is_deleted(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2, 3, RECORDS_KEPT):
        assert write_record(fs, root, record(epoch))
    assert len(record_files(root)) == 4  # epoch RECORDS_KEPT deletes nothing
    assert write_record(fs, root, record(RECORDS_KEPT + 1))
    assert record_path(1).rpartition("/")[2] not in record_files(root)
    assert len(record_files(root)) == 4
    assert write_record(fs, root, record(RECORDS_KEPT + 3))
    assert record_files(root) == [record_path(e).rpartition("/")[2] for e in (2, RECORDS_KEPT, RECORDS_KEPT + 1,
                                                                             RECORDS_KEPT + 3)]
    assert write_record(fs, root, record(RECORDS_KEPT + 9))  # the one to delete never existed: fine
    assert len(record_files(root)) == 5


def test_records_kept_is_a_hundred() -> None:
    assert RECORDS_KEPT == 100


# ---- read_parquet_facts ---------------------------------------------------------------------------------


def test_an_empty_tree_shows_nothing(fs: pafs.FileSystem, root: str) -> None:
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)  # the root does not even exist
    assert facts == LakeFacts(dense=True, has_data=False)
    Path(root).mkdir()
    assert read_parquet_facts(fs, root, PIPE, TOPICS) == LakeFacts(dense=True, has_data=False)


def test_rows_without_records_have_data_but_no_records(fs: pafs.FileSystem, root: str) -> None:
    land(root, "t/dt=2026-01-01/old.parquet")
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts.has_data and not facts.has_records and facts.dense
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from, dict(facts.cursors)) == (0, 0, 0, {})
    # only the pipeline's topics' directories count, and only Parquet files in them
    assert not read_parquet_facts(fs, root, PIPE, ["other"]).has_data
    (Path(root) / "u").mkdir()
    (Path(root) / "u" / "notes.txt").write_text("x")
    assert not read_parquet_facts(fs, root, PIPE, ["u"]).has_data


def test_the_latest_complete_record_wins(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2, 3):
        latest = publish_epoch(fs, root, epoch, files=2)
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts == LakeFacts(
        epoch=3, high_epoch=3, cursors=latest.cursors, topic_ids={"t": "id-t"}, dense=True, rolled_back_from=0,
        has_records=True, has_data=True, where="record _laminar/epochs/epoch-0000000003.json",
    )


def test_records_whose_files_were_removed_are_rolled_back(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2, 3, 4):
        publish_epoch(fs, root, epoch, files=2)
    for epoch in (3, 4):  # the lake lost epochs 3 and 4 (a bucket restored from an older backup)
        for n in (1, 2):
            (Path(root) / data_file(epoch, n)).unlink()
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from, facts.hole) == (2, 4, 4, "")
    assert facts.cursors == record(2).cursors and facts.has_records and facts.has_data
    assert facts.where == "record _laminar/epochs/epoch-0000000002.json"
    # the decision: a lake behind its control state
    control = ControlFacts(Manifest(4, 2, {"s": {"t:0": 42, "t:1": 4}}), Manifest(0, 0, {"s": {"t:0": 0}}), 4)
    assert reconcile(PIPE, control, facts, {"t": "id-t"}, OnLakeBehind.FAIL).action is Action.REFUSE
    rewind = reconcile(PIPE, control, facts, {"t": "id-t"}, OnLakeBehind.REWIND)
    assert rewind.action is Action.RESEED and rewind.seed is not None
    assert rewind.seed.epoch == 5 and rewind.seed.cursors == record(2).cursors
    # the seal drops the lost epochs' records and leaves the seed's
    seed = LakeRecord(PIPE, 5, 0, rewind.seed.cursors, {"t": "id-t"})
    ParquetTree(fs, root).seal(seed, facts.epoch)
    assert record_files(root) == [f"epoch-{e:010d}.json" for e in (1, 2, 5)]
    sealed = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert (sealed.epoch, sealed.high_epoch, sealed.rolled_back_from, sealed.hole) == (5, 5, 0, "")
    after = ControlFacts(rewind.seed, rewind.seed, 0)
    assert reconcile(PIPE, after, sealed, {"t": "id-t"}, OnLakeBehind.FAIL).action is Action.CONTINUE


def test_a_lost_epoch_under_kept_ones_is_a_hole(fs: pafs.FileSystem, root: str) -> None:
    """Epoch 2 lost, epoch 3 still there: no cursor lands 2 again without landing 3 twice."""
    for epoch in (1, 2, 3):
        publish_epoch(fs, root, epoch)
    (Path(root) / data_file(2)).unlink()
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert "epoch 2" in facts.hole and data_file(3) in facts.hole
    assert (facts.epoch, facts.rolled_back_from) == (1, 3)
    control = ControlFacts(Manifest(3, 2, record(3).cursors), Manifest(0, 0, {"s": {"t:0": 0}}), 3)
    for on_lake_behind in OnLakeBehind:
        for facts_of in (control, ControlFacts(None)):
            decision = reconcile(PIPE, facts_of, facts, {"t": "id-t"}, on_lake_behind)
            assert decision.action is Action.REFUSE and "hole" in decision.reason and "epoch 2" in decision.reason


def test_the_surviving_files_of_a_partly_lost_epoch_are_a_hole(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2, 3):
        publish_epoch(fs, root, epoch, files=2)
    (Path(root) / data_file(3, 2)).unlink()  # epoch 3 lost one of its two files; the other is still read
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert (facts.epoch, facts.rolled_back_from) == (2, 3)
    assert facts.hole  # a rewind to epoch 2's cursors lands data_file(3, 1)'s rows a second time


def test_every_record_incomplete(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2):
        publish_epoch(fs, root, epoch)
    for epoch in (1, 2):
        (Path(root) / data_file(epoch)).unlink()
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)  # a wiped tree: it starts again
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from, facts.hole) == (0, 2, 2, "")
    assert facts.has_records and not facts.has_data and dict(facts.cursors) == {} and facts.dense
    assert record_path(1) in facts.where and record_path(2) in facts.where
    land(root, "t/dt=2026-01-02/other.parquet")  # rows whose cursors no record says: a hole
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts.has_data and "none of the last 2" in facts.hole


def test_another_pipelines_record(fs: pafs.FileSystem, root: str) -> None:
    publish_epoch(fs, root, 1)
    assert write_record(fs, root, record(2, pipeline="billing"))
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts.other_pipelines == ("billing",) and facts.has_records
    assert RECORDS_DIR in facts.where
    decision = reconcile(PIPE, ControlFacts(None), facts, {}, OnLakeBehind.REWIND)
    assert decision.action is Action.REFUSE and "'billing'" in decision.reason


def test_another_pipelines_record_under_this_pipelines_newer_ones(fs: pafs.FileSystem, root: str) -> None:
    assert write_record(fs, root, record(1, pipeline="billing"))
    publish_epoch(fs, root, 2)
    assert read_parquet_facts(fs, root, PIPE, TOPICS).other_pipelines == ("billing",)


@pytest.mark.parametrize("content", [b"{not json", b"{}", b'{"format_version": 2}', b"\xff",
                                     record(3).to_json().replace(b'"epoch":3', b'"epoch":"3"')])
def test_a_corrupt_record_is_a_codec_error_naming_its_path(fs: pafs.FileSystem, root: str, content: bytes) -> None:
    publish_epoch(fs, root, 1)
    path = Path(root) / record_path(3)
    path.write_bytes(content)
    with pytest.raises(CodecError) as raised:
        read_parquet_facts(fs, root, PIPE, TOPICS)
    assert str(path) in str(raised.value) or record_path(3) in str(raised.value)
    assert "lake record" in str(raised.value)


def test_a_record_holding_another_epoch_than_its_name_is_a_codec_error(fs: pafs.FileSystem, root: str) -> None:
    publish_epoch(fs, root, 1)
    (Path(root) / record_path(5)).write_bytes(record(4).to_json())
    with pytest.raises(CodecError, match="epoch-0000000005.json holds epoch 4"):
        read_parquet_facts(fs, root, PIPE, TOPICS)


def test_other_files_beside_the_records_are_ignored(fs: pafs.FileSystem, root: str) -> None:
    publish_epoch(fs, root, 2)
    directory = Path(root) / RECORDS_DIR
    (directory / ".tmp-0123456789abcdef").write_bytes(b"half a rec")
    (directory / "epoch-9.json").write_bytes(b"?")
    (directory / "epoch-0000000009.json.bak").write_bytes(b"?")
    (directory / "epoch-0000000008.json").mkdir()  # a directory, not a record
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from) == (2, 2, 0)


# ---- ParquetTree --------------------------------------------------------------------------------------


def stage(root: str, epoch: int, seq: int) -> str:
    name = StagedName(epoch, 1, "b", seq, directory="t/dt=2026-01-01")
    land(root, name.staged_path(), epoch)
    return name.staged_path()


def test_parquet_tree_publishes_records_reads_facts_and_seals(fs: pafs.FileSystem, root: str) -> None:
    manifests: dict[int, tuple[str, ...]] = {}

    def record_of(epoch: int) -> LakeRecord | None:
        staged = manifests.get(epoch)
        return None if staged is None else record(epoch, tuple(final_path(s) for s in staged))

    tree = ParquetTree(fs, root, record_of=record_of)
    assert tree.read_facts(PIPE, TOPICS) == LakeFacts(dense=True, has_data=False)
    tree.publish(1, (stage(root, 1, 1),), lambda e: manifests.get(e), 1)  # epoch 1 has no record: none written
    assert not tree.read_facts(PIPE, TOPICS).has_records and tree.read_facts(PIPE, TOPICS).has_data

    for epoch in (2, 3):
        manifests[epoch] = (stage(root, epoch, 2 * epoch), stage(root, epoch, 2 * epoch + 1))
        assert tree.publish(epoch, manifests[epoch], lambda e: manifests.get(e), 1) == 0
    facts = tree.read_facts(PIPE, TOPICS)
    assert (facts.epoch, facts.rolled_back_from, dict(facts.cursors)) == (3, 0, record(3).cursors)
    assert tree.publish(3, manifests[3], lambda e: manifests.get(e), 1) == 0  # again: idempotent
    assert record_files(root) == ["epoch-0000000002.json", "epoch-0000000003.json"]

    (Path(root) / final_path(manifests[3][1])).unlink()  # the lake lost a file of epoch 3
    facts = tree.read_facts(PIPE, TOPICS)
    assert (facts.epoch, facts.high_epoch, facts.rolled_back_from) == (2, 3, 3)

    seed = LakeRecord(PIPE, 4, 0, facts.cursors, facts.topic_ids)
    tree.seal(seed, facts.epoch)
    tree.seal(seed, facts.epoch)  # idempotent
    assert record_files(root) == ["epoch-0000000002.json", "epoch-0000000004.json"]  # 3's record dropped
    sealed = tree.read_facts(PIPE, TOPICS)
    assert (sealed.epoch, sealed.high_epoch, sealed.rolled_back_from) == (4, 4, 0)
    assert sealed.cursors == record(2).cursors and sealed.where == "record _laminar/epochs/epoch-0000000004.json"
    control = ControlFacts(Manifest(4, 0, dict(seed.cursors)), Manifest(4, 0, dict(seed.cursors)), 0)
    assert reconcile(PIPE, control, sealed, {"t": "id-t"}, OnLakeBehind.FAIL).action is Action.CONTINUE

    manifests[5] = (stage(root, 5, 20),)
    tree.publish(5, manifests[5], lambda e: manifests.get(e), 1)
    assert tree.read_facts(PIPE, TOPICS).epoch == 5


def test_parquet_tree_records_an_epoch_whose_files_are_missing_as_lost(fs: pafs.FileSystem, root: str) -> None:
    published = stage(root, 1, 1)
    tree = ParquetTree(fs, root,
                       record_of=lambda epoch: record(epoch, (final_path(published), "t/dt=2026-01-01/gone.parquet")))
    tree.publish(1, (published,), lambda e: None, 1)
    assert record_files(root) == ["epoch-0000000001.json"]
    facts = tree.read_facts(PIPE, TOPICS)  # not whole; its surviving file is a hole (a rewind lands it twice)
    assert facts.has_records and facts.epoch == 0 and facts.rolled_back_from == 1 and facts.hole


class Tree:
    """A ParquetTree whose epochs' files are staged and listed in manifests, records from them."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs, self.root = fs, root
        self.manifests: dict[int, tuple[str, ...]] = {}
        self.tree = self.node(records=True)

    def node(self, records: bool) -> ParquetTree:
        if not records:
            return ParquetTree(self.fs, self.root)
        return ParquetTree(self.fs, self.root, record_of=lambda e: (
            record(e, tuple(final_path(s) for s in self.manifests[e])) if e in self.manifests else None))

    def publish(self, epoch: int, tree: ParquetTree | None = None, oldest_epoch: int = 1) -> None:
        self.manifests[epoch] = (stage(self.root, epoch, epoch),)
        (tree or self.tree).publish(epoch, self.manifests[epoch], self.manifests.get, oldest_epoch)

    def lose(self, epoch: int) -> None:
        (Path(self.root) / final_path(self.manifests[epoch][0])).unlink()


def test_publish_records_the_earlier_epochs_not_recorded_yet_in_order(fs: pafs.FileSystem, root: str) -> None:
    lake = Tree(fs, root)
    older = lake.node(records=False)  # a version before records
    for epoch in (1, 2, 3):
        lake.publish(epoch, older)
    assert record_files(root) == []
    lake.publish(4, oldest_epoch=2)  # the first publish of the upgraded node: from the oldest kept manifest
    assert record_files(root) == [f"epoch-{e:010d}.json" for e in (2, 3, 4)]
    assert read_parquet_facts(fs, root, PIPE, TOPICS).epoch == 4


def test_drop_records_after_deletes_the_records_between_shown_and_seed(fs: pafs.FileSystem, root: str) -> None:
    for epoch in (1, 2, 3, 4, 6):
        assert write_record(fs, root, record(epoch))
    assert drop_records_after(fs, root, 2, 6) == 2
    assert record_files(root) == [f"epoch-{e:010d}.json" for e in (1, 2, 6)]
    assert drop_records_after(fs, root, 2, 6) == 0
    assert read_record(fs, root, 6) == record(6) and read_record(fs, root, 3) is None


def test_an_epoch_lost_before_its_record_does_not_rewind_over_later_epochs(fs: pafs.FileSystem, root: str) -> None:
    lake = Tree(fs, root)
    older = lake.node(records=False)
    for epoch in (1, 2, 3, 4):  # landed by a version before records
        lake.publish(epoch, older)
    lake.lose(2)
    for epoch in (5, 6):  # the upgraded node: its chain breaks at epoch 2
        lake.publish(epoch)
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    control = ControlFacts(Manifest(6, 2, record(6).cursors), Manifest(0, 0, {"s": {"t:0": 0}}), 6)
    decision = reconcile(PIPE, control, facts, {"t": "id-t"}, OnLakeBehind.REWIND)
    # epochs 3 to 6 are in the lake: a seed at epoch 1's cursors lands their rows a second time
    assert decision.action is not Action.RESEED, decision


def test_the_seal_deletes_files_of_an_epoch_published_without_its_record(fs: pafs.FileSystem, root: str) -> None:
    """Nodes stopped between epoch 2's renames and its record, then the control state was lost: the
    seed's cursors (epoch 1's) read epoch 2's rows again, so its published files (rows and rejected
    records) must go, or they land twice."""
    publish_epoch(fs, root, 1)
    kept_rejected = land(root, "_rejected/epoch-0000000001.node-1.boot-b.seq-00000009.parquet", 1)
    orphans = [land(root, data_file(2, n), 2) for n in (1, 2)]
    orphans.append(land(root, "_rejected/epoch-0000000002.node-1.boot-b.seq-00000003.parquet", 2))
    facts = read_parquet_facts(fs, root, PIPE, TOPICS)
    assert facts.epoch == 1
    ParquetTree(fs, root).seal(LakeRecord(PIPE, 2, 0, record(1).cursors, {"t": "id-t"}), facts.epoch)
    assert not any((Path(root) / orphan).exists() for orphan in orphans)
    assert (Path(root) / data_file(1)).exists() and (Path(root) / kept_rejected).exists()
    assert record_files(root) == [f"epoch-{e:010d}.json" for e in (1, 2)]
