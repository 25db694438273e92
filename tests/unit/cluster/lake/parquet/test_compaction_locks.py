"""The atomic directory exchange and the tree's locks that make compaction safe beside publishers."""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from laminar_kafka.cluster.errors import SinkError, UsageError
from laminar_kafka.cluster.lake.parquet import exchange as exchange_module
from laminar_kafka.cluster.lake.parquet import tree_lock
from laminar_kafka.cluster.lake.parquet.exchange import ExchangeUnsupported, exchange_directories, filesystem_of
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, final_path, open_output, publish
from laminar_kafka.cluster.lake.parquet.tree_lock import (
    COMPACT_LOCK,
    PUBLISH_LOCK,
    CompactionRunning,
    compaction_lock,
    exclusive_publishing,
    publishing,
)


def test_exchange_swaps_two_directories_with_their_content(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "old.parquet").write_text("old")
    (tmp_path / "_laminar" / "compact" / "id").mkdir(parents=True)
    (tmp_path / "_laminar" / "compact" / "id" / "new.parquet").write_text("new")
    exchange_directories(str(tmp_path / "live"), str(tmp_path / "_laminar" / "compact" / "id"))
    assert os.listdir(tmp_path / "live") == ["new.parquet"]
    assert os.listdir(tmp_path / "_laminar" / "compact" / "id") == ["old.parquet"]


def test_an_open_directory_keeps_listing_what_it_was(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.parquet").write_text(name)
    fd = os.open(tmp_path / "a", os.O_RDONLY)
    try:
        exchange_directories(str(tmp_path / "a"), str(tmp_path / "b"))
        assert os.listdir(fd) == ["a.parquet"]  # a walker holding the old directory still reads it
        assert os.listdir(tmp_path / "a") == ["b.parquet"]
    finally:
        os.close(fd)


def test_exchange_with_a_missing_directory_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(SinkError, match="cannot exchange .*No such file"):
        exchange_directories(str(tmp_path / "a"), str(tmp_path / "missing"))
    assert (tmp_path / "a").is_dir() and not (tmp_path / "missing").exists()


def fake_renameat2(code: int) -> Any:
    def call(*_args: object) -> int:
        ctypes.set_errno(code)
        return -1

    return call


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS])
def test_a_filesystem_without_exchange_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             code: int) -> None:
    monkeypatch.setattr(exchange_module, "_renameat2", lambda: fake_renameat2(code))
    with pytest.raises(ExchangeUnsupported) as caught:
        exchange_directories(str(tmp_path / "a"), str(tmp_path / "b"))
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and "\n" not in message
    assert f"({filesystem_of(str(tmp_path))})" in message and "cannot exchange two directories atomically" in message


def test_a_platform_without_renameat2_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange_module, "_renameat2", lambda: None)
    with pytest.raises(ExchangeUnsupported, match="needs renameat2.RENAME_EXCHANGE., which this platform"):
        exchange_directories("/a", "/b")


def test_filesystem_of_takes_the_longest_mount_point(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 22 0:40 / /data/lake rw - nfs4 server:/export rw,vers=4.2\n"
        "31 22 0:41 / /data/lake\\040two rw - fuse.s3fs s3fs rw\n"
        "garbage line\n")
    assert filesystem_of("/data/lake/orders", str(mountinfo)) == "nfs4 at /data/lake"
    assert filesystem_of("/data/lakehouse", str(mountinfo)) == "ext4 at /"
    assert filesystem_of("/data/lake two/x", str(mountinfo)) == "fuse.s3fs at /data/lake two"
    assert filesystem_of("/x", str(tmp_path / "absent")) == "unknown filesystem"


# ---- locks ------------------------------------------------------------------------------------------------


def staged_file(tmp_path: Path, offset: int = 0) -> tuple[pafs.FileSystem, str, str]:
    fs, root = open_output(str(tmp_path / "out"))
    sink = ParquetSink(root, node_id=1, boot_id=f"b{offset}", filesystem=(fs, root))
    sink.write(pa.record_batch({"_topic": ["t"], "_partition": pa.array([0], pa.int32()),
                                "_offset": pa.array([offset], pa.int64()), "_timestamp": pa.array([0], pa.timestamp("ms"))}))
    (staged,) = sink.seal(1)
    return fs, root, staged


