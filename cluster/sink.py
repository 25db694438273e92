"""The exactly-once Parquet sink: staged files, deterministic final names, idempotent publish, recovery.

Layout under the output root (any ``pyarrow.fs`` filesystem: a local path, ``file://``, ``s3://``...)::

    <root>/_staging/open.node-<N>.boot-<B>.seq-<S>.parquet            being written (never published)
    <root>/_staging/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet       sealed at epoch E's barrier
    <root>/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet                published (readers see only these)

``E`` is zero-padded to 10 digits and ``S`` to 8, so names sort by epoch. A manifest lists staged
paths relative to the root; the final name of a staged file is a pure function of its name
(:func:`final_path`), so publishing is an idempotent rename that any node may repeat.

Rules that make it exactly once:
- Rows written after epoch E's barrier go to a new ``open`` file; :meth:`ParquetSink.seal` renames
  every open file to its ``epoch-E`` staged name and returns them for the ack.
- :func:`publish` renames exactly what a committed manifest lists; a file already published is
  left alone (idempotent), a missing staged file whose final file exists counts as published.
- :func:`recover` publishes sealed files of epoch E <= the latest committed epoch iff manifest E lists
  them and deletes the others (they belong to an epoch that committed without them), and deletes
  ``open`` files of boot ids that are no longer alive. Sealed files of epochs not yet committed are
  kept: their fate is decided by the manifest that will come.
"""
from __future__ import annotations

import logging
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cluster.errors import SinkError

logger = logging.getLogger(__name__)

__all__ = [
    "STAGING_DIR",
    "ParquetSink",
    "RecoveryReport",
    "StagedName",
    "final_path",
    "list_published",
    "open_output",
    "parse_staged",
    "publish",
    "recover",
]

STAGING_DIR = "_staging"
_NAME_RE = re.compile(
    r"(?:open|epoch-(?P<epoch>\d{10}))\.node-(?P<node>\d+)\.boot-(?P<boot>[A-Za-z0-9-]+)"
    r"\.seq-(?P<seq>\d{8})\.parquet"
)
_BOOT_RE = re.compile(r"[A-Za-z0-9-]+")


@dataclass(frozen=True)
class StagedName:
    """A parsed staging file name; ``epoch`` is 0 for an ``open`` (unsealed) file."""

    epoch: int
    node_id: int
    boot_id: str
    seq: int

    @property
    def sealed(self) -> bool:
        return self.epoch > 0

    def file_name(self) -> str:
        head = f"epoch-{self.epoch:010d}" if self.epoch else "open"
        return f"{head}.node-{self.node_id}.boot-{self.boot_id}.seq-{self.seq:08d}.parquet"

    def staged_path(self) -> str:
        return f"{STAGING_DIR}/{self.file_name()}"


def parse_staged(path: str) -> StagedName | None:
    """Parse a staging path (relative or a bare file name); ``None`` for anything else."""
    match = _NAME_RE.fullmatch(posixpath.basename(path))
    if match is None:
        return None
    return StagedName(
        epoch=int(match["epoch"] or 0), node_id=int(match["node"]), boot_id=match["boot"], seq=int(match["seq"])
    )


def final_path(staged: str) -> str:
    """The published path (relative to the root) of a sealed staged path. Pure and deterministic.

    Raises :class:`SinkError` for a path that is not a sealed staging file.
    """
    name = parse_staged(staged)
    if name is None or not name.sealed or posixpath.dirname(staged) != STAGING_DIR:
        raise SinkError(f"{staged!r} is not a sealed staging file")
    return name.file_name()


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


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File


