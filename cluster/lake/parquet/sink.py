"""The exactly-once Parquet sink: staged files, deterministic final names, idempotent publish, recovery.

The output root is any ``pyarrow.fs`` filesystem location (a local path, ``file://``, ``s3://``...).
Two streams share one staging directory and one epoch protocol: the decoded rows, published in
Hive-style partition directories (``<topic>/dt=YYYY-MM-DD/``, per ``partition-by``; see
:mod:`laminar_kafka.cluster.lake.partitioning`), and the records the bad-record policy rejected, published under
``_rejected/`` (the names: :mod:`laminar_kafka.cluster.lake.staged_names`). A rows file is staged under
``_staging/<its partition directory>/``. A manifest lists staged paths of both; the final path of a
staged file is a pure function of its path (:func:`final_path`), so publishing is an idempotent
rename that any node may repeat.

Rules that make it exactly once:
- Rows written after epoch E's barrier go to new ``open`` files; :meth:`ParquetSink.seal` renames
  every open file of both streams, in every directory, to its ``epoch-E`` staged name (same
  directory) and returns them for the ack.
- Each directory has one open file per schema: rows of an evolved schema go to a file of their
  own, and rows of a version seen before in the epoch to that version's file (schema versions that
  alternate write one file per version, not one per change); all are sealed with the epoch.
- Writer memory is bounded (``writer_memory_bytes``): past it, the coldest writers flush their
  buffers early as smaller row groups, and close their files early if those cost too much
  (:mod:`~laminar_kafka.cluster.lake.parquet.writer_memory`). Files may be smaller, rows are
  neither lost nor written twice: a flushed row leaves the buffer, a closed file is sealed.
- :func:`publish` renames exactly what a committed manifest lists; a file already published is
  left alone (idempotent), a missing staged file whose final file exists counts as published.
- :func:`recover` publishes sealed files of epoch E <= the latest committed epoch iff manifest E lists
  them and deletes the others (they belong to an epoch that committed without them), and deletes
  ``open`` files of boot ids that are no longer alive. Sealed files of epochs not yet committed are
  kept: their fate is decided by the manifest that will come.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.encoding import writer_options
from laminar_kafka.cluster.lake.parquet.staged_files import DirectoryFiles, StreamFiles, writer_uses
from laminar_kafka.cluster.lake.parquet.staged_publish import publish, publish_found
from laminar_kafka.cluster.lake.parquet.writer_memory import DEFAULT_WRITER_MEMORY_BYTES, WriterUse, relieve
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.partitioning import check_topic, split_by_partition
from laminar_kafka.cluster.lake.routing import Router
from laminar_kafka.cluster.lake.staged_names import (
    REJECTED_DIR,
    STAGING_DIR,
    OutputStream,
    StagedName,
    final_path,
    parse_staged,
)

logger = logging.getLogger(__name__)

__all__ = [
    "REJECTED_DIR", "STAGING_DIR", "OutputStream", "ParquetSink", "RecoveryReport", "StagedName", "final_path",
    "list_published", "open_output", "parse_staged", "publish", "recover",
]

_BOOT_RE = re.compile(r"[A-Za-z0-9-]+")
#: the directory layout of a sink given none: one directory a day (frozen, so one value serves every sink)
DAY_PARTITIONING = PartitionSpec.parse("day")


def open_output(output: str) -> tuple[pafs.FileSystem, str]:
    """Resolve an output location (local path or URI) to a filesystem and a root path.

    Raises :class:`SinkError` when pyarrow cannot resolve it.
    """
    if "://" not in output:
        return pafs.LocalFileSystem(), posixpath.normpath(_absolute(output))
    try:
        fs, root = pafs.FileSystem.from_uri(output)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise SinkError(f"cannot open output {output!r}: {exc}", cause=exc) from exc
    return fs, root.rstrip("/")


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _join(root: str, relative: str) -> str:
    return f"{root}/{relative}" if root else relative


class ParquetSink:
    """One node's writer: appends batches to open staged files and seals them at each barrier.

    Two streams (:class:`OutputStream`): rows (:meth:`write`) and rejected records (the
    ``rejected`` argument). Rows are split by ``_topic`` and by ``partitioning`` (the pipeline's
    ``partition-by``) into partition directories, each with its own open file; a batch without ``_topic`` goes to
    ``default_topic``'s directories. Rejected records are not partitioned. Not thread-safe: the
    runtime calls it from one executor thread at a time. Each directory has one writer per schema
    (one open file and one buffer each); a file rotates when ``max_file_bytes`` is reached (the next
    row group goes to a new open file). Row groups hold ``row_group_rows`` rows (fewer at a barrier
    or an early flush). At most ``max_open_files`` files per stream are open: opening one more first
    closes the least recently used (it stays unsealed and is sealed at the next seal). The buffers
    and open files of both streams cost at most about ``writer_memory_bytes`` (0: no bound) after
    each :meth:`write`: past it the coldest writers flush early, then close early.
    """

    def __init__(
        self,
        output: str,
        *,
        node_id: int,
        boot_id: str,
        max_file_bytes: int = 128 * 1024 * 1024,
        row_group_rows: int = 65536,
        filesystem: tuple[pafs.FileSystem, str] | None = None,
        partitioning: PartitionSpec = DAY_PARTITIONING,
        default_topic: str | None = None,
        max_open_files: int = 64,
        writer_memory_bytes: int = DEFAULT_WRITER_MEMORY_BYTES,
        router: Router | None = None,
    ) -> None:
        self.fs, self.root = filesystem or open_output(output)
        self.node_id = node_id
        self.max_file_bytes = max_file_bytes
        self.row_group_rows = row_group_rows
        self.partitioning = partitioning
        self.default_topic = None if default_topic is None else check_topic(default_topic)
        self.router = router  # table-template routing (None: one table per topic)
        self._boot_id = _check_boot(boot_id)
        self._seq = 0
        if max_open_files < 1:
            raise SinkError(f"max_open_files {max_open_files} must be >= 1")
        self._streams = {stream: StreamFiles(stream, max_open_files) for stream in OutputStream}
        self.files_sealed = 0
        if writer_memory_bytes < 0:
            raise SinkError(f"writer_memory_bytes {writer_memory_bytes} must be >= 0 (0: no bound)")
        self.writer_memory_bytes = writer_memory_bytes
        #: buffers flushed, and files closed, early because the writers passed ``writer_memory_bytes``
        self.early_flushes = 0
        self.early_closes = 0
        #: bytes the writers hold (the estimate the bound counts) as of the latest write, flush, seal or discard
        self.writer_memory = 0
        self._tick = 0

    @property
    def boot_id(self) -> str:
        return self._boot_id

    @property
    def rows_written(self) -> int:
        """Decoded rows written to staged files (flushed row groups) since this sink was built."""
        return self._streams[OutputStream.ROWS].rows_written

    @property
    def rejected_written(self) -> int:
        """Rejected records written to staged files since this sink was built."""
        return self._streams[OutputStream.REJECTED].rows_written

    @property
    def open_directories(self) -> int:
        """Directories (of both streams) holding rows not sealed yet: buffered, open or closed."""
        return sum(files.directories for files in self._streams.values())

    @property
    def open_files(self) -> int:
        """Staged files open for writing now (both streams)."""
        return sum(files.open_files for files in self._streams.values())

    @property
    def files_closed_early(self) -> int:
        """Files closed before their seal because a stream had ``max_open_files`` open files."""
        return sum(files.files_closed_early for files in self._streams.values())

    def check_writable(self) -> None:
        """Create the root and staging directory and prove a file can be written and removed there.

        Raises :class:`SinkError` (nothing is left behind on success).
        """
        probe = _join(self.root, f"{STAGING_DIR}/.probe-{uuid.uuid4().hex}")
        try:
            self.fs.create_dir(_join(self.root, STAGING_DIR), recursive=True)
            with self.fs.open_output_stream(probe) as stream:
                stream.write(b"ok")
            self.fs.delete_file(probe)
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"output {self.root!r} is not writable: {exc}", cause=exc) from exc

    def write(self, batch: pa.RecordBatch, rejected: pa.RecordBatch | None = None) -> None:
        """Append ``batch`` to the rows stream, each row to its partition directory, and
        ``rejected`` (if any) to the rejected stream (buffered into whole row groups); both belong
        to the epoch of the next :meth:`seal`.

        Raises :class:`SinkError` when the rows cannot be partitioned (see
        :func:`laminar_kafka.cluster.lake.partitioning.split_by_partition`); nothing of the call is written then.
        """
        rows = self._streams[OutputStream.ROWS]
        if self.router is None:
            parts = split_by_partition(batch, self.partitioning, self.default_topic)
        else:  # table-template routing: the rows it cannot route join the rejected records
            parts, rejected = self.router.split(batch, self.partitioning, rejected)
        for directory, part in parts:
            self._append(rows, directory, part)
        if rejected is not None and rejected.num_rows:
            self._append(self._streams[OutputStream.REJECTED], "", rejected)
        if self.writer_memory_bytes:
            self._bound_memory()
        self._account()

    def _append(self, stream: StreamFiles, directory: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        files = stream.use(directory, batch.schema)
        self._tick += 1
        files.last_used = self._tick
        files.add(batch)
        if files.buffered_rows >= self.row_group_rows:
            self._flush(stream, files)

    def _writers(self) -> list[DirectoryFiles]:
        return [files for stream in self._streams.values() for files in stream]

    def _uses(self, writers: list[DirectoryFiles]) -> list[WriterUse]:
        return writer_uses(writers, row_group_rows=self.row_group_rows,
                           buffered_output=not isinstance(self.fs, pafs.LocalFileSystem))

    def _bound_memory(self) -> None:
        """Past ``writer_memory_bytes``: flush the coldest writers' buffers early, then retire the
        coldest (flush and close; :func:`relieve`); a closed file stays unsealed until the seal."""
        writers = self._writers()
        relief = relieve(self._uses(writers), self.writer_memory_bytes)
        for index in relief.flush + relief.retire:
            self._flush(self._streams[writers[index].stream], writers[index])
        for index in relief.retire:
            writers[index].close_current()
        self.early_flushes += len(relief.flush)
        self.early_closes += len(relief.retire)

    def _account(self) -> None:
        self.writer_memory = sum(use.total for use in self._uses(self._writers()))

    def flush(self) -> None:
        """Write every buffered row to the open staged files (still unsealed)."""
        for stream in self._streams.values():
            for files in stream:
                self._flush(stream, files)
        self._account()

    def _flush(self, stream: StreamFiles, files: DirectoryFiles) -> None:
        if not files.buffer:
            return
        table = pa.Table.from_batches(files.buffer)
        files.drop_buffer()
        try:
            if files.writer is None:
                stream.make_room(files)
                self._open(files, table.schema)
            assert files.writer is not None and files.output is not None
            files.writer.write_table(table, row_group_size=self.row_group_rows)
            files.wrote(table, self.row_group_rows)
            stream.rows_written += table.num_rows
            if files.output.tell() >= self.max_file_bytes:
                files.close_current()
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot write staged output under {self.root!r}: {exc}", cause=exc) from exc

    def _open(self, files: DirectoryFiles, schema: pa.Schema) -> None:
        self._seq += 1
        name = StagedName(0, self.node_id, self._boot_id, self._seq, files.stream, files.directory)
        path = _join(self.root, name.staged_path())
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        files.output = self.fs.open_output_stream(path)
        files.writer = pq.ParquetWriter(files.output, schema, **writer_options(schema))
        files.current = name

    def seal(self, epoch: int) -> tuple[str, ...]:
        """Close the open files and rename them to epoch ``epoch``'s staged names.

        Post: every row and rejected record written so far is in a sealed staged file of ``epoch``
        whose relative path is returned (empty tuple when nothing was written since the last seal).
        """
        if epoch < 1:
            raise SinkError(f"epoch {epoch} must be >= 1")
        sealed: list[str] = []
        try:
            for stream in self._streams.values():
                for files in stream:
                    self._flush(stream, files)
                    files.close_current()
                # in the order the files were opened (a schema version's file before a later one's)
                for name in sorted((name for files in stream for name in files.unsealed), key=lambda n: n.seq):
                    target = dataclasses.replace(name, epoch=epoch)
                    self.fs.move(_join(self.root, name.staged_path()), _join(self.root, target.staged_path()))
                    sealed.append(target.staged_path())
                stream.forget_all()
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot seal staged output of epoch {epoch}: {exc}", cause=exc) from exc
        self.files_sealed += len(sealed)
        self.writer_memory = 0
        return tuple(sealed)

    def discard_unsealed(self) -> int:
        """Drop every row not yet sealed (buffers and open files of both streams); returns the
        number of files removed."""
        removed = 0
        for stream in self._streams.values():
            for files in stream:
                files.drop_buffer()
                try:
                    files.close_current()
                except (OSError, pa.ArrowException):
                    logger.warning("closing a discarded staged file failed", exc_info=True)
                    if files.current is not None:
                        files.unsealed.append(files.current)
                    files.writer, files.output, files.current = None, None, None
                for name in files.unsealed:
                    removed += _delete_if_present(self.fs, _join(self.root, name.staged_path()))
                files.unsealed = []
            stream.forget_all()
        self.writer_memory = 0
        return removed

    def new_boot(self, boot_id: str) -> None:
        """Start naming files with a new boot id (after a rejoin); discards unsealed rows first."""
        self.discard_unsealed()
        self._boot_id = _check_boot(boot_id)
        self._seq = 0

    def recover_staged(self, *, latest_epoch: int, manifest_outputs: Callable[[int], tuple[str, ...] | None],
                       live_boots: set[str]) -> None:
        """:func:`recover` of this sink's output."""
        recover(self.fs, self.root, latest_epoch=latest_epoch, manifest_outputs=manifest_outputs,
                       live_boots=live_boots)


