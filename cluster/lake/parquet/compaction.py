"""Compaction of the Parquet tree beside a running pipeline and its readers (the I/O; every decision
is :mod:`laminar_kafka.cluster.lake.parquet.compaction_plan`'s).

A pass (:meth:`TreeCompaction.run_pass`), under the tree's compaction lock (one pass at a time):

1. Deletes the leftovers of earlier passes under ``_laminar/compact/`` (a replaced directory once
   ``grace`` seconds old, anything else at once).
2. Reads the epoch records (``_laminar/epochs/``): the oldest kept epoch and the files they list.
3. Walks each topic's directories; in every leaf directory holding published files, plans bins of
   small files of settled epochs (reading the footers of the candidates only).
4. Writes every bin's output into a new work directory ``_laminar/compact/<id>`` (rows sorted by
   ``(_partition, _offset)`` when the file has both, else in input order; fsynced). A file that
   cannot be read stops the pass before anything is exchanged: every work directory is deleted and
   the error names the file.
5. Per directory, under the exclusive publish lock: lists the live directory again, hard-links into
   the work directory every entry that is not an input (files published meanwhile included), then
   exchanges the two directories with ``renameat2(RENAME_EXCHANGE)``. A reader listing the live
   path sees all the inputs or all the outputs, never both, never neither; every other file keeps
   its path and its bytes. The replaced directory now sits at ``_laminar/compact/<id>``, which no
   reader lists; it is deleted once ``grace`` seconds old.

No journal: a pass killed at any point leaves at most its work directories, which the next pass
classifies by their content (outputs of ``<id>`` inside: no exchange happened) and deletes. The
two points between steps where a crash matters most are named (:data:`AFTER_WRITE`,
:data:`AFTER_EXCHANGE`) and reported to an ``after_step`` callable given at construction (the
default does nothing; crash tests pass one that kills the process there).
"""
from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.errors import SinkError, UsageError
from laminar_kafka.cluster.lake.parquet.compaction_plan import (
    CompactionSettings,
    DataFile,
    DirectoryPlan,
    Entry,
    WorkDirectory,
    is_candidate,
    links_for_exchange,
    plan_cleanup,
    plan_directory,
    strays_after_exchange,
)
from laminar_kafka.cluster.lake.parquet.compaction_report import DirectoryReport, TreeReport
from laminar_kafka.cluster.lake.parquet.encoding import writer_options
from laminar_kafka.cluster.lake.parquet.exchange import exchange_directories
from laminar_kafka.cluster.lake.parquet.records import read_record
from laminar_kafka.cluster.lake.parquet.tree_lock import compaction_lock, exclusive_publishing
from laminar_kafka.cluster.lake.record import RECORDS_DIR, parse_record_name
from laminar_kafka.coordinator.errors import CodecError

logger = logging.getLogger(__name__)

__all__ = [
    "AFTER_EXCHANGE", "AFTER_WRITE", "WORK_DIR", "DirectoryReport", "TreeCompaction", "TreeReport", "check_local_output",
]

#: the work directories of compactions, relative to the root (readers skip ``_`` paths)
WORK_DIR = "_laminar/compact"
#: the step after every work directory of a pass is written, before the first exchange
AFTER_WRITE = "after-write"
#: the step after one directory's exchange, before the pass settles it
AFTER_EXCHANGE = "after-exchange"
_PROBE_PREFIX = "probe-"
_SORT_KEYS = [("_partition", "ascending"), ("_offset", "ascending")]
_ROW_GROUP_ROWS = 1024 * 1024


def check_local_output(output: str) -> None:
    """Raise :class:`UsageError` (one line) for an output that is not a local path or ``file://``:
    an object store has no atomic exchange of two directories."""
    scheme = output.split("://", 1)[0].lower() if "://" in output else ""
    if scheme and scheme != "file":
        raise UsageError(
            f"compact cannot rewrite a Parquet tree on {scheme}:// ({output}): an object store has no atomic "
            "swap of a directory, so a reader could see rows twice or miss them; land into table-format=iceberg, "
            "whose compaction is one atomic catalog commit")


def _no_step(step: str) -> None:
    """The default ``after_step``: nothing happens between steps."""