class ParquetSink:
    """One node's writer: appends batches to an open staged file and seals it at each barrier.

    Not thread-safe: the runtime calls it from one executor thread at a time. Files rotate when
    ``max_file_bytes`` is reached (the next row group goes to a new open file); row groups hold
    ``row_group_rows`` rows (fewer only at a barrier).
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
    ) -> None:
        self.fs, self.root = filesystem or open_output(output)
        self.node_id = node_id
        self.max_file_bytes = max_file_bytes
        self.row_group_rows = row_group_rows
        self._boot_id = _check_boot(boot_id)
        self._seq = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream: pa.NativeFile | None = None
        self._current: StagedName | None = None
        self._unsealed: list[StagedName] = []
        self._buffer: list[pa.RecordBatch] = []
        self._buffered_rows = 0
        self.rows_written = 0
        self.files_sealed = 0

    @property
    def boot_id(self) -> str:
        return self._boot_id

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

    def write(self, batch: pa.RecordBatch) -> None:
        """Append rows to the open staged file (buffered into whole row groups)."""
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered_rows += batch.num_rows
        if self._buffered_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_batches(self._buffer)
        self._buffer, self._buffered_rows = [], 0
        try:
            if self._writer is None:
                self._open(table.schema)
            assert self._writer is not None and self._stream is not None
            self._writer.write_table(table, row_group_size=self.row_group_rows)
            self.rows_written += table.num_rows
            if self._stream.tell() >= self.max_file_bytes:
                self._close_current()
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot write staged output under {self.root!r}: {exc}", cause=exc) from exc

    def _open(self, schema: pa.Schema) -> None:
        self._seq += 1
        name = StagedName(0, self.node_id, self._boot_id, self._seq)
        self.fs.create_dir(_join(self.root, STAGING_DIR), recursive=True)
        self._stream = self.fs.open_output_stream(_join(self.root, name.staged_path()))
        self._writer = pq.ParquetWriter(self._stream, schema)
        self._current = name

    def _close_current(self) -> None:
        if self._writer is None:
            return
        assert self._stream is not None and self._current is not None
        self._writer.close()
        self._stream.close()
        self._unsealed.append(self._current)
        self._writer, self._stream, self._current = None, None, None

    def seal(self, epoch: int) -> tuple[str, ...]:
        """Close the open file(s) and rename them to epoch ``epoch``'s staged names.

        Post: every row written so far is in a sealed staged file of ``epoch`` whose relative path
        is returned (empty tuple when no row was written since the last seal).
        """
        if epoch < 1:
            raise SinkError(f"epoch {epoch} must be >= 1")
        try:
            self._flush()
            self._close_current()
            sealed: list[str] = []
            for name in self._unsealed:
                target = StagedName(epoch, name.node_id, name.boot_id, name.seq)
                self.fs.move(_join(self.root, name.staged_path()), _join(self.root, target.staged_path()))
                sealed.append(target.staged_path())
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot seal staged output of epoch {epoch}: {exc}", cause=exc) from exc
        self._unsealed = []
        self.files_sealed += len(sealed)
        return tuple(sealed)

    def discard_unsealed(self) -> int:
        """Drop every row not yet sealed (buffer and open files); returns the number of files removed."""
        self._buffer, self._buffered_rows = [], 0
        if self._writer is not None:
            try:
                self._writer.close()
                assert self._stream is not None
                self._stream.close()
            except (OSError, pa.ArrowException):
                logger.warning("closing a discarded staged file failed", exc_info=True)
            assert self._current is not None
            self._unsealed.append(self._current)
            self._writer, self._stream, self._current = None, None, None
        removed = 0
        for name in self._unsealed:
            try:
                self.fs.delete_file(_join(self.root, name.staged_path()))
                removed += 1
            except FileNotFoundError:
                pass
        self._unsealed = []
        return removed

    def new_boot(self, boot_id: str) -> None:
        """Start naming files with a new boot id (after a rejoin); discards unsealed rows first."""
        self.discard_unsealed()
        self._boot_id = _check_boot(boot_id)
        self._seq = 0


def _check_boot(boot_id: str) -> str:
    if not _BOOT_RE.fullmatch(boot_id):
        raise SinkError(f"boot id {boot_id!r} must match {_BOOT_RE.pattern}")
    return boot_id


def publish(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
    """Publish the listed sealed staged files by renaming each to its final name. Idempotent.

    Returns how many files this call renamed. Raises :class:`SinkError` when a listed file is
    neither staged nor published (committed output lost) or a rename fails.
    """
    renamed = 0
    for relative in staged:
        source = _join(root, relative)
        target = _join(root, final_path(relative))
        try:
            if _exists(fs, source):
                if _exists(fs, target):
                    fs.delete_file(source)  # a copy-based move (object stores) was interrupted
                else:
                    fs.move(source, target)
                    renamed += 1
            elif not _exists(fs, target):
                raise SinkError(f"committed output {relative!r} is neither staged nor published")
        except FileNotFoundError:
            if not _exists(fs, target):  # another node's move raced ours and lost the file?
                raise SinkError(f"committed output {relative!r} vanished while publishing") from None
        except (OSError, pa.ArrowException) as exc:
            raise SinkError(f"cannot publish {relative!r}: {exc}", cause=exc) from exc
    return renamed


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
    Sealed files of later epochs: kept.
    """
    selector = pafs.FileSelector(_join(root, STAGING_DIR), allow_not_found=True)
    published = deleted = kept = 0
    by_epoch: dict[int, list[str]] = {}
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        name = parse_staged(info.base_name)
        if name is None:
            continue
        relative = name.staged_path()
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
        published += publish(fs, root, [f for f in files if f in wanted])
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
    """Every published Parquet file (full paths), skipping ``_`` and ``.`` directories, sorted."""
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
