"""Keeping an Iceberg table healthy while the pipeline writes to it: compaction and snapshot expiry.

:func:`compact` rewrites small data files into files of about the target size, per partition, as one
``overwrite`` snapshot (summary ``laminar.operation=compact``) that deletes the inputs and adds the
outputs (compressed with the given codec, zstd by default, as Iceberg's own writers do): a reader
sees the same multiset of rows before and after. A pipeline commit landing
meanwhile makes the commit fail; the same rewrite is then committed on the new snapshot while its
inputs are all still live (pipeline commits only add files), else planned again (bounded).

:func:`expire` expires old snapshots, then deletes the data files that only expired snapshots
referenced (never a file a retained snapshot references, never anything under ``_staging``).

Both are Iceberg commits; table properties (``laminar.epoch.<pipeline>``) are left as they are.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.commit import without_blind_retries
from laminar_kafka.cluster.lake.iceberg.partitions import data_files
from laminar_kafka.cluster.lake.iceberg.tables import describe_error
from laminar_kafka.cluster.lake.parquet.compaction_plan import Codec
from laminar_kafka.cluster.lake.parquet.encoding import writer_options

logger = logging.getLogger(__name__)

__all__ = ["CompactReport", "ExpireReport", "compact", "expire", "plan_bins"]

DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
_SORT_KEYS = [("_partition", "ascending"), ("_offset", "ascending")]


@dataclass(frozen=True)
class CompactReport:
    """Data files of the current snapshot before and after, the bytes of the files rewritten, and
    the compaction snapshot (``None``: nothing was worth rewriting)."""

    files_before: int
    files_after: int
    bytes_rewritten: int
    snapshot_id: int | None


@dataclass(frozen=True)
class ExpireReport:
    snapshots_expired: int
    files_deleted: int
    bytes_deleted: int


def plan_bins(sizes: Iterable[tuple[str, int]], target_file_bytes: int, min_input_files: int) -> list[list[str]]:
    """Bin-pack small files (under half the target) of one partition, in the given order, into
    groups of about ``target_file_bytes``; groups of fewer than ``min_input_files`` are dropped.
    Pure: ``sizes`` are ``(path, bytes)``."""
    bins: list[list[str]] = []
    current: list[str] = []
    current_bytes = 0
    for path, size in sizes:
        if size >= target_file_bytes // 2:
            continue
        if current and current_bytes + size > target_file_bytes:
            bins.append(current)
            current, current_bytes = [], 0
        current.append(path)
        current_bytes += size
    if current:
        bins.append(current)
    return [group for group in bins if len(group) >= max(2, min_input_files)]


def compact(
    table: Table,
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    min_input_files: int = 2,
    *,
    attempts: int = 10,
    codec: Codec = Codec.ZSTD,
) -> CompactReport:
    """Rewrite the small data files of each partition into files of about ``target_file_bytes``
    compressed with ``codec``, committed as ONE overwrite snapshot. Raises :class:`SinkError` after ``attempts`` lost races.

    A pipeline commit landing meanwhile only adds files, so after a lost race the same rewrite is
    committed again on top of it (no data rewritten) as long as every input file is still live;
    only when an input is gone (another compaction won) is the work planned again."""
    name = ".".join(table.name())
    table = without_blind_retries(table)
    for attempt in range(attempts):
        tasks = list(table.scan().plan_files()) if table.current_snapshot() is not None else []
        groups = _plan(table, tasks, target_file_bytes, min_input_files)
        if not groups:
            return CompactReport(len(tasks), len(tasks), 0, None)
        written: list[str] = []
        try:
            outputs = [_rewrite(table, group, written, codec) for group in groups]
            inputs = [task.file for group in groups for task in group]
            committed = _commit_rewrite(table, inputs, outputs, attempts)
        except BaseException:  # the files written so far are deleted, then re-raised
            _delete_quietly(table, written)
            raise
        if not committed:
            _delete_quietly(table, written)
            logger.info("compaction of %s: its inputs changed meanwhile; planning again (attempt %d)", name, attempt + 1)
            continue
        snapshot = table.current_snapshot()
        files_after = len(list(table.scan().plan_files()))
        rewritten = sum(task.file.file_size_in_bytes for group in groups for task in group)
        report = CompactReport(len(tasks), files_after, rewritten, snapshot.snapshot_id if snapshot else None)
        logger.info("compacted %s: %d -> %d data files (%d bytes rewritten)", name, report.files_before,
                    report.files_after, rewritten)
        return report
    raise SinkError(f"compaction of iceberg table {name} lost {attempts} races with concurrent commits")


def _commit_rewrite(table: Table, inputs: list[DataFile], outputs: list[DataFile], attempts: int) -> bool:
    """Commit one overwrite snapshot deleting ``inputs`` and adding ``outputs``; after a lost race,
    again on the new current snapshot while every input is still live. False when an input is gone
    (the caller plans again); :class:`SinkError` after ``attempts`` lost races."""
    wanted = {data_file.file_path for data_file in inputs}
    for attempt in range(attempts):
        try:
            with table.transaction() as transaction:
                update = transaction.update_snapshot(snapshot_properties={"laminar.operation": "compact"})
                with update.overwrite() as overwrite:
                    for data_file in inputs:
                        overwrite.delete_data_file(data_file)
                    for data_file in outputs:
                        overwrite.append_data_file(data_file)
            return True
        except CommitFailedException as exc:
            logger.info("compaction of %s lost a race (attempt %d): %s", ".".join(table.name()), attempt + 1,
                        describe_error(exc))
            time.sleep(min(1.0, 0.02 * 2 ** attempt))
            table.refresh()
            live = {task.file.file_path for task in table.scan().plan_files()}
            if not wanted <= live:
                return False
    raise SinkError(f"compaction of iceberg table {'.'.join(table.name())} lost {attempts} races with concurrent commits")


def _plan(table: Table, tasks: list[FileScanTask], target_file_bytes: int,
          min_input_files: int) -> list[list[FileScanTask]]:
    """Groups of scan tasks to rewrite together: same partition of the current spec, no deletes."""
    by_partition: dict[tuple[object, ...], list[FileScanTask]] = {}
    default_spec = table.metadata.default_spec_id
    for task in tasks:
        if task.delete_files or task.file.spec_id != default_spec:
            continue
        partition = task.file.partition
        key = tuple(partition[i] for i in range(len(partition)))
        by_partition.setdefault(key, []).append(task)
    groups: list[list[FileScanTask]] = []
    for key in sorted(by_partition, key=repr):
        partition_tasks = sorted(by_partition[key], key=lambda t: t.file.file_path)
        by_path = {task.file.file_path: task for task in partition_tasks}
        bins = plan_bins(((t.file.file_path, t.file.file_size_in_bytes) for t in partition_tasks),
                         target_file_bytes, min_input_files)
        groups.extend([by_path[path] for path in group] for group in bins)
    return groups


def _rewrite(table: Table, group: list[FileScanTask], written: list[str], codec: Codec) -> DataFile:
    """Read ``group``'s rows (projected onto the table schema), write them to one new data file in
    the same partition, and describe it with pyiceberg's own helper."""
    metadata = table.metadata
    rows = ArrowScan(metadata, table.io, table.schema(), AlwaysTrue()).to_table(group)
    present = [key for key in _SORT_KEYS if key[0] in rows.column_names]
    if present:
        rows = rows.sort_by(present)
    partition_path = table.spec().partition_to_path(group[0].file.partition, table.schema())
    directory = f"{table.location().rstrip('/')}/data"
    directory = f"{directory}/{partition_path}" if partition_path else directory
    path = f"{directory}/compact-{uuid.uuid4().hex}.parquet"
    written.append(path)
    with table.io.new_output(path).create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression=codec.parquet, **writer_options(rows.schema))
    return data_files(table.io, metadata, [path])[0]  # a bucket's partition cannot come from statistics


