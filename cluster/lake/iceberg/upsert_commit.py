"""Upsert mode's Iceberg commit: one epoch of change rows applied to a keyed table, copy-on-write,
in ONE catalog transaction.

:func:`commit_upsert` reads the epoch's change files (every node's, published), reduces them
(:func:`~laminar_kafka.cluster.lake.iceberg.upsert.reduce_changes`: last change per key by offset,
deletes dropped), then, in one transaction:

- evolves the schema as the caller planned it (``_op`` is never a column of the table);
- finds the data files that may hold a touched key (all files of the current snapshot, except those
  a partition field over a key column rules out: with ``partition-by bucket[N](key)`` only the
  touched buckets' files are read), reads their key columns, and rewrites each file holding a
  touched key without those rows (copy-on-write: no delete files, so every reader reads the table
  exactly);
- writes the survivors of the rewritten files together with the upserted rows as new data files;
- commits ONE overwrite snapshot removing the rewritten files and adding the new ones (with the
  snapshot ``summary``), and the table ``properties`` (the epoch property) in the same catalog commit.

A retry after a crash finds the epoch property and does nothing; a crash before the catalog commit
leaves the table exactly at the previous epoch (the files written meanwhile are referenced by no
snapshot; a failed commit deletes them). The change files are not data files of the table: once
the commit landed, its node deletes them (:func:`delete_change_files`); a node that finds them gone
reloads the table and finds the epoch done (:mod:`laminar_kafka.cluster.lake.iceberg.commit`).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue

# _dataframe_to_data_files is private in pyiceberg 0.12 (pinned <0.13): the writer its own append and
# copy-on-write delete use (target-sized files split by the partition spec); no public one writes data files
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata

from laminar_kafka.cluster.lake.iceberg.evolution import Step, apply_evolution
from laminar_kafka.cluster.lake.iceberg.upsert import POSITION, plain, reduce_changes, row_numbers
from laminar_kafka.cluster.lake.staged_names import OutputStream, parse_staged

logger = logging.getLogger(__name__)

__all__ = ["UpsertStats", "commit_upsert", "conform", "delete_change_files", "read_changes", "sweep_change_files"]


@dataclass(frozen=True)
class UpsertStats:
    """What one upsert commit did: keys touched, keys deleted, rows upserted, data files read
    (their key columns), rewritten (removed) and added."""

    keys: int
    deleted: int
    upserted: int
    files_read: int
    files_rewritten: int
    files_added: int


def read_changes(table: Table, paths: Sequence[str]) -> pa.Table:
    """The change rows of the files at ``paths`` (absolute, as the table's FileIO reads them), one
    table (dictionary columns decoded, schemas unified)."""
    parts = []
    for path in paths:
        with table.io.new_input(path).open() as stream:
            parts.append(plain(pq.read_table(stream)))
    return pa.concat_tables(parts, promote_options="permissive")


def conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` as columns of ``schema`` in its order: each column cast to its type, a column
    ``rows`` lack filled with nulls, columns ``schema`` lacks dropped."""
    columns = []
    for field in schema:
        if field.name in rows.column_names:
            columns.append(pc.cast(rows.column(field.name), field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def commit_upsert(table: Table, keys: Sequence[str], paths: Sequence[str], summary: Mapping[str, str],
                  properties: Mapping[str, str], steps: Sequence[Step] = ()) -> UpsertStats:
    """Apply the change files at ``paths`` to ``table`` (keyed by ``keys``) and set ``properties``,
    in one catalog commit, after the schema evolution ``steps`` (planned by the caller on the rows'
    schemas without ``_op``, keys required: :func:`~laminar_kafka.cluster.lake.iceberg.upsert.keyed_arrow_schema`). Raises what the catalog raises (``CommitFailedException`` on a lost race:
    the caller reloads the table and tries again), :class:`KeyConflict` for an epoch that cannot be
    applied, ``ValueError`` for rows the table cannot take."""
    changes = read_changes(table, paths)
    reduced = reduce_changes(changes, keys)
    written: list[str] = []
    try:
        with table.transaction() as transaction:
            if steps:
                with transaction.update_schema() as update:
                    apply_evolution(update, steps)
            if transaction.table_metadata.name_mapping() is None:  # files without field ids (compaction's) read by name
                transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING:
                                            transaction.table_metadata.schema().name_mapping.model_dump_json()})
            metadata = transaction.table_metadata
            target = schema_to_pyarrow(metadata.schema(), include_field_ids=False)
            candidates = _candidates(table, metadata, reduced.touched, keys)
            removed, survivors, replayed = _rewrites(table, metadata, candidates, reduced.touched, keys, target)
            upserts = reduced.upserts
            if replayed.num_rows:  # the table holds later changes of these keys: theirs stay
                logger.info("iceberg table %s: %d change(s) older than the table's rows of their keys were not "
                            "applied (a replay)", ".".join(table.name()), replayed.num_rows)
                upserts = upserts.filter(pc.invert(_hits(upserts.select(list(keys)), replayed, keys)))
            rows = pa.concat_tables([conform(upserts, target), *survivors])
            added = list(_dataframe_to_data_files(metadata, rows, table.io)) if rows.num_rows else []
            written.extend(data_file.file_path for data_file in added)
            _overwrite(transaction, removed, added, summary)
            transaction.set_properties(dict(properties))
    except BaseException:
        for path in written:  # referenced by no snapshot: the commit did not land
            _delete_quietly(table, path)
        raise
    return UpsertStats(reduced.touched.num_rows, reduced.deleted, reduced.upserts.num_rows, len(candidates),
                       len(removed), len(added))


def _overwrite(transaction: Transaction, removed: list[DataFile], added: list[DataFile],
               summary: Mapping[str, str]) -> None:
    """One snapshot removing ``removed`` and adding ``added``, with ``summary``."""
    update = transaction.update_snapshot(snapshot_properties=dict(summary))
    with update.overwrite() as overwrite:
        for data_file in removed:
            overwrite.delete_data_file(data_file)
        for data_file in added:
            overwrite.append_data_file(data_file)


def _candidates(table: Table, metadata: TableMetadata, touched: pa.Table, keys: Sequence[str]) -> list[FileScanTask]:
    """The current snapshot's data files that may hold a touched key: all of them, except those whose
    partition value of a field over a key column is none of the touched keys' values."""
    if table.current_snapshot() is None or touched.num_rows == 0:
        return []
    tasks = list(table.scan().plan_files())
    schema = metadata.schema()
    for position, field in enumerate(metadata.spec().fields):
        source = schema.find_field(field.source_id)
        if source.name not in keys:
            continue  # a row may have moved between partitions of a non-key field: no pruning
        values = field.transform.pyarrow_transform(source.field_type)(
            pc.cast(touched.column(source.name), schema_to_pyarrow(source.field_type)))
        wanted = set(pc.unique(values).to_pylist())
        tasks = [task for task in tasks if task.file.partition[position] in wanted]
    return tasks


def _rewrites(table: Table, metadata: TableMetadata, candidates: list[FileScanTask], touched: pa.Table,
              keys: Sequence[str], target: pa.Schema) -> tuple[list[DataFile], list[pa.Table], pa.Table]:
    """The candidate files holding a touched key (to remove), their rows to write again (the other
    keys', and a touched key's row written from a later change than the epoch's), and the keys of
    those later rows (the epoch's changes of them are a replay, not applied)."""
    schema = metadata.schema()
    key_schema = schema.select(*keys)
    removed: list[DataFile] = []
    survivors: list[pa.Table] = []
    replayed: list[pa.Table] = []
    for task in candidates:
        file_keys = ArrowScan(metadata, table.io, key_schema, AlwaysTrue()).to_table([task])
        hit = _hits(file_keys, touched, keys)
        if not pc.any(hit).as_py():
            continue
        removed.append(task.file)
        rows = ArrowScan(metadata, table.io, schema, AlwaysTrue()).to_table([task])
        later = _later(rows, touched, keys)
        kept = rows.filter(pc.or_(pc.invert(hit), later))
        if kept.num_rows:
            survivors.append(conform(kept, target))
        if pc.any(later).as_py():
            replayed.append(plain(rows.filter(later).select(list(keys))))
    key_columns = pa.schema([target.field(key) for key in keys])
    return removed, survivors, pa.concat_tables([conform(t, key_columns) for t in replayed] or [key_columns.empty_table()])


def _later(rows: pa.Table, touched: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Per row of ``rows``, whether it was written from a later (or the same) offset of the same Kafka
    partition than the epoch's change of its key: the epoch replays what the table already holds."""
    row = "__laminar_row"
    mine = plain(rows.select([*keys, *POSITION])).append_column(row, row_numbers(rows.num_rows))
    theirs = pa.schema([mine.schema.field(key) for key in keys]
                       + [mine.schema.field(name).with_name(f"__change{name}") for name in POSITION])
    probe = conform(touched.rename_columns([*keys, *(f"__change{name}" for name in POSITION)]), theirs)
    joined = mine.join(probe, keys=list(keys), join_type="inner")
    later = pc.and_(pc.equal(joined.column("_partition"), joined.column("__change_partition")),
                    pc.greater_equal(joined.column("_offset"), joined.column("__change_offset")))
    found = joined.filter(pc.fill_null(later, False)).column(row).combine_chunks()
    return pc.is_in(mine.column(row), value_set=found)


def _hits(file_keys: pa.Table, touched: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Per row of ``file_keys``, whether its key is one of ``touched`` (a semi join, composite keys
    included)."""
    probe = conform(touched, file_keys.schema)
    if len(keys) == 1:
        return pc.fill_null(pc.is_in(file_keys.column(keys[0]), value_set=probe.column(keys[0])), False)
    row = "__laminar_row"
    indexed = plain(file_keys).append_column(row, row_numbers(file_keys.num_rows))
    matched = indexed.join(plain(probe), keys=list(keys), join_type="left semi").column(row)
    return pc.is_in(indexed.column(row), value_set=matched.combine_chunks())


def _delete_quietly(table: Table, path: str) -> None:
    try:
        table.io.delete(path)
    except (OSError, ValueError):
        logger.warning("could not delete abandoned upsert output %s", path)


def delete_change_files(fs: pafs.FileSystem, root: str, published: Sequence[str]) -> int:
    """Delete an epoch's published change files (paths relative to ``root``) once its commit landed;
    returns how many this call deleted. One already gone is skipped; one that cannot be deleted is
    left (garbage, never read again: its epoch is in the table), in one warning for the call."""
    deleted = 0
    failed: list[str] = []
    for relative in published:
        try:
            fs.delete_file(f"{root}/{relative}" if root else relative)
            deleted += 1
        except FileNotFoundError:
            continue
        except OSError:
            failed.append(relative)
    if failed:
        logger.warning("could not delete %d change file(s) of a committed epoch (left in place), e.g. %s",
                       len(failed), failed[0])
    return deleted


#: directories of a table's location that hold the table's own files, never change files
_TABLE_DIRS = ("data", "metadata")


def sweep_change_files(fs: pafs.FileSystem, root: str, directory: str, through: int) -> int:
    """Delete the change files left under ``directory`` (a keyed table's topic directory, relative to
    ``root``) by epochs up to ``through`` (the table's committed epoch): a node killed between its
    commit and :func:`delete_change_files` leaves its epoch's, never read again. Only published
    change-file names (``epoch-<E>.node-...parquet``) outside the table's ``data/`` and ``metadata/``
    are candidates; a later epoch's (not committed yet) is kept. Returns how many were deleted.
    For keyed (upsert) tables only: a plain table's published files are its data files."""
    base = f"{root}/{directory}" if root else directory
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    doomed = []
    for info in fs.get_file_info(selector):
        relative = info.path[len(base):].lstrip("/")
        if info.type != pafs.FileType.File or relative.split("/", 1)[0] in _TABLE_DIRS:
            continue
        name = parse_staged(info.base_name)
        if name is not None and name.stream is OutputStream.ROWS and 0 < name.epoch <= through:
            doomed.append(f"{directory}/{relative}")
    deleted = delete_change_files(fs, root, doomed)  # one its committer deleted meanwhile is skipped
    if deleted:
        logger.info("deleted %d change file(s) of committed epochs under %s", deleted, base)
    return deleted
