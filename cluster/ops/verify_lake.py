"""The audit's reader of a lake: a Parquet tree (:func:`laminar_kafka.cluster.ops.verify.read_output`), or an Iceberg
table, whose data files of the current snapshot are read.

Each data file the current snapshot lists is read like a published Parquet file (only ``_topic``,
``_partition``, ``_offset``; offsets must increase per partition inside a file), so a file listed
twice, or two files holding the same offsets, shows as duplicated, and a committed epoch missing from
the table shows as missing. The records the bad-record policy skipped stay a Parquet stream under
``<output>/_rejected/`` and are read from there. A data file whose bytes do not parse as Parquet is
named in the scan's ``damaged`` (a finding, as in a Parquet tree: :func:`~laminar_kafka.cluster.ops.verify.read_offset_columns`),
and so is a data file the current snapshot lists that does not exist (unless a compaction replaced
the snapshot meanwhile: the new one is scanned).

A table that does not exist while the topic holds records (and none of them was rejected) is a wrong
``--pipeline`` / ``--namespace`` / ``--table`` far more often than a lake that lost everything: that
is one :class:`VerifyError` line naming the table, the catalog and what the catalog holds, not a
report of every record missing.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import ClusterError, VerifyError
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published
from laminar_kafka.cluster.lake.settings import LakeTarget, TableFormat, table_name_of
from laminar_kafka.cluster.ops.verify import (
    DamagedFile,
    OutputScan,
    opener_of,
    read_offset_columns,
    read_output,
    scan_table,
)
from laminar_kafka.cluster.ops.verify_routed import read_routed_output, routed_rows_per_partition
from laminar_kafka.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["missing_table_message", "read_iceberg_output", "read_lake_output", "rows_per_partition"]

_COLUMNS = ["_topic", "_partition", "_offset"]
#: names listed in the missing-table message (more become ", ...")
_LISTED = 20
#: scans of a table whose snapshot a compaction replaced while a data file it listed was read
_SCAN_ATTEMPTS = 5
#: the problem of a data file the snapshot lists that does not exist
_NOT_FOUND = "not found"


def read_lake_output(target: LakeTarget, fs: pafs.FileSystem, root: str, topic: str, *,
                     topic_has_records: bool = False) -> OutputScan:
    """Scan ``topic``'s published output in ``target``'s format (raises :class:`VerifyError`).
    ``topic_has_records``: the topic holds records to audit, so an Iceberg table must exist."""
    if target.table_format is TableFormat.ICEBERG and target.iceberg is not None and target.iceberg.routed:
        return read_routed_output(target, fs, root, topic)  # a topic's rows in many tables
    if target.table_format is TableFormat.ICEBERG:
        return read_iceberg_output(target, fs, root, topic, topic_has_records=topic_has_records)
    return read_output(fs, root, topic)


def read_iceberg_output(target: LakeTarget, fs: pafs.FileSystem, root: str, topic: str, *,
                        topic_has_records: bool = False) -> OutputScan:
    """Scan ``topic``'s table (current snapshot), then the rejected records under ``root``.

    Raises :class:`VerifyError` when the catalog or the table cannot be read, and when the table
    does not exist although ``topic_has_records`` and no record of the topic was rejected (the
    message names the table, the catalog and what it holds: a wrong ``--pipeline``?). Otherwise a
    table that does not exist yet scans as empty: everything is missing."""
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog

    assert target.iceberg is not None
    identifier = (target.iceberg.namespace, target.table_of(topic))
    scan = OutputScan()
    try:
        catalog = open_catalog(target.iceberg, fs, root)
        table = load_table_or_none(catalog, identifier)
        for attempt in range(1, _SCAN_ATTEMPTS + 1):
            scan = OutputScan()
            if table is None or table.current_snapshot() is None:
                break
            scanned = _scan_data_files(table, topic, scan)
            if not any(d.problem.startswith(_NOT_FOUND) for d in scan.damaged) or attempt == _SCAN_ATTEMPTS:
                break
            # a file the snapshot lists was not found: damage, unless a compaction replaced the snapshot
            # (and expired the old one) while it was read; then the new snapshot is scanned
            table = load_table_or_none(catalog, identifier)
            current = table.current_snapshot() if table is not None else None
            if current is None or current.snapshot_id == scanned:
                break
        rejected_root = f"{root}/{REJECTED_DIR}" if root else REJECTED_DIR
        for path in list_published(fs, rejected_root):
            columns = read_offset_columns(functools.partial(fs.open_input_file, path), path)
            _scan_file(columns, topic, path, scan, rejected=True)
    except (ClusterError, ConfigurationError) as exc:
        raise VerifyError(f"cannot read table {'.'.join(identifier)}: {exc}", cause=exc) from exc
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read table {'.'.join(identifier)}: {exc}", cause=exc) from exc
    if table is None and topic_has_records and not scan.rejected:
        raise VerifyError(missing_table_message(catalog, identifier, _flags_of(target)))
    return scan


def _scan_data_files(table: Table, topic: str, scan: OutputScan) -> int:
    """Add the data files of ``table``'s current snapshot to ``scan``; one that does not parse, or that
    the snapshot lists and does not exist, to its ``damaged``. Returns the snapshot's id."""
    snapshot = table.current_snapshot()
    assert snapshot is not None
    for task in table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=tuple(_COLUMNS)).plan_files():
        path = task.file.file_path
        try:
            columns = read_offset_columns(opener_of(table.io, path), path)
        except FileNotFoundError:
            columns = DamagedFile(path, f"{_NOT_FOUND} (listed by snapshot {snapshot.snapshot_id} of the table)")
        _scan_file(columns, topic, path, scan)
    return snapshot.snapshot_id