def _delete_quietly(table: Table, paths: list[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except (OSError, ValueError):
            logger.warning("could not delete abandoned compaction output %s", path)


def expire(
    table: Table,
    older_than: dt.datetime | dt.timedelta,
    retain_last: int = 1,
    *,
    attempts: int = 10,
) -> ExpireReport:
    """Expire the snapshots older than ``older_than`` (a time, or an age), keeping the current one,
    branch and tag heads and the newest ``retain_last``; then delete the data files that only
    expired snapshots referenced. A file some retained snapshot references, a file added after
    the oldest retained snapshot, or a file under ``_staging`` is never deleted."""
    name = ".".join(table.name())
    cutoff = dt.datetime.now(dt.timezone.utc) - older_than if isinstance(older_than, dt.timedelta) else older_than
    if cutoff.tzinfo is None:
        cutoff = cutoff.replace(tzinfo=dt.timezone.utc)
    cutoff_ms = int(cutoff.timestamp() * 1000)
    manifest_cache: dict[str, list[tuple[str, int, int | None]]] = {}
    for attempt in range(attempts):
        table.refresh()
        snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)
        keep = {s.snapshot_id for s in snapshots[:max(1, retain_last)]}
        keep |= {ref.snapshot_id for ref in table.metadata.refs.values()}
        doomed = [s for s in snapshots if s.timestamp_ms < cutoff_ms and s.snapshot_id not in keep]
        if not doomed:
            return ExpireReport(0, 0, 0)
        added_at = {s.snapshot_id: s.timestamp_ms for s in snapshots}
        referenced: dict[str, tuple[int, int | None]] = {}
        for snapshot in doomed:
            for path, size, added_by in _live_files(table, snapshot, manifest_cache):
                referenced[path] = (size, added_by)
        try:
            table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in doomed]).commit()
        except CommitFailedException as exc:
            logger.info("expiry on %s lost a race (attempt %d): %s", name, attempt + 1, describe_error(exc))
            time.sleep(min(1.0, 0.02 * 2 ** attempt))
            continue
        table.refresh()
        retained = table.snapshots()
        oldest_retained_ms = min((s.timestamp_ms for s in retained), default=0)
        still_used: set[str] = set()
        for snapshot in retained:
            still_used.update(path for path, _, _ in _live_files(table, snapshot, manifest_cache))
        deleted = deleted_bytes = 0
        for path, (size, added_by) in sorted(referenced.items()):
            added_ms = added_at.get(added_by) if added_by is not None else None
            if path in still_used or "/_staging/" in path or added_ms is None or added_ms >= oldest_retained_ms:
                continue
            try:
                table.io.delete(path)
            except FileNotFoundError:
                continue
            deleted += 1
            deleted_bytes += size
        logger.info("expired %d snapshot(s) of %s, deleted %d unreferenced data file(s)", len(doomed), name, deleted)
        return ExpireReport(len(doomed), deleted, deleted_bytes)
    raise SinkError(f"snapshot expiry of iceberg table {name} lost {attempts} races with concurrent commits")


def _live_files(table: Table, snapshot: Snapshot, cache: dict[str, list[tuple[str, int, int | None]]]
                ) -> list[tuple[str, int, int | None]]:
    """``(path, bytes, adding snapshot id)`` of every data file ``snapshot`` references."""
    result: list[tuple[str, int, int | None]] = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        if manifest.manifest_path not in cache:
            cache[manifest.manifest_path] = [
                (entry.data_file.file_path, entry.data_file.file_size_in_bytes, entry.snapshot_id)
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            ]
        result.extend(cache[manifest.manifest_path])
    return result
