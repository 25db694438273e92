"""A listing of the local Parquet tree that a compaction cannot tear: each directory is read from one
open handle.

pyarrow's ``LocalFileSystem`` (and DuckDB's glob, and Hadoop's local filesystem) list a directory
as ``readdir`` of its names, then a ``stat`` of each name *by path*, silently dropping a name whose
``stat`` finds nothing. When :mod:`laminar_kafka.cluster.lake.parquet.compaction` exchanges the
directory between the two, the inputs read from the old directory are then looked up in the new
one and dropped, and the output is not among the names: the listing misses rows (never holds a row
twice). :func:`published_files` lists a directory with ``scandir`` on a file descriptor of it and
``fstatat`` against that same descriptor, so each directory shows all its old files or all its new
ones. Opening a listed file later by its path can still find it gone (a ``FileNotFoundError``: list
again), never another file's rows.
"""
from __future__ import annotations

import os
import stat

__all__ = ["published_files"]


def published_files(root: str) -> list[str]:
    """Every ``.parquet`` file under the local directory ``root`` (full paths, sorted), skipping every
    ``_``- or ``.``-prefixed name (file or directory) below it, as
    :func:`~laminar_kafka.cluster.lake.parquet.sink.list_published` does; ``[]`` when ``root`` does
    not exist. Each directory is listed from one handle (see the module docstring)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found: list[str] = []
    try:
        _walk(fd, root.rstrip("/") or "/", found)
    finally:
        os.close(fd)
    return sorted(found)


def _walk(fd: int, path: str, found: list[str]) -> None:
    subdirectories = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.name.startswith(("_", ".")):
                continue
            try:
                mode = entry.stat().st_mode  # fstatat against this directory's handle (links followed)
            except FileNotFoundError:
                continue  # a dangling link
            if stat.S_ISDIR(mode):
                subdirectories.append(entry.name)
            elif stat.S_ISREG(mode) and entry.name.endswith(".parquet"):
                found.append(f"{path}/{entry.name}" if path != "/" else f"/{entry.name}")
    for name in subdirectories:
        try:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone since the listing: it held nothing of this listing's directory
        try:
            _walk(child, f"{path}/{name}" if path != "/" else f"/{name}", found)
        finally:
            os.close(child)