def _check_boot(boot_id: str) -> str:
    if not _BOOT_RE.fullmatch(boot_id):
        raise SinkError(f"boot id {boot_id!r} must match {_BOOT_RE.pattern}")
    return boot_id


@dataclass(frozen=True)
class RecoveryReport:
    published: int
    deleted: int
    kept: int


def recover(
    fs: pafs.FileSystem,
    root: str,
    *,
    latest_epoch: int,
    manifest_outputs: Callable[[int], tuple[str, ...] | None],
    live_boots: set[str],
) -> RecoveryReport:
    """Settle the staging directory against the committed manifests.

    ``manifest_outputs(E)`` returns manifest E's outputs, or ``None`` when it is unknown (garbage
    collected): such files are kept and logged. Sealed files of epochs <= ``latest_epoch``: published
    iff listed, deleted otherwise. Open files: deleted unless their boot id is in ``live_boots``.
    Sealed files of later epochs: kept. Files in every sub-directory of ``_staging/`` count (and
    flat names staged before the Hive layout); emptied sub-directories are left in place.
    """
    staging = _join(root, STAGING_DIR)
    selector = pafs.FileSelector(staging, recursive=True, allow_not_found=True)
    published = deleted = kept = 0
    by_epoch: dict[int, list[str]] = {}
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.path.startswith(f"{staging}/"):
            continue
        relative = STAGING_DIR + info.path[len(staging):]
        name = parse_staged(relative)
        if name is None:
            continue
        if not name.sealed:
            if name.boot_id in live_boots:
                kept += 1
            else:
                deleted += _delete_if_present(fs, info.path)
        elif name.epoch > latest_epoch:
            kept += 1
        else:
            by_epoch.setdefault(name.epoch, []).append(relative)
    for epoch, files in sorted(by_epoch.items()):
        listed = manifest_outputs(epoch)
        if listed is None:
            logger.warning("manifest of epoch %d is gone; keeping %d staged file(s)", epoch, len(files))
            kept += len(files)
            continue
        wanted = set(listed)
        published += publish_found(fs, root, [f for f in files if f in wanted])
        for relative in files:
            if relative not in wanted:
                deleted += _delete_if_present(fs, _join(root, relative))
    if published or deleted:
        logger.info("sink recovery: %d published, %d deleted, %d kept", published, deleted, kept)
    return RecoveryReport(published, deleted, kept)


def _delete_if_present(fs: pafs.FileSystem, path: str) -> int:
    """Delete ``path``; 1 if this call deleted it, 0 if it was gone (every node recovers the same
    staging directory, so another node may have deleted it first)."""
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return 0
    return 1


def list_published(fs: pafs.FileSystem, root: str) -> list[str]:
    """Every published Parquet file (full paths), skipping ``_`` and ``.`` directories, sorted. On a
    local filesystem each directory is listed from one handle, so a compaction's directory exchange
    cannot tear the listing (:mod:`laminar_kafka.cluster.lake.parquet.listing`)."""
    if isinstance(fs, pafs.LocalFileSystem):
        from laminar_kafka.cluster.lake.parquet.listing import published_files

        return published_files(root)
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    result = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        relative = info.path[len(root):].lstrip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        result.append(info.path)
    return sorted(result)
