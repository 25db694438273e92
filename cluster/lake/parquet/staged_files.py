"""The sink's in-memory bookkeeping of staged files: per (stream, directory, schema), and per stream
with a bound on open files. No I/O of its own: closing a file closes the writer and stream it holds.

A stream (rows or rejected records) has one :class:`DirectoryFiles` per output directory and schema
that received rows since the last seal: its open staged file, its buffered row groups and its closed,
not yet sealed files. Keeping one per schema, not one per directory, means rows of schema versions
that alternate within an epoch (A, B, A, B) go to one file per version, not to a new file at each
change. :class:`StreamFiles` keeps them in least-recently-used order so the sink can close the
oldest open file when a stream would hold more than its limit (late data spread over many days must
not exhaust file handles); a closed file stays unsealed and is sealed at the next seal.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.writer_memory import WriterUse, flush_growth, open_file_bytes
from laminar_kafka.cluster.lake.staged_names import OutputStream, StagedName

__all__ = ["DirectoryFiles", "StreamFiles", "schema_key", "writer_uses"]


def schema_key(schema: pa.Schema) -> pa.Schema:
    """The schema that tells writers apart: ``schema`` without its schema-level metadata (pyarrow's
    schema equality ignores metadata, its hash does not)."""
    return schema.remove_metadata() if schema.metadata else schema


class DirectoryFiles:
    """One (stream, directory, schema)'s open staged file, its row-group buffer and its closed, not
    yet sealed files. ``buffered_bytes`` counts the Arrow bytes of the buffer, ``row_groups`` the
    row groups of the open file, ``last_column_bytes`` the Arrow bytes of the last column of its
    largest row group (the writer keeps that chunk's buffers), ``last_used`` the sink's tick of the
    latest write (recency)."""

    def __init__(self, stream: OutputStream, directory: str, schema: pa.Schema) -> None:
        self.stream = stream
        self.directory = directory
        self.schema = schema
        self.writer: pq.ParquetWriter | None = None
        self.output: pa.NativeFile | None = None
        self.current: StagedName | None = None
        self.unsealed: list[StagedName] = []
        self.buffer: list[pa.RecordBatch] = []
        self.buffered_rows = 0
        self.buffered_bytes = 0
        #: Arrow bytes of the buffered batches' last column
        self.buffered_last_column_bytes = 0
        self.row_groups = 0
        self.last_column_bytes = 0
        self.last_used = 0

    @property
    def is_open(self) -> bool:
        return self.writer is not None

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffer ``batch`` (its schema is this writer's). A slice that holds a larger batch's
        buffers alive (the parts of a batch split by partition share one) is buffered as a copy of
        its own rows: otherwise one slowly filling directory would keep every batch it took a
        slice of, which the bytes counted here would not show."""
        if batch.get_total_buffer_size() > 2 * batch.nbytes:
            batch = batch.take(pa.array(np.arange(batch.num_rows)))
        self.buffer.append(batch)
        self.buffered_rows += batch.num_rows
        self.buffered_bytes += batch.nbytes
        self.buffered_last_column_bytes += batch.column(batch.num_columns - 1).nbytes

    def wrote(self, table: pa.Table, row_group_rows: int) -> None:
        """Count ``table``, just written to the open file in row groups of ``row_group_rows``."""
        self.row_groups += -(-table.num_rows // row_group_rows)
        largest = min(table.num_rows, row_group_rows) / max(table.num_rows, 1)
        self.last_column_bytes = max(self.last_column_bytes, int(table.column(table.num_columns - 1).nbytes * largest))

    def close_current(self) -> None:
        """Close the open file (if any); it joins the unsealed files."""
        if self.writer is None:
            return
        assert self.output is not None and self.current is not None
        self.writer.close()
        self.output.close()
        self.unsealed.append(self.current)
        self.writer, self.output, self.current = None, None, None
        self.row_groups = self.last_column_bytes = 0

    def drop_buffer(self) -> None:
        self.buffer, self.buffered_rows, self.buffered_bytes, self.buffered_last_column_bytes = [], 0, 0, 0


class StreamFiles:
    """One stream's :class:`DirectoryFiles`, least recently used first; at most ``max_open`` of
    them hold an open file once :meth:`make_room` has run before each open."""

    def __init__(self, stream: OutputStream, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open {max_open} must be >= 1")
        self.stream = stream
        self.max_open = max_open
        self.rows_written = 0
        #: files closed early because the stream had ``max_open`` open files (since the sink was built)
        self.files_closed_early = 0
        self._writers: dict[tuple[str, pa.Schema], DirectoryFiles] = {}

    def use(self, directory: str, schema: pa.Schema) -> DirectoryFiles:
        """The files of ``directory`` for rows of ``schema`` (created on first use), marked most
        recently used."""
        key = (directory, schema_key(schema))
        files = self._writers.pop(key, None) or DirectoryFiles(self.stream, directory, key[1])
        self._writers[key] = files
        return files

    def __iter__(self) -> Iterator[DirectoryFiles]:
        return iter(list(self._writers.values()))

    def __len__(self) -> int:
        return len(self._writers)

    @property
    def directories(self) -> int:
        """Directories holding rows not sealed yet (a directory with two schemas counts once)."""
        return len({directory for directory, _ in self._writers})

    @property
    def open_files(self) -> int:
        return sum(1 for files in self._writers.values() if files.is_open)

    def make_room(self, opening: DirectoryFiles) -> None:
        """Before ``opening`` opens a file: close least recently used open files until fewer than
        ``max_open`` are open (``opening`` itself is never closed here)."""
        open_now = [files for files in self._writers.values() if files.is_open and files is not opening]
        for files in open_now[: max(0, len(open_now) - self.max_open + 1)]:
            files.close_current()
            self.files_closed_early += 1

    def forget_all(self) -> None:
        """Drop every writer (after a seal or a discard: nothing is open, buffered or unsealed)."""
        self._writers.clear()


def writer_uses(writers: Iterable[DirectoryFiles], *, row_group_rows: int, buffered_output: bool) -> list[WriterUse]:
    """The memory of each of ``writers`` (keyed by its index) as
    :func:`~laminar_kafka.cluster.lake.parquet.writer_memory.relieve` counts it; ``buffered_output``:
    the files' output streams buffer upload parts (an object store)."""
    uses = []
    for index, files in enumerate(writers):
        open_bytes = 0
        if files.output is not None:
            open_bytes = open_file_bytes(columns=len(files.schema), row_groups=files.row_groups,
                                         last_column_bytes=files.last_column_bytes, written=files.output.tell(),
                                         buffered_output=buffered_output)
        largest = min(files.buffered_rows, row_group_rows) / max(files.buffered_rows, 1)
        growth = flush_growth(is_open=files.is_open, last_column_bytes=files.last_column_bytes,
                              flushed_last_column_bytes=int(files.buffered_last_column_bytes * largest))
        uses.append(WriterUse(index, files.buffered_bytes, open_bytes, growth, files.last_used))
    return uses
