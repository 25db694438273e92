"""The tree listing a compaction cannot tear (one handle per directory), against pyarrow's, which
it can: under a directory exchanged over and over, pyarrow's listing shows part of the old files;
this one shows all the old files or all the new ones, and otherwise the same files as list_published."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow.fs as pafs

from laminar_kafka.cluster.lake.parquet.exchange import exchange_directories
from laminar_kafka.cluster.lake.parquet.listing import published_files
from laminar_kafka.cluster.lake.parquet.sink import list_published
from tests.unit.cluster.lake.parquet.compaction_trees import TOPIC, Tree


def test_the_same_files_as_list_published(tmp_path: Path) -> None:
    tree = Tree(tmp_path, partition_by="hour")
    tree.land(3, days=2)
    base = Path(tree.root, TOPIC)
    for extra in ("_hidden/x.parquet", ".dot/y.parquet", "dt=2024-05-01/_z.parquet", "dt=2024-05-01/.w.parquet",
                  "dt=2024-05-01/notes.txt", "loose.parquet"):
        (base / extra).parent.mkdir(parents=True, exist_ok=True)
        (base / extra).write_bytes(b"x")
    (base / "dt=2024-05-01" / "dangling.parquet").symlink_to(base / "absent")
    (base / "linked").symlink_to(base / "dt=2024-05-01", target_is_directory=True)
    assert published_files(str(base)) == list_published(pafs.LocalFileSystem(), str(base))
    assert published_files(tree.root) == list_published(pafs.LocalFileSystem(), tree.root)
    assert published_files(str(tmp_path / "absent")) == []


def test_a_directory_exchanged_while_listed_shows_all_old_or_all_new_files(tmp_path: Path) -> None:
    live, other = tmp_path / "t" / "live", tmp_path / "t" / "other"
    live.mkdir(parents=True)
    other.mkdir()
    for i in range(40):
        (live / f"old-{i}.parquet").write_bytes(b"")
    for i in range(3):
        (other / f"new-{i}.parquet").write_bytes(b"")
    stop = threading.Event()

    def exchange() -> None:
        while not stop.is_set():
            exchange_directories(str(live), str(other))
            time.sleep(0.0005)

    def shapes(lister: object, seconds: float) -> set[tuple[int, int]]:
        seen = set()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            names = [os.path.basename(p) for p in lister()]  # type: ignore[operator]
            seen.add((sum(n.startswith("old") for n in names), sum(n.startswith("new") for n in names)))
        return seen

    def identity() -> tuple[int, int]:
        info = os.stat(live)
        return info.st_ino, info.st_ctime_ns

    unexplained = []

    def pyarrow_listing() -> list[str]:
        """pyarrow's listing; a torn one must come with the directory changed while it listed (the
        check tests/compaction_readers.py and a careful reader use)."""
        before = identity()
        selector = pafs.FileSelector(str(live), recursive=True, allow_not_found=True)
        paths = [i.path for i in pafs.LocalFileSystem().get_file_info(selector) if i.type == pafs.FileType.File]
        shape = (sum("old" in p for p in paths), sum("new" in p for p in paths))
        if shape not in ((40, 0), (0, 3)) and identity() == before:
            unexplained.append(shape)
        return paths

    thread = threading.Thread(target=exchange)
    thread.start()
    try:
        assert shapes(lambda: published_files(str(live)), 1.0) == {(40, 0), (0, 3)}
        # list_published lists a local tree the same way (the readers of verify, the audit, reconcile)
        assert shapes(lambda: list_published(pafs.LocalFileSystem(), str(live)), 1.0) == {(40, 0), (0, 3)}
        torn = shapes(pyarrow_listing, 1.5) - {(40, 0), (0, 3)}
    finally:
        stop.set()
        thread.join(10)
    assert torn and all(old == 0 or new == 0 for old, new in torn)  # pyarrow's: part of one side, never both
    assert unexplained == []
