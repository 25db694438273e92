"""Download a build's locked jars from a Maven repository (Maven Central) and check each one's SHA-256.

No Maven and no Java: plain HTTP(S) with urllib (``file:`` URLs work too). A jar whose content does
not hash to its lock's SHA-256 raises :class:`ChecksumError` naming the file, at once and without
retrying: a wrong checksum is a changed or corrupted artifact, never a transient failure. The caller
(`laminar_kafka.devstack.jvm.artifacts`) downloads into a staging directory and renames it into the
cache only once every jar is there and verified.
"""
from __future__ import annotations

import hashlib
import logging
import urllib.error
import urllib.request
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm.locks import LockedJar

logger = logging.getLogger(__name__)

__all__ = ["DOWNLOAD_TIMEOUT_S", "ChecksumError", "fetch_jars"]

#: how long one read of a download may wait for data
DOWNLOAD_TIMEOUT_S = 60.0
_CHUNK = 1 << 20


class ChecksumError(ArtifactError):
    """A downloaded jar's SHA-256 is not the one its lock records; the message names the file."""


def _download(url: str, destination: Path) -> str:
    """Write ``url``'s content to ``destination``; return its SHA-256 (hex). Raises ArtifactError
    naming the URL when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, open(destination, "wb") as out:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, urllib.error.URLError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ArtifactError(f"could not download {url}: {reason}", cause=exc) from exc
    return digest.hexdigest()


def fetch_jars(jars: tuple[LockedJar, ...], directory: Path, base_url: str) -> int:
    """Download every jar of ``jars`` from the Maven repository at ``base_url`` into ``directory``
    (named :attr:`LockedJar.cache_name`); return the bytes downloaded.

    Raises :class:`ChecksumError` for the first jar whose SHA-256 differs from its lock (that file
    is deleted), :class:`ArtifactError` for one that cannot be downloaded. ``directory`` must be a
    staging directory: on an error it holds an incomplete set of jars.
    """
    total = 0
    for jar in jars:
        url = jar.url(base_url)
        destination = directory / jar.cache_name
        actual = _download(url, destination)
        if actual != jar.sha256:
            destination.unlink()
            raise ChecksumError(f"checksum mismatch for {jar.cache_name} ({url}): the lock says sha256 "
                                f"{jar.sha256}, the download has {actual}")
        total += destination.stat().st_size
    return total
