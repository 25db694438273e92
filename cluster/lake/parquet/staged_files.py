"""The sink's in-memory bookkeeping of staged files: per (stream, directory), and per stream with a
bound on open files. No I/O of its own: closing a file closes the writer and stream it holds.

A stream (rows or rejected records) has one :class:`DirectoryFiles` per output directory that
received rows since the last seal: its open staged file, its buffered row groups and its closed,
not yet sealed files. :class:`StreamFiles` keeps them in least-recently-used order so the sink can
close the oldest open file when a stream would hold more than its limit (late data spread over many
days must not exhaust file handles); a closed file stays unsealed and is sealed at the next seal.
"""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.staged_names import OutputStream, StagedName

__all__ = ["DirectoryFiles", "StreamFiles"]


class DirectoryFiles:
    """One (stream, directory)'s open staged file, its row-group buffer and its closed, not yet
    sealed files."""

    def __init__(self, stream: OutputStream, directory: str) -> None:
        self.stream = stream
        self.directory = directory
        self.writer: pq.ParquetWriter | None = None
        self.output: pa.NativeFile | None = None
        self.current: StagedName | None = None
        self.unsealed: list[StagedName] = []
        self.buffer: list[pa.RecordBatch] = []
        self.buffered_rows = 0

    @property
    def is_open(self) -> bool:
        return self.writer is not None

    def close_current(self) -> None:
        """Close the open file (if any); it joins the unsealed files."""
        if self.writer is None:
            return
        assert self.output is not None and self.current is not None
        self.writer.close()
        self.output.close()
        self.unsealed.append(self.current)
        self.writer, self.output, self.current = None, None, None

    def drop_buffer(self) -> None:
        self.buffer, self.buffered_rows = [], 0


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
        self._directories: dict[str, DirectoryFiles] = {}

    def use(self, directory: str) -> DirectoryFiles:
        """The files of ``directory`` (created on first use), marked most recently used."""
        files = self._directories.pop(directory, None) or DirectoryFiles(self.stream, directory)
        self._directories[directory] = files
        return files

    def __iter__(self) -> Iterator[DirectoryFiles]:
        return iter(list(self._directories.values()))

    def __len__(self) -> int:
        return len(self._directories)

    @property
    def open_files(self) -> int:
        return sum(1 for files in self._directories.values() if files.is_open)

    def make_room(self, opening: DirectoryFiles) -> None:
        """Before ``opening`` opens a file: close least recently used open files until fewer than
        ``max_open`` are open (``opening`` itself is never closed here)."""
        open_now = [files for files in self._directories.values() if files.is_open and files is not opening]
        for files in open_now[: max(0, len(open_now) - self.max_open + 1)]:
            files.close_current()
            self.files_closed_early += 1

    def forget_all(self) -> None:
        """Drop every directory (after a seal or a discard: nothing is open, buffered or unsealed)."""
        self._directories.clear()
