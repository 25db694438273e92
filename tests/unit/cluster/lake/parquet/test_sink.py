"""Sink: naming, sealing, rotation, idempotent publish, recovery (local filesystem, no servers)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.sink import (
    STAGING_DIR,
    ParquetSink,
    StagedName,
    final_path,
    list_published,
    open_output,
    parse_staged,
    publish,
    recover,
)

NOON = dt.datetime(2024, 3, 5, 12, 0)
DAY_DIR = "t/dt=2024-03-05"


def batch(partition: int, start: int, count: int, topic: str = "t", at: dt.datetime = NOON) -> pa.RecordBatch:
    return pa.record_batch({
        "value": pa.array([b"x" * 10] * count, pa.binary()),
        "_topic": pa.array([topic] * count),
        "_partition": pa.array([partition] * count, pa.int32()),
        "_offset": pa.array(range(start, start + count), pa.int64()),
        "_timestamp": pa.array([at] * count, pa.timestamp("ms")),
    })


def files_under(directory: str | Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*") if p.is_file())


def make_sink(tmp_path: Path, **kwargs: object) -> ParquetSink:
    return ParquetSink(str(tmp_path / "out"), node_id=3, boot_id="b00t", **kwargs)  # type: ignore[arg-type]


@given(
    epoch=st.integers(1, 10**10 - 1), node=st.integers(1, 10**6), seq=st.integers(1, 10**8 - 1),
    boot=st.from_regex(r"[A-Za-z0-9-]{1,36}", fullmatch=True),
    directory=st.sampled_from(["", "t", "my.topic-1/dt=2024-03-05", "t/dt=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__"]),
)
def test_staged_names_round_trip(epoch: int, node: int, seq: int, boot: str, directory: str) -> None:
    name = StagedName(epoch, node, boot, seq, directory=directory)
    assert parse_staged(name.staged_path()) == name
    assert final_path(name.staged_path()) == (f"{directory}/" if directory else "") + name.file_name()
    assert parse_staged(StagedName(0, node, boot, seq).file_name()) == StagedName(0, node, boot, seq)


def test_final_path_rejects_open_and_foreign_files() -> None:
    with pytest.raises(SinkError):
        final_path(f"{STAGING_DIR}/open.node-1.boot-a.seq-00000001.parquet")
    with pytest.raises(SinkError):
        final_path("elsewhere/epoch-0000000001.node-1.boot-a.seq-00000001.parquet")
    assert parse_staged("notes.txt") is None
    with pytest.raises(SinkError):  # a bare file name is not a staged path
        final_path("epoch-0000000001.node-1.boot-a.seq-00000001.parquet")


@pytest.mark.parametrize("directory", ["../x", "t/../..", "_staging/t", "t/.hidden", "/abs", "t//dt=1", "t/a b"])
def test_a_staged_path_cannot_escape_its_place(directory: str) -> None:
    staged = f"{STAGING_DIR}/{directory}/epoch-0000000001.node-1.boot-a.seq-00000001.parquet"
    assert parse_staged(staged) is None
    with pytest.raises(SinkError):
        final_path(staged)
    with pytest.raises(SinkError):
        StagedName(1, 1, "a", 1, directory=directory)


def test_a_flat_name_staged_before_the_hive_layout_publishes_at_the_root(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    staged = f"{STAGING_DIR}/epoch-0000000004.node-1.boot-old.seq-00000001.parquet"
    assert parse_staged(staged) == StagedName(4, 1, "old", 1)
    assert final_path(staged) == "epoch-0000000004.node-1.boot-old.seq-00000001.parquet"
    (Path(root) / STAGING_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"_offset": [1]}), Path(root) / staged)
    report = recover(fs, root, latest_epoch=4, manifest_outputs={4: (staged,)}.get, live_boots=set())
    assert report.published == 1
    assert list_published(fs, root) == [f"{root}/epoch-0000000004.node-1.boot-old.seq-00000001.parquet"]


def test_seal_renames_to_epoch_names_and_publish_is_idempotent(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, row_group_rows=4)
    sink.write(batch(0, 0, 10))
    sink.write(batch(1, 0, 3))
    staged = sink.seal(7)
    assert staged == (f"{STAGING_DIR}/{DAY_DIR}/epoch-0000000007.node-3.boot-b00t.seq-00000001.parquet",)
    assert list_published(sink.fs, sink.root) == []  # readers see nothing before publish
    assert publish(sink.fs, sink.root, staged) == 1
    assert publish(sink.fs, sink.root, staged) == 0  # idempotent
    files = list_published(sink.fs, sink.root)
    assert files == [f"{sink.root}/{DAY_DIR}/epoch-0000000007.node-3.boot-b00t.seq-00000001.parquet"]
    table = pq.read_table(files[0])
    assert table.num_rows == 13
    assert table["_offset"].to_pylist()[:10] == list(range(10))
    assert pq.ParquetFile(files[0]).metadata.row_group(0).num_rows == 4


def test_empty_epoch_seals_nothing(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    assert sink.seal(1) == ()


def test_rotation_by_size_gives_several_files_in_one_epoch(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, row_group_rows=100, max_file_bytes=1)
    for i in range(3):
        sink.write(batch(0, i * 100, 100))
    staged = sink.seal(2)
    assert len(staged) == 3
    publish(sink.fs, sink.root, staged)
    offsets = sorted(o for f in list_published(sink.fs, sink.root) for o in pq.read_table(f)["_offset"].to_pylist())
    assert offsets == list(range(300))


def test_publish_of_a_lost_committed_file_fails_loudly(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    with pytest.raises(SinkError, match="neither staged nor published"):
        publish(sink.fs, sink.root, [f"{STAGING_DIR}/epoch-0000000001.node-1.boot-x.seq-00000001.parquet"])


def test_publish_finishes_an_interrupted_copy(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.write(batch(0, 0, 5))
    (staged,) = sink.seal(1)
    root = Path(sink.root)
    (root / final_path(staged)).parent.mkdir(parents=True)
    (root / final_path(staged)).write_bytes((root / staged).read_bytes())  # copy done, delete not
    assert publish(sink.fs, sink.root, [staged]) == 0
    assert not (root / staged).exists() and (root / final_path(staged)).exists()


class _RacedMoves(pafs.FileSystemHandler):
    """A local filesystem whose ``move`` loses every race as on an object store: another node's
    copy-then-delete of the same file lands first, and our copy fails with S3's ``NoSuchKey``."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def get_type_name(self) -> str:
        return "raced"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.local.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise NotImplementedError

    def delete_file(self, path: str) -> None:
        self.local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.local.move(src, dest)  # the other node's move
        raise OSError(f"When copying key {src!r}: AWS Error NO_SUCH_KEY during CopyObject operation")

    def copy_file(self, src: str, dest: str) -> None:
        self.local.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.local.open_input_file(path)

    def open_output_stream(self, path: str, metadata: dict[str, str] | None = None) -> pa.NativeFile:
        return self.local.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: dict[str, str] | None = None) -> pa.NativeFile:
        return self.local.open_append_stream(path, metadata=metadata)


