"""The sink's writer memory: what buffered row groups and open staged files cost, and which writers
give it back when the total passes ``writer-memory-bytes``. Pure values and functions, no I/O.

Two costs are counted per writer (one (stream, directory, schema) of the sink):

- its buffered rows: the Arrow bytes of the record batches waiting to fill a row group;
- its open file, when it has one: pyarrow's ``ParquetWriter`` keeps the footer it will write (the
  column chunk metadata of every row group written so far) and, until the next row group or the
  close, the buffers of the last column chunk it wrote (its pages, its dictionary); an object
  store's output stream holds what it was given until an upload part fills. Measured on a local
  file (pyarrow 26): 64 KiB of RSS an open writer, about 1 KiB a column and row group, and 1.1x
  (dictionary-encoded) to 2.1x (plain) the Arrow bytes of the last column of the largest row group
  written: counted as 2x.

Past the cap, :func:`relieve` picks the coldest writers (least recently written) first: their
buffers are flushed early as smaller row groups until the total is back under the low-water mark
(a flush frees the buffer but makes the writer keep a larger last column chunk: only a flush that
frees more than it adds counts); if that is not enough, the coldest writers are retired: flushed
and closed, their files stay unsealed and are sealed with the epoch. Flushing to a low-water mark below the cap, not to the cap itself, keeps a writer
from flushing a tiny row group at every batch once the cap is reached.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_WRITER_MEMORY_BYTES", "LOW_WATER", "OPEN_FILE_BYTES", "ROW_GROUP_COLUMN_BYTES", "UPLOAD_PART_BYTES",
    "Relief", "WriterUse", "flush_growth", "open_file_bytes", "relieve",
]

#: the default cap (``writer-memory-bytes``): the Helm chart's 768 MiB limit less the node's measured
#: peaks (452-500 MB RSS at full read speed) leaves about 256 MiB; half of it for writers keeps room
#: for Arrow's allocator, which keeps freed pages for a while
DEFAULT_WRITER_MEMORY_BYTES = 128 * 1024 * 1024
#: measured RSS of one open ParquetWriter on a local file after its first row group
OPEN_FILE_BYTES = 64 * 1024
#: measured footer metadata a ParquetWriter keeps per column and row group written
ROW_GROUP_COLUMN_BYTES = 1024
#: what an object store's output stream may hold before it uploads a part (Arrow's S3 part size)
UPLOAD_PART_BYTES = 10 * 1024 * 1024
#: past the cap, writers give memory back until the total is at most this fraction of the cap
LOW_WATER = 0.75


@dataclass(frozen=True)
class WriterUse:
    """One writer's memory as the sink counts it. ``key`` identifies it to the caller;
    ``flush_growth`` is what a flush of its buffer adds to its open file's cost (the file it opens,
    a larger last column chunk kept); ``last_used`` orders writers by recency (larger: written more
    recently)."""

    key: int
    buffered_bytes: int
    open_bytes: int
    flush_growth: int
    last_used: int

    @property
    def total(self) -> int:
        return self.buffered_bytes + self.open_bytes


@dataclass(frozen=True)
class Relief:
    """The writers to flush early (their buffers become a row group now), then the writers to
    retire early (flush what they buffer, then close their file). Both coldest first."""

    flush: tuple[int, ...] = ()
    retire: tuple[int, ...] = ()


def open_file_bytes(*, columns: int, row_groups: int, last_column_bytes: int, written: int,
                    buffered_output: bool) -> int:
    """The estimated memory of an open staged file with ``row_groups`` row groups of ``columns``
    columns, the largest of which had ``last_column_bytes`` Arrow bytes in its last column, and
    ``written`` bytes written; ``buffered_output``: its output stream buffers an upload part (an
    object store), at most :data:`UPLOAD_PART_BYTES`."""
    held = min(written, UPLOAD_PART_BYTES) if buffered_output else 0
    return OPEN_FILE_BYTES + ROW_GROUP_COLUMN_BYTES * columns * row_groups + 2 * last_column_bytes + held


def flush_growth(*, is_open: bool, last_column_bytes: int, flushed_last_column_bytes: int) -> int:
    """What flushing a buffer whose largest row group has ``flushed_last_column_bytes`` in its last
    column adds to the writer's open file (``last_column_bytes`` so far; a closed writer opens one)."""
    kept = 2 * max(0, flushed_last_column_bytes - last_column_bytes)
    return kept if is_open else OPEN_FILE_BYTES + kept


def relieve(writers: Sequence[WriterUse], cap: int) -> Relief:
    """Which writers give memory back so that ``writers`` cost at most ``LOW_WATER * cap``.

    Nothing when their total is at most ``cap`` (or ``cap`` is 0: no cap). Otherwise, coldest first
    (smallest ``last_used``; ties by key): writers whose flush frees more than it adds
    (``buffered_bytes > flush_growth``) are flushed until the total is at most the low-water mark;
    if it is still above, the coldest writers still holding memory are retired (flushed and
    closed: all they hold is freed) until it is, or until none is left. Pure.
    """
    total = sum(writer.total for writer in writers)
    if cap <= 0 or total <= cap:
        return Relief()
    target = int(cap * LOW_WATER)
    coldest = sorted(writers, key=lambda writer: (writer.last_used, writer.key))
    left = {writer.key: writer.total for writer in writers}
    flush: list[int] = []
    for writer in coldest:
        if total <= target:
            break
        if writer.buffered_bytes > writer.flush_growth:
            flush.append(writer.key)
            total -= writer.buffered_bytes - writer.flush_growth
            left[writer.key] = writer.open_bytes + writer.flush_growth
    retire: list[int] = []
    for writer in coldest:
        if total <= target:
            break
        if writer.total:
            retire.append(writer.key)
            total -= left[writer.key]
    return Relief(tuple(flush), tuple(retire))
