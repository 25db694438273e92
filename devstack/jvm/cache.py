"""The dev stack's cache of downloaded and built artifacts: where it is, and how one of its
directories is produced exactly once, whatever the number of concurrent callers."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["cached_build", "default_cache_dir"]


def default_cache_dir() -> Path:
    """`$LAMINAR_CACHE_DIR`, else `~/.cache/laminar-kafka`."""
    configured = os.environ.get("LAMINAR_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "laminar-kafka"


def cached_build(target: Path, marker_text: str, produce: Callable[[Path], Path]) -> Path:
    """``target`` (a directory of the cache) produced once; return it.

    ``produce(staging)`` fills the fresh directory ``staging`` and returns the directory of its
    result (``staging`` or one inside it), which is renamed to ``target``; it raises
    :class:`ArtifactError` when it fails. Concurrent callers serialise on a lock file beside
    ``target``, and only a completed result gets the marker (written after the rename), so a
    half-finished one is never mistaken for a complete one.
    """
    marker = target / ".complete"
    if marker.exists():
        return target
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
        try:
            built = produce(staging)
            if target.exists():
                shutil.rmtree(target)
            built.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        marker.write_text(marker_text)
    return target