def _scan_file(columns: pa.Table | DamagedFile, topic: str, path: str, scan: OutputScan, *,
               rejected: bool = False) -> None:
    """Add one file's offsets to ``scan``, or the file to its ``damaged``."""
    if isinstance(columns, DamagedFile):
        scan.damaged.append(columns)
    else:
        scan_table(columns, topic, path, scan, rejected=rejected)


def _flags_of(target: LakeTarget) -> str:
    """The flags that name ``target``'s table: the ones an operator should check when it is missing."""
    assert target.iceberg is not None
    flags = ["--pipeline" if target.iceberg.namespace == table_name_of(target.pipeline) else "--namespace"]
    if target.iceberg.table:
        flags.append("--table")
    return " / ".join(flags)


def _listing(names: list[str]) -> str:
    names = sorted(names)
    shown = ", ".join(names[:_LISTED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _LISTED else "")


def missing_table_message(catalog: Catalog, identifier: tuple[str, str], flags: str = "--pipeline") -> str:
    """One line for a table ``identifier`` that ``catalog`` does not hold: the table, the catalog
    (its URI without user info), the ``flags`` to check, then what the catalog holds: the tables
    of the namespace if it exists, else the namespaces, and the namespaces holding a table of that
    name. Listing failures only shorten the line."""
    from laminar_kafka.cluster.lake.iceberg.tables import describe_error, safe_uri

    namespace, name = identifier
    uri = catalog.properties.get("uri")
    where = safe_uri(uri) if uri else repr(catalog.name)
    try:
        if catalog.namespace_exists(namespace):
            tables = [".".join(t[1:]) for t in catalog.list_tables(namespace)]
            holds = f"tables in namespace {namespace}: {_listing(tables)}" if tables else f"namespace {namespace} has no table"
        else:
            namespaces = sorted(".".join(n) for n in catalog.list_namespaces())
            holds = f"no namespace {namespace}; namespaces: {_listing(namespaces)}" if namespaces else "the catalog has no namespace"
            elsewhere = [n for n in namespaces[:_LISTED] if catalog.table_exists((n, name))]
            if elsewhere:
                holds += f"; table {name} is in {_listing(elsewhere)}"
    except Exception as exc:  # noqa: BLE001 - the listing is a hint; the missing table is the error
        holds = f"cannot list the catalog: {describe_error(exc)}"
    return f"no Iceberg table {namespace}.{name} in catalog {where}: is {flags} right? ({holds})"


def rows_per_partition(target: LakeTarget, topic: str) -> dict[int, int]:
    """``SELECT _partition, count(*) FROM <the topic's table> GROUP BY _partition`` on an Iceberg
    lake, through pyiceberg and pyarrow (the current snapshot)."""
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    assert target.iceberg is not None
    if target.iceberg.routed:
        return routed_rows_per_partition(target, topic)
    fs, root = open_output(target.output)
    table = load_table_or_none(open_catalog(target.iceberg, fs, root), (target.iceberg.namespace, target.table_of(topic)))
    if table is None:
        return {}
    rows = table.scan(selected_fields=("_partition",)).to_arrow()
    counts = rows.group_by("_partition").aggregate([("_partition", "count")])
    return dict(zip(counts["_partition"].to_pylist(), counts["_partition_count"].to_pylist(), strict=True))