def test_publish_that_loses_the_move_to_another_node_succeeds(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.write(batch(0, 0, 5))
    (staged,) = sink.seal(1)
    raced = pafs.PyFileSystem(_RacedMoves())
    assert publish(raced, sink.root, [staged]) == 0  # the other node renamed it
    root = Path(sink.root)
    assert not (root / staged).exists() and (root / final_path(staged)).exists()


def test_discard_unsealed_drops_rows_and_open_files(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, row_group_rows=1)
    sink.write(batch(0, 0, 5))
    assert sink.discard_unsealed() == 1
    assert sink.seal(1) == ()
    assert files_under(Path(sink.root) / STAGING_DIR) == []


def test_recover_publishes_listed_deletes_unlisted_and_dead_open_files(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    sinks = {boot: ParquetSink(root, node_id=n, boot_id=boot, filesystem=(fs, root)) for n, boot in ((1, "live"), (2, "dead"))}
    sinks["live"].write(batch(0, 0, 5))
    committed = sinks["live"].seal(1)
    sinks["dead"].write(batch(1, 0, 5))
    dropped = sinks["dead"].seal(1)  # acked, but epoch 1 committed without it
    sinks["live"].write(batch(0, 5, 5))
    pending = sinks["live"].seal(2)  # epoch 2 not committed yet
    sinks["dead"].write(batch(1, 5, 1))
    sinks["dead"].flush()  # an open file of the dead boot
    sinks["live"].write(batch(0, 10, 1))
    sinks["live"].flush()  # an open file of a live boot
    report = recover(fs, root, latest_epoch=1, manifest_outputs={1: committed}.get, live_boots={"live"})
    assert (report.published, report.deleted, report.kept) == (1, 2, 2)
    assert list_published(fs, root) == [f"{root}/{final_path(committed[0])}"]
    remaining = [p.name for p in files_under(Path(root) / STAGING_DIR)]
    assert Path(pending[0]).name in remaining and Path(dropped[0]).name not in remaining
    assert any(n.startswith("open.node-1.boot-live") for n in remaining)


def test_recover_keeps_files_whose_manifest_is_gone(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    sink.write(batch(0, 0, 5))
    sink.seal(1)
    report = recover(sink.fs, sink.root, latest_epoch=5, manifest_outputs=lambda e: None, live_boots=set())
    assert report.kept == 1 and report.deleted == 0


def test_check_writable_fails_for_a_file_in_the_way(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SinkError, match="not writable"):
        ParquetSink(str(blocker / "out"), node_id=1, boot_id="b").check_writable()


def test_bad_boot_id_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SinkError):
        ParquetSink(str(tmp_path), node_id=1, boot_id="a/b")


class _RacingFs:
    """A filesystem where another node deletes each file just before this one does."""

    def __init__(self, fs: object) -> None:
        self._fs = fs

    def __getattr__(self, name: str) -> object:
        return getattr(self._fs, name)

    def delete_file(self, path: str) -> None:
        self._fs.delete_file(path)  # type: ignore[attr-defined] # the other node's delete
        self._fs.delete_file(path)  # type: ignore[attr-defined] # ours: the file is gone


def test_recover_tolerates_a_file_another_node_deleted_first(tmp_path: Path) -> None:
    """Chaos seed 11: two nodes recovered the same staging directory at once and one died with
    FileNotFoundError on a file the other had just deleted."""
    fs, root = open_output(str(tmp_path / "out"))
    dead = ParquetSink(root, node_id=2, boot_id="dead", filesystem=(fs, root))
    dead.write(batch(1, 0, 5))
    dead.seal(1)  # acked, but epoch 1 committed without it
    dead.write(batch(1, 5, 1))
    dead.flush()  # an open file of the dead boot
    report = recover(_RacingFs(fs), root, latest_epoch=1, manifest_outputs={1: ()}.get, live_boots=set())  # type: ignore[arg-type]
    assert (report.published, report.deleted) == (0, 0)
    assert files_under(Path(root) / STAGING_DIR) == []
