"""The sink's file names: staged and published paths of its two output streams. Pure, no I/O.

Paths relative to the output root::

    _staging/open.node-<N>.boot-<B>.seq-<S>.parquet                   rows, being written
    _staging/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet              rows, sealed at epoch E's barrier
    epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet                       rows, published
    _staging/rejected.open.node-<N>.boot-<B>.seq-<S>.parquet          rejected records, being written
    _staging/rejected.epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet     rejected records, sealed
    _rejected/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet             rejected records, published

``E`` is zero-padded to 10 digits and ``S`` to 8, so names sort by epoch. One sequence numbers the
files of both streams of a boot. The published path is a pure function of the staged one
(:func:`final_path`). Readers of the rows skip every ``_``-prefixed directory, so they never see
``_staging/`` or ``_rejected/``.
"""
from __future__ import annotations

import enum
import posixpath
import re
from dataclasses import dataclass

from cluster.errors import SinkError

__all__ = ["REJECTED_DIR", "STAGING_DIR", "OutputStream", "StagedName", "final_path", "parse_staged"]

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


@dataclass(frozen=True)
class StagedName:
    """A parsed staging file name; ``epoch`` is 0 for an ``open`` (unsealed) file."""

    epoch: int
    node_id: int
    boot_id: str
    seq: int
    stream: OutputStream = OutputStream.ROWS

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
        return f"{STAGING_DIR}/{self.file_name()}"

    def published_path(self) -> str:
        """Where a sealed file of this name is published, relative to the root."""
        directory = _PUBLISHED_DIR[self.stream]
        return f"{directory}/{self._base_name()}" if directory else self._base_name()


def parse_staged(path: str) -> StagedName | None:
    """Parse a staging path (relative or a bare file name); ``None`` for anything else."""
    match = _NAME_RE.fullmatch(posixpath.basename(path))
    if match is None:
        return None
    return StagedName(
        epoch=int(match["epoch"] or 0), node_id=int(match["node"]), boot_id=match["boot"], seq=int(match["seq"]),
        stream=OutputStream.REJECTED if match["rejected"] else OutputStream.ROWS,
    )


def final_path(staged: str) -> str:
    """The published path (relative to the root) of a sealed staged path. Pure and deterministic.

    Raises :class:`SinkError` for a path that is not a sealed staging file.
    """
    name = parse_staged(staged)
    if name is None or not name.sealed or posixpath.dirname(staged) != STAGING_DIR:
        raise SinkError(f"{staged!r} is not a sealed staging file")
    return name.published_path()
