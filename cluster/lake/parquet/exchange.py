"""Swap two directories atomically: ``renameat2(RENAME_EXCHANGE)`` on Linux (glibc >= 2.28).

After :func:`exchange_directories` each path names what the other named, in one step: a process
resolving either path sees the old or the new directory, never neither, and a process that holds
one of them open (a directory walk) keeps reading that directory, wherever it now is.

Filesystems: ext4, XFS, Btrfs, tmpfs, F2FS and overlayfs (upper layer) support it. NFS, CIFS, most
FUSE filesystems and every object store do not: the kernel answers ``EINVAL`` (or ``ENOSYS`` on a
kernel before 3.15); :class:`ExchangeUnsupported` names the filesystem then. Nothing here falls
back to two renames: a reader between them would see neither directory.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from functools import lru_cache
from typing import Any

from laminar_kafka.cluster.errors import SinkError, UsageError

__all__ = ["ExchangeUnsupported", "exchange_directories", "filesystem_of"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 1 << 1


class ExchangeUnsupported(UsageError):
    """The platform or filesystem cannot exchange two directories atomically (a one-line message
    naming it)."""


@lru_cache(maxsize=1)
def _renameat2() -> Any:
    """glibc's ``renameat2``, or None (not Linux, not glibc, or a glibc before 2.28)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def exchange_directories(first: str, second: str) -> None:
    """Atomically swap the directories at the absolute paths ``first`` and ``second`` (same filesystem).

    Raises :class:`ExchangeUnsupported` when the platform or the filesystem cannot (nothing changed),
    :class:`SinkError` for any other failure (a path missing: nothing changed either)."""
    function = _renameat2()
    if function is None:
        raise ExchangeUnsupported(
            f"compaction of a Parquet tree needs renameat2(RENAME_EXCHANGE), which this platform ({sys.platform}, "
            "not Linux with glibc >= 2.28) does not offer")
    result = function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        raise ExchangeUnsupported(
            f"the filesystem of {first} ({filesystem_of(first)}) cannot exchange two directories atomically "
            f"(renameat2 RENAME_EXCHANGE: {os.strerror(code)}): compact a Parquet tree on a local filesystem "
            "such as ext4, XFS, Btrfs or tmpfs")
    raise SinkError(f"cannot exchange {first} and {second}: {os.strerror(code)}",
                    cause=OSError(code, os.strerror(code)))


def filesystem_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """``<type> at <mount point>`` of the mount holding ``path`` (the longest mount point that is a
    prefix of it), or ``"unknown filesystem"``."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return "unknown filesystem"
    real = os.path.realpath(path)
    best: tuple[str, str] | None = None
    for line in lines:
        mount, kind = _mount_of(line)
        if mount is None:
            continue
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) > len(best[0])):
            best = (mount, kind)
    return f"{best[1]} at {best[0]}" if best else "unknown filesystem"


def _mount_of(line: str) -> tuple[str | None, str]:
    """(mount point, filesystem type) of one ``/proc/self/mountinfo`` line (fields: id, parent,
    major:minor, root, mount point, options, optional fields..., ``-``, type, source, options)."""
    fields = line.split(" ")
    if len(fields) < 7 or "-" not in fields[6:]:
        return None, ""
    separator = fields.index("-", 6)
    if separator + 1 >= len(fields):
        return None, ""
    mount = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
    return mount, fields[separator + 1]