def test_publish_waits_while_a_compaction_holds_the_lock_exclusively(tmp_path: Path) -> None:
    fs, root, staged = staged_file(tmp_path)
    done = threading.Event()
    with exclusive_publishing(root):
        thread = threading.Thread(target=lambda: (publish(fs, root, [staged]), done.set()))
        thread.start()
        time.sleep(0.3)
        assert not done.is_set() and (Path(root) / staged).exists()  # blocked before its rename
    thread.join(10)
    assert done.is_set() and (Path(root) / final_path(staged)).exists()
    assert (Path(root) / PUBLISH_LOCK).is_file()


def test_a_compaction_waits_for_publishers_in_progress_and_gives_up_past_its_timeout(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    with publishing(fs, root), publishing(fs, root):  # publishers share it
        started = time.monotonic()
        with pytest.raises(SinkError, match="publishers held the publish lock .* for 0.2 s"):
            with exclusive_publishing(root, timeout_s=0.2):
                pass
        assert time.monotonic() - started >= 0.2
    taken = threading.Event()
    with publishing(fs, root):
        def compact() -> None:
            with exclusive_publishing(root, timeout_s=10):
                taken.set()

        thread = threading.Thread(target=compact)
        thread.start()
        time.sleep(0.2)
        assert not taken.is_set()
    thread.join(10)
    assert taken.is_set()


def test_publish_takes_no_lock_on_a_filesystem_that_is_not_local(tmp_path: Path) -> None:
    _, root, staged = staged_file(tmp_path)
    other = pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())  # any filesystem but pyarrow's local one
    assert publish(other, "", [staged]) == 1
    assert (Path(root) / final_path(staged)).exists() and not (Path(root) / PUBLISH_LOCK).exists()


def test_publish_of_nothing_takes_no_lock(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    assert publish(fs, root, []) == 0
    assert not (Path(root) / PUBLISH_LOCK).exists()


def test_publish_goes_on_unlocked_where_the_filesystem_has_no_flock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    fs, root, staged = staged_file(tmp_path)

    def no_flock(_fd: int, _operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    assert publish(fs, root, [staged]) == 1
    assert "has no flock" in caplog.text
    with pytest.raises(SinkError, match="compaction needs a local filesystem with flock"):
        with exclusive_publishing(root):
            pass


def test_publish_fails_when_its_lock_cannot_be_opened(tmp_path: Path) -> None:
    fs, root, staged = staged_file(tmp_path)
    (Path(root) / PUBLISH_LOCK).parent.mkdir(parents=True, exist_ok=True)
    (Path(root) / PUBLISH_LOCK).mkdir()  # a directory where the lock file should be
    with pytest.raises(SinkError, match="cannot open the publish lock"):
        publish(fs, root, [staged])
    assert (Path(root) / staged).exists()  # nothing renamed


def test_one_compaction_at_a_time_naming_the_holder(tmp_path: Path) -> None:
    root = str(tmp_path / "out")
    with compaction_lock(root):
        with pytest.raises(CompactionRunning, match=f"another compaction of {root} is running .pid {os.getpid()} on "):
            with compaction_lock(root):
                pass
    with compaction_lock(root):  # released
        assert (Path(root) / COMPACT_LOCK).is_file()


def test_locks_go_with_the_process(tmp_path: Path) -> None:
    """A holder killed with SIGKILL leaves no stale lock (flock belongs to the open file)."""
    import subprocess
    import sys

    root = str(tmp_path / "out")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from laminar_kafka.cluster.lake.parquet.tree_lock import compaction_lock, exclusive_publishing\n"
        f"with compaction_lock({root!r}), exclusive_publishing({root!r}):\n"
        "    print('held', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(CompactionRunning):
            with compaction_lock(root):
                pass
    finally:
        holder.kill()
        holder.wait(10)
    with compaction_lock(root), exclusive_publishing(root, timeout_s=1):
        pass
    tree_lock._warned_unlocked.clear()


def test_publish_into_a_read_only_tree_whose_files_are_published_needs_no_write(tmp_path: Path) -> None:
    """flock needs no write access: with the lock file there, a publish whose files are all published
    already (a retry after a crash) succeeds on a tree that turned read-only, as before the lock."""
    fs, root, staged = staged_file(tmp_path)
    assert publish(fs, root, [staged]) == 1
    (Path(root) / PUBLISH_LOCK).chmod(0o444)
    original = os.open
    writes: list[str] = []

    def watching(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if str(path).endswith(PUBLISH_LOCK.rsplit("/", 1)[-1]) and flags & (os.O_RDWR | os.O_WRONLY):
            writes.append(str(path))
        return original(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    os.open = watching  # type: ignore[assignment]
    try:
        assert publish(fs, root, [staged]) == 0
    finally:
        os.open = original  # type: ignore[assignment]
    assert writes == []
