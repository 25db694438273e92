"""The sink's writer memory: what buffered row groups and open staged files cost, and which writers
give it back when the total passes ``writer-memory-bytes``. Pure values and functions, no I/O.

Two costs are counted per writer (one (stream, directory, schema) of the sink):

- its buffered rows: the Arrow bytes of the record batches waiting to fill a row group;
- its open file, when it has one: pyarrow's ``ParquetWriter`` keeps little besides the footer it
  will write (the column chunk metadata of every row group written so far), and an object store's
  output stream holds what it was given until an upload part fills. Measured on a local file
  (pyarrow 26, 6 columns): 64 KiB of RSS an open writer, plus about 1 KiB a column and row group.

Past the cap, :func:`relieve` picks the coldest writers (least recently written) first: their
buffers are flushed early as smaller row groups until the total is back under the low-water mark;
if the open files alone still cost more, the coldest are closed (they stay unsealed and are sealed
with the epoch). Flushing to a low-water mark below the cap, not to the cap itself, keeps a writer
from flushing a tiny row group at every batch once the cap is reached.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_WRITER_MEMORY_BYTES", "LOW_WATER", "OPEN_FILE_BYTES", "ROW_GROUP_COLUMN_BYTES", "UPLOAD_PART_BYTES",
    "Relief", "WriterUse", "open_file_bytes", "relieve",
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
    ``last_used`` orders writers by recency (larger: written more recently)."""

    key: int
    buffered_bytes: int
    open_bytes: int
    last_used: int

    @property
    def total(self) -> int:
        return self.buffered_bytes + self.open_bytes


@dataclass(frozen=True)
class Relief:
    """The writers to flush early (their buffers become a row group now) and, after the flushes, the
    writers whose open file to close early. Both coldest first."""

    flush: tuple[int, ...] = ()
    close: tuple[int, ...] = ()


def open_file_bytes(*, columns: int, row_groups: int, written: int, buffered_output: bool) -> int:
    """The estimated memory of an open staged file with ``row_groups`` row groups of ``columns``
    columns and ``written`` bytes written; ``buffered_output``: its output stream buffers an upload
    part (an object store), at most :data:`UPLOAD_PART_BYTES`."""
    held = min(written, UPLOAD_PART_BYTES) if buffered_output else 0
    return OPEN_FILE_BYTES + ROW_GROUP_COLUMN_BYTES * columns * row_groups + held


def relieve(writers: Sequence[WriterUse], cap: int) -> Relief:
    """Which writers give memory back so that ``writers`` cost at most ``LOW_WATER * cap``.

    Nothing when their total is at most ``cap`` (or ``cap`` is 0: no cap). Otherwise, coldest first
    (smallest ``last_used``; ties by key), writers with buffered rows are flushed until the total
    (counting a flushed writer's buffer as freed) is at most the low-water mark; if every buffer is
    flushed and the open files still cost more, the coldest open files are closed until it is, or
    until none is left. Pure.
    """
    total = sum(writer.total for writer in writers)
    if cap <= 0 or total <= cap:
        return Relief()
    target = int(cap * LOW_WATER)
    coldest = sorted(writers, key=lambda writer: (writer.last_used, writer.key))
    flush: list[int] = []
    for writer in coldest:
        if total <= target:
            break
        if writer.buffered_bytes:
            flush.append(writer.key)
            total -= writer.buffered_bytes
    close: list[int] = []
    for writer in coldest:
        if total <= target:
            break
        if writer.open_bytes:
            close.append(writer.key)
            total -= writer.open_bytes
    return Relief(tuple(flush), tuple(close))
