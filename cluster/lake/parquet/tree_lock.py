"""The Parquet tree's locks, for compaction beside running publishers: ``flock`` on files under
``<root>/_laminar/`` (readers skip ``_`` paths), taken only on a local filesystem.

- ``publish.lock``: every :func:`~laminar_kafka.cluster.lake.parquet.sink.publish` call holds it
  **shared** around its renames (:func:`publishing`: one lock per call, not per file; publishers
  never wait for each other). A compaction holds it **exclusive** (:func:`exclusive_publishing`) from
  its last listing of a live directory to the exchange of that directory, so no file is renamed
  into a directory between the two (it would be left behind in the replaced directory).
- ``compact.lock``: one compaction at a time per tree (:func:`compaction_lock`, non-blocking), so a
  pass never deletes the work directory of another one that is still running.

``flock`` locks belong to the open file and go with the process: a node or a compaction killed
with SIGKILL leaves no stale lock. On a filesystem without ``flock`` (a network filesystem answering
``ENOLCK``) a publisher goes on unlocked: compaction needs the same lock, so it refuses to run there.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator

import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import SinkError, UsageError

logger = logging.getLogger(__name__)

__all__ = ["COMPACT_LOCK", "LOCK_DIR", "PUBLISH_LOCK", "CompactionRunning", "compaction_lock",
           "exclusive_publishing", "publishing"]

#: where the locks live, relative to the root
LOCK_DIR = "_laminar"
PUBLISH_LOCK = f"{LOCK_DIR}/publish.lock"
COMPACT_LOCK = f"{LOCK_DIR}/compact.lock"
#: errors of a filesystem that has no flock
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_warned_unlocked: set[str] = set()


class CompactionRunning(UsageError):
    """Another compaction holds the tree's compaction lock."""


def _open_lock(root: str, relative: str, *, writable: bool = False) -> int:
    """A descriptor of the lock file (created when absent). ``flock`` needs no write access, so an
    existing lock opens read-only unless ``writable``: a node publishing into a tree that turned
    read-only (or full) fails at its renames, as it did before the lock, not at the lock."""
    path = os.path.join(root, relative)
    if not writable:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


@contextlib.contextmanager
def publishing(fs: pafs.FileSystem, root: str) -> Iterator[None]:
    """Hold the shared publish lock of the tree at ``root`` while the body renames files into it;
    nothing on a filesystem that is not local (an object store has no compaction to wait for).
    Raises :class:`SinkError` when the lock file cannot be opened."""
    if not isinstance(fs, pafs.LocalFileSystem):
        yield
        return
    try:
        fd = _open_lock(root, PUBLISH_LOCK)
    except OSError as exc:
        raise SinkError(f"cannot open the publish lock under {root!r}: {exc}", cause=exc) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise SinkError(f"cannot take the publish lock under {root!r}: {exc}", cause=exc) from exc
            if root not in _warned_unlocked:
                _warned_unlocked.add(root)
                logger.warning("the filesystem of %s has no flock (%s): publishing unlocked (compaction cannot "
                               "run on it)", root, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def exclusive_publishing(root: str, timeout_s: float = 30.0) -> Iterator[None]:
    """Hold the publish lock of the local tree at ``root`` exclusively: no :func:`publishing` body
    runs meanwhile. Waits up to ``timeout_s`` for the publishers in progress (each holds it for one
    call's renames); raises :class:`SinkError` past it, or when the filesystem has no flock."""
    try:
        fd = _open_lock(root, PUBLISH_LOCK)
    except OSError as exc:
        raise SinkError(f"cannot open the publish lock under {root!r}: {exc}", cause=exc) from exc
    try:
        deadline = time.monotonic() + timeout_s
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SinkError(f"publishers held the publish lock under {root!r} for {timeout_s:g} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            except OSError as exc:
                raise SinkError(f"cannot lock the publish lock under {root!r} ({exc}): compaction needs a local "
                                "filesystem with flock", cause=exc) from exc
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def compaction_lock(root: str) -> Iterator[None]:
    """Be the only compaction of the local tree at ``root`` while the body runs. Raises
    :class:`CompactionRunning` naming the holder (pid, host, start) when another one runs, and
    :class:`SinkError` when the lock cannot be taken at all."""
    try:
        fd = _open_lock(root, COMPACT_LOCK, writable=True)  # it holds the holder's name
    except OSError as exc:
        raise SinkError(f"cannot open the compaction lock under {root!r}: {exc}", cause=exc) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "holder unknown"
            raise CompactionRunning(f"another compaction of {root} is running ({holder})") from None
        except OSError as exc:
            raise SinkError(f"cannot lock the compaction lock under {root!r} ({exc}): compaction needs a local "
                            "filesystem with flock", cause=exc) from exc
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
