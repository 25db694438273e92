"""Publishing sealed staged files: each renamed to its final name, idempotently, by any node.

The final path of a staged file is a pure function of its path
(:func:`~laminar_kafka.cluster.lake.staged_names.final_path`), so publishing an epoch is a set of
renames any node may repeat; :mod:`laminar_kafka.cluster.lake.parquet.sink` re-exports :func:`publish`.
"""
from __future__ import annotations

import posixpath
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.tree_lock import publishing
from laminar_kafka.cluster.lake.staged_names import final_path

__all__ = ["publish", "publish_found"]


def _join(root: str, relative: str) -> str:
    return f"{root}/{relative}" if root else relative


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File


def publish(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
    """Publish the listed sealed staged files by renaming each to its final name. Idempotent.

    Returns how many files this call renamed. Raises :class:`SinkError` when a listed file is
    neither staged nor published (committed output lost) or a rename fails.

    On a local filesystem the renames hold the tree's shared publish lock (one lock per call,
    :func:`~laminar_kafka.cluster.lake.parquet.tree_lock.publishing`): a compaction, which holds it
    exclusively, never exchanges a directory while a file is renamed into it.
    """
    listed = list(staged)
    if not listed:
        return 0
    with publishing(fs, root):
        return _publish_listed(fs, root, listed)


def publish_found(fs: pafs.FileSystem, root: str, staged: list[str]) -> int:
    """:func:`publish` of files a recovery found staged, where a file that left the staging directory
    meanwhile is no error: another node published it, and in upsert mode may have committed its epoch
    and deleted the published change file already. Raises :class:`SinkError` when a file still staged
    cannot be published. Returns how many files the last attempt renamed (a figure for the log)."""
    left = list(staged)
    while True:
        try:
            return publish(fs, root, left)
        except SinkError:
            still = [relative for relative in left if _exists(fs, _join(root, relative))]
            if len(still) == len(left):
                raise
            left = still


def _publish_listed(fs: pafs.FileSystem, root: str, staged: list[str]) -> int:
    renamed = 0
    directories: set[str] = set()
    for relative in staged:
        source = _join(root, relative)
        published = final_path(relative)
        target = _join(root, published)
        try:
            if _exists(fs, source):
                if _exists(fs, target):
                    fs.delete_file(source)  # a copy-based move (object stores) was interrupted
                else:
                    directory = posixpath.dirname(published)
                    if directory and directory not in directories:
                        fs.create_dir(_join(root, directory), recursive=True)
                        directories.add(directory)
                    fs.move(source, target)
                    renamed += 1
            elif not _exists(fs, target):
                raise SinkError(f"committed output {relative!r} is neither staged nor published")
        except (OSError, pa.ArrowException) as exc:
            if _moved_by_another(fs, source, target):
                continue  # another node published it between our check and our move: done
            if isinstance(exc, FileNotFoundError):
                raise SinkError(f"committed output {relative!r} vanished while publishing") from None
            raise SinkError(f"cannot publish {relative!r}: {exc}", cause=exc) from exc
    return renamed


def _moved_by_another(fs: pafs.FileSystem, source: str, target: str) -> bool:
    """Whether a failed move of ``source`` lost a race to another node's move of the same file: the
    source is gone and the target is there. Every node of an Iceberg pipeline publishes every file
    of an epoch; on an object store a move is a copy then a delete, and a copy whose source another
    node deleted meanwhile fails with ``NoSuchKey`` (an ``OSError``, not ``FileNotFoundError``)."""
    try:
        return not _exists(fs, source) and _exists(fs, target)
    except (OSError, pa.ArrowException):
        return False
