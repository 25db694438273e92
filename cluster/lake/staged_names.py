"""The sink's file names: staged and published paths of its two output streams. Pure, no I/O.

Format-neutral: a Parquet tree and Iceberg tables both publish the same staged files under these names.

Paths relative to the output root (``<D>`` is the rows' partition directory, see
:mod:`laminar_kafka.cluster.lake.partitioning`: ``<topic>/dt=YYYY-MM-DD``, ``<topic>/dt=YYYY-MM-DD/hour=HH`` or
``<topic>``)::

    _staging/<D>/open.node-<N>.boot-<B>.seq-<S>.parquet               rows, being written
    _staging/<D>/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet          rows, sealed at epoch E's barrier
    <D>/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet                   rows, published
    _staging/rejected.open.node-<N>.boot-<B>.seq-<S>.parquet          rejected records, being written
    _staging/rejected.epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet     rejected records, sealed
    _rejected/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet             rejected records, published

``E`` is zero-padded to 10 digits and ``S`` to 8, so names sort by epoch. One sequence numbers the
files of both streams of a boot. The published path is a pure function of the staged one
(:func:`final_path`): a sealed file keeps its directory. Rows staged before the Hive layout
(``_staging/epoch-...parquet``, directory ``""``) still parse and publish, at the root. Readers of
the rows skip every ``_``-prefixed directory, so they never see ``_staging/`` or ``_rejected/``.
A directory is a ``/``-separated path of names made of ``[A-Za-z0-9._=%~-]`` (``%`` and ``~``: the
percent-encoded values of field partitions), none starting with
``_`` or ``.`` (so none is ``.`` or ``..``): no staged or published path escapes its place.
"""
from __future__ import annotations

import enum
import posixpath
import re
from dataclasses import dataclass

from laminar_kafka.cluster.errors import SinkError

__all__ = [
    "REJECTED_DIR", "STAGING_DIR", "OutputStream", "StagedName", "final_path", "is_valid_directory", "parse_staged",
]

STAGING_DIR = "_staging"
#: where the rejected (dead-letter) records are published, under the output root
REJECTED_DIR = "_rejected"


class OutputStream(enum.Enum):
    """The sink's streams: decoded rows, and the records the bad-record policy skipped."""

    ROWS = "rows"
    REJECTED = "rejected"


_PREFIX = {OutputStream.ROWS: "", OutputStream.REJECTED: "rejected."}
_PUBLISHED_DIR = {OutputStream.ROWS: "", OutputStream.REJECTED: REJECTED_DIR}
_NAME_RE = re.compile(
    r"(?P<rejected>rejected\.)?(?:open|epoch-(?P<epoch>\d{10}))\.node-(?P<node>\d+)"
    r"\.boot-(?P<boot>[A-Za-z0-9-]+)\.seq-(?P<seq>\d{8})\.parquet"
)
#: one name of a directory: never ".", "..", "_staging" or hidden
_DIRECTORY_PART_RE = re.compile(r"[A-Za-z0-9-][A-Za-z0-9._=%~-]*")


def is_valid_directory(directory: str) -> bool:
    """Whether ``directory`` may hold staged and published rows (``""``: the root)."""
    return directory == "" or all(_DIRECTORY_PART_RE.fullmatch(part) for part in directory.split("/"))


@dataclass(frozen=True)
class StagedName:
    """A parsed staging file name; ``epoch`` is 0 for an ``open`` (unsealed) file. ``directory`` is
    the partition directory of a rows file (``""``: flat, at the root; always ``""`` for rejected
    records). Raises :class:`SinkError` for a directory that is not valid."""

    epoch: int
    node_id: int
    boot_id: str
    seq: int
    stream: OutputStream = OutputStream.ROWS
    directory: str = ""

    def __post_init__(self) -> None:
        if not is_valid_directory(self.directory):
            raise SinkError(f"{self.directory!r} is not a valid output directory")
        if self.directory and self.stream is not OutputStream.ROWS:
            raise SinkError(f"{self.stream.value} files are not partitioned (directory {self.directory!r})")

    @property
    def sealed(self) -> bool:
        return self.epoch > 0

    def _base_name(self) -> str:
        head = f"epoch-{self.epoch:010d}" if self.epoch else "open"
        return f"{head}.node-{self.node_id}.boot-{self.boot_id}.seq-{self.seq:08d}.parquet"

    def file_name(self) -> str:
        """The staging file name (the stream's prefix, then the epoch or ``open``)."""
        return _PREFIX[self.stream] + self._base_name()

    def staged_path(self) -> str:
        """``_staging/[<directory>/]<file name>``, relative to the root."""
        return _path(STAGING_DIR, self.directory, self.file_name())

    def published_path(self) -> str:
        """Where a sealed file of this name is published, relative to the root."""
        return _path(_PUBLISHED_DIR[self.stream], self.directory, self._base_name())


def _path(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def parse_staged(path: str) -> StagedName | None:
    """Parse a staging path (``_staging/[<directory>/]<file name>``, relative to the root) or a bare
    file name (directory ``""``); ``None`` for anything else."""
    directory, base = posixpath.split(path)
    if directory:
        if directory != STAGING_DIR and not directory.startswith(f"{STAGING_DIR}/"):
            return None
        directory = directory[len(STAGING_DIR) + 1:]
    match = _NAME_RE.fullmatch(base)
    if match is None or not is_valid_directory(directory):
        return None
    stream = OutputStream.REJECTED if match["rejected"] else OutputStream.ROWS
    if directory and stream is not OutputStream.ROWS:
        return None
    return StagedName(
        epoch=int(match["epoch"] or 0), node_id=int(match["node"]), boot_id=match["boot"], seq=int(match["seq"]),
        stream=stream, directory=directory,
    )


def final_path(staged: str) -> str:
    """The published path (relative to the root) of a sealed staged path. Pure and deterministic.

    Raises :class:`SinkError` for a path that is not a sealed staging file.
    """
    name = parse_staged(staged)
    if name is None or not name.sealed or name.staged_path() != staged:
        raise SinkError(f"{staged!r} is not a sealed staging file")
    return name.published_path()