class TreeCompaction:
    """Compaction passes over the local Parquet tree at ``root`` (an absolute path). ``stop``: set it
    to end a pass early (before its next directory; what it wrote and did not exchange is deleted).
    ``after_step`` is called on the pass's thread with :data:`AFTER_WRITE` or :data:`AFTER_EXCHANGE`
    as the pass reaches that point (under the exclusive publish lock for the latter)."""

    def __init__(self, root: str, settings: CompactionSettings, *, stop: threading.Event | None = None,
                 clock: Callable[[], float] = time.time, after_step: Callable[[str], None] = _no_step) -> None:
        self.root = root
        self.settings = settings
        self.stop = stop or threading.Event()
        self.clock = clock
        self._after_step = after_step

    # ---- checks --------------------------------------------------------------------------------------

    def check(self) -> None:
        """Before the first pass: the root is a directory, no other compaction runs, and its
        filesystem can exchange two directories (two empty ones are exchanged under
        ``_laminar/compact/``). Raises :class:`UsageError` (one line) or :class:`SinkError`."""
        if not os.path.isdir(self.root):
            raise UsageError(f"output {self.root} is not a directory")
        with compaction_lock(self.root):
            probe = os.path.join(self.root, WORK_DIR, f"{_PROBE_PREFIX}{secrets.token_hex(8)}")
            try:
                os.makedirs(os.path.join(probe, "a"))
                os.makedirs(os.path.join(probe, "b"))
                exchange_directories(os.path.join(probe, "a"), os.path.join(probe, "b"))
            except OSError as exc:
                raise SinkError(f"cannot write under {os.path.join(self.root, WORK_DIR)}: {exc}", cause=exc) from exc
            finally:
                shutil.rmtree(probe, ignore_errors=True)

    # ---- a pass --------------------------------------------------------------------------------------

    def run_pass(self, topics: Sequence[str]) -> TreeReport:
        """One pass over ``topics`` (see the module docstring). Raises :class:`SinkError` naming the
        file or directory it could not read or write (nothing of the pass is exchanged when a file
        cannot be read), :class:`UsageError` for a topic directory holding an Iceberg table."""
        with compaction_lock(self.root):
            deleted, kept = self.clean_leftovers_locked()
            oldest, protected = self._records()
            plans: list[DirectoryPlan] = []
            skipped: list[DirectoryReport] = []
            leaves = 0
            for topic in topics:
                self._refuse_iceberg(topic)
                for directory, entries in self._leaves(topic):
                    leaves += 1
                    if any(e.is_dir for e in entries):
                        names = sorted(e.name for e in entries if e.is_dir)
                        skipped.append(DirectoryReport(directory, len(entries), len(entries), 0, skipped=(
                            f"it holds subdirectories ({', '.join(names[:3])}): only leaf directories are compacted")))
                        continue
                    plan = self._plan(directory, entries, oldest, protected)
                    if plan.bins:
                        plans.append(plan)
            reports = self._rewrite(plans)
            swapped = sum(1 for r in reports if not r.skipped)
            if swapped and self.settings.grace_s == 0:
                more, kept = self.clean_leftovers_locked()
                deleted += more
            else:
                kept += swapped
        return TreeReport(tuple(topics), tuple(sorted(skipped + reports, key=lambda r: r.directory)), leaves,
                          deleted, kept, oldest)

    def _records(self) -> tuple[int | None, frozenset[str]]:
        """The oldest epoch record the tree keeps (None: none) and every file the records list."""
        fs = pafs.LocalFileSystem()
        protected: set[str] = set()
        epochs = []
        for epoch in self._record_epochs():
            try:
                record = read_record(fs, self.root, epoch)
            except (CodecError, OSError) as exc:
                raise SinkError(f"cannot read the epoch record of epoch {epoch}: {exc}; nothing compacted",
                                cause=exc) from exc
            if record is not None:  # None: deleted meanwhile, as newer epochs were recorded
                epochs.append(epoch)
                protected.update(record.files)
        return (min(epochs) if epochs else None), frozenset(protected)

    def _record_epochs(self) -> list[int]:
        try:
            names = os.listdir(os.path.join(self.root, RECORDS_DIR))
        except FileNotFoundError:
            return []
        return sorted(e for e in (parse_record_name(n) for n in names) if e is not None)

    def _refuse_iceberg(self, topic: str) -> None:
        if os.path.isdir(os.path.join(self.root, topic, "metadata")):
            raise UsageError(f"{os.path.join(self.root, topic)} holds an Iceberg table (metadata/): compact it with "
                             "--table-format iceberg, never as a Parquet tree")

    def _leaves(self, topic: str) -> Iterator[tuple[str, list[Entry]]]:
        """Every directory under ``<root>/<topic>`` (``_``/``.`` ones skipped) holding published
        ``.parquet`` files, relative to the root, with its entries."""
        pending = [topic]
        while pending:
            relative = pending.pop()
            try:
                scanned = list(os.scandir(os.path.join(self.root, relative)))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise SinkError(f"cannot list {os.path.join(self.root, relative)}: {exc}", cause=exc) from exc
            entries = [Entry(e.name, e.is_dir(follow_symlinks=False)) for e in scanned]
            visible = [e.name for e in entries if e.is_dir and not e.name.startswith(("_", "."))]
            pending.extend(f"{relative}/{name}" for name in sorted(visible, reverse=True))
            if any(not e.is_dir and e.name.endswith(".parquet") and not e.name.startswith(("_", ".")) for e in entries):
                yield relative, entries

    def _plan(self, directory: str, entries: list[Entry], oldest: int | None,
              protected: frozenset[str]) -> DirectoryPlan:
        """The plan of one leaf directory; the footers of its candidates are read (their schema)."""
        files = []
        for entry in entries:
            if entry.is_dir or entry.name.startswith(("_", ".")) or not entry.name.endswith(".parquet"):
                continue
            path = os.path.join(self.root, directory, entry.name)
            try:
                size = os.stat(path, follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
            schema = None
            if is_candidate(entry.name, size, directory, oldest_record_epoch=oldest, protected=protected,
                            target_file_bytes=self.settings.target_file_bytes):
                schema = _schema_key(path)
            files.append(DataFile(entry.name, size, schema))
        return plan_directory(directory, files, oldest_record_epoch=oldest, protected=protected,
                              settings=self.settings, compact_id=secrets.token_hex(8))

    def _rewrite(self, plans: list[DirectoryPlan]) -> list[DirectoryReport]:
        """Write every plan's outputs, then exchange each directory. A work directory not exchanged
        is deleted on the way out, whatever happens (no reader ever listed it); an exchanged one
        holds the replaced directory, left for its grace period."""
        todo = {plan.directory: os.path.join(self.root, WORK_DIR, plan.compact_id) for plan in plans}
        reports: list[DirectoryReport] = []
        try:
            for plan in plans:
                if self.stop.is_set():
                    return reports
                self._write(plan, todo[plan.directory])
            self._after_step(AFTER_WRITE)
            for plan in plans:
                if self.stop.is_set():
                    return reports
                work = todo[plan.directory]
                links, problem = self._swap(plan, work)
                if problem:
                    reports.append(DirectoryReport(plan.directory, plan.files, plan.files, 0, skipped=problem))
                    continue
                del todo[plan.directory]  # exchanged: ``work`` is the replaced directory now
                reports.append(self._settle(plan, work, links))
            return reports
        finally:
            for path in todo.values():
                shutil.rmtree(path, ignore_errors=True)

    def _write(self, plan: DirectoryPlan, work: str) -> None:
        """Write ``plan``'s outputs into ``work`` (created), each fsynced, row counts checked."""
        live = os.path.join(self.root, plan.directory)
        try:
            os.makedirs(work)
        except OSError as exc:
            raise SinkError(f"cannot create the work directory {work}: {exc}", cause=exc) from exc
        for bin_ in plan.bins:
            tables = []
            for name in bin_.inputs:
                path = os.path.join(live, name)
                try:
                    tables.append(pq.ParquetFile(path).read())
                except (OSError, pa.ArrowException) as exc:
                    raise SinkError(f"cannot read {path}: {exc}; nothing was compacted", cause=exc) from exc
            rows = pa.concat_tables(tables)
            if all(key in rows.column_names for key, _ in _SORT_KEYS):
                rows = rows.sort_by(_SORT_KEYS)  # a stable sort: ties keep the input order
            target = os.path.join(work, bin_.output)
            try:
                pq.write_table(rows, target, compression=self.settings.codec.parquet, row_group_size=_ROW_GROUP_ROWS,
                               **writer_options(rows.schema))
                _fsync(target)
                written = pq.read_metadata(target).num_rows
            except (OSError, pa.ArrowException) as exc:
                raise SinkError(f"cannot write {target}: {exc}", cause=exc) from exc
            if written != rows.num_rows:
                raise SinkError(f"{target} holds {written} rows, its inputs {rows.num_rows}")
        _fsync(work)

    def _swap(self, plan: DirectoryPlan, work: str) -> tuple[tuple[str, ...], str]:
        """Under the exclusive publish lock: list the live directory, hard-link its other entries
        into ``work`` and exchange the two. Returns the linked names and ``""``, or ``()`` and why
        nothing was exchanged. Raises :class:`SinkError` (nothing exchanged) when it cannot."""
        live = os.path.join(self.root, plan.directory)
        try:
            with exclusive_publishing(self.root):
                entries = [Entry(e.name, e.is_dir(follow_symlinks=False)) for e in os.scandir(live)]
                links, problem = links_for_exchange(entries, plan)
                recorded = [e for e in self._record_epochs() if e <= plan.last_epoch]
                if not problem and recorded:
                    problem = f"an epoch record of epoch {recorded[0]} appeared, not newer than every input"
                problem = problem or _same_owner_and_mode(live, work)
                if problem:
                    logger.warning("compaction of %s skipped: %s", plan.directory, problem)
                    return (), problem
                for name in links:
                    os.link(os.path.join(live, name), os.path.join(work, name), follow_symlinks=False)
                _fsync(work)
                exchange_directories(live, work)
                self._after_step(AFTER_EXCHANGE)
        except OSError as exc:
            raise SinkError(f"cannot compact {live}: {exc}", cause=exc) from exc
        return links, ""

    def _settle(self, plan: DirectoryPlan, work: str, links: tuple[str, ...]) -> DirectoryReport:
        """After the exchange: start the replaced directory's grace period, make the exchange
        durable, and move back into the live directory any file a writer that does not take the
        publish lock (an older version) renamed into it between the listing and the exchange."""
        live = os.path.join(self.root, plan.directory)
        try:
            os.utime(work)
            _fsync(os.path.dirname(live))
            _fsync(os.path.dirname(work))
            strays = strays_after_exchange(os.listdir(work), plan, links)
            for name in strays:
                logger.warning("%s was renamed into %s during its exchange without the publish lock; moving it "
                               "back", name, plan.directory)
                os.rename(os.path.join(work, name), os.path.join(live, name))
        except OSError as exc:
            raise SinkError(f"compacted {live}, then failed: {exc}", cause=exc) from exc
        logger.info("compacted %s: %d -> %d files (%d bytes rewritten)", plan.directory, plan.files,
                    plan.files_after, plan.input_bytes)
        return DirectoryReport(plan.directory, plan.files, plan.files_after + len(strays), plan.input_bytes,
                               plan.outputs)

    # ---- leftovers -----------------------------------------------------------------------------------

    def clean_leftovers(self) -> tuple[int, int]:
        """Delete the leftovers of earlier passes that are due (under the compaction lock); returns
        (deleted, kept: replaced directories within their grace period)."""
        with compaction_lock(self.root):
            return self.clean_leftovers_locked()

    def clean_leftovers_locked(self) -> tuple[int, int]:
        base = os.path.join(self.root, WORK_DIR)
        try:
            scanned = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return 0, 0
        now = self.clock()
        found = []
        for entry in scanned:
            if entry.name.startswith(_PROBE_PREFIX):  # a check killed midway (no check runs: we hold the lock)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            try:
                found.append(WorkDirectory(entry.name, tuple(os.listdir(entry.path)),
                                           now - entry.stat(follow_symlinks=False).st_mtime))
            except FileNotFoundError:
                continue
        deleted = kept = 0
        for cleanup in plan_cleanup(found, self.settings.grace_s):
            if not cleanup.delete:
                kept += 1
                continue
            logger.info("deleting compaction leftover %s (%s)", cleanup.name, cleanup.kind.value)
            try:
                shutil.rmtree(os.path.join(base, cleanup.name))
            except OSError as exc:
                raise SinkError(f"cannot delete {os.path.join(base, cleanup.name)}: {exc}", cause=exc) from exc
            deleted += 1
        return deleted, kept


def _same_owner_and_mode(live: str, work: str) -> str:
    """Give ``work`` the owner, group and mode of ``live`` (nodes must go on publishing into it); ""
    or why it cannot (a compaction run by another user than the directory's, without the right)."""
    wanted = os.stat(live)
    try:
        if (os.stat(work).st_uid, os.stat(work).st_gid) != (wanted.st_uid, wanted.st_gid):
            os.chown(work, wanted.st_uid, wanted.st_gid)
    except PermissionError:
        return (f"it belongs to uid {wanted.st_uid} gid {wanted.st_gid}, which this process cannot give its "
                "replacement: run compact as the user the nodes run as")
    os.chmod(work, stat.S_IMODE(wanted.st_mode))
    return ""


def _schema_key(path: str) -> str:
    """Equal for two files exactly when their Arrow schemas (metadata included) are identical."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise SinkError(f"cannot read {path}: {exc}; nothing was compacted", cause=exc) from exc
    return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
