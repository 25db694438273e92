"""The audit's reader of a lake: a Parquet tree (:func:`cluster.verify.read_output`), or an Iceberg
table, whose data files of the current snapshot are read.

Each data file the current snapshot lists is read like a published Parquet file (only ``_topic``,
``_partition``, ``_offset``; offsets must increase per partition inside a file), so a file listed
twice, or two files holding the same offsets, shows as duplicated, and a committed epoch missing from
the table shows as missing. The records the bad-record policy skipped stay a Parquet stream under
``<output>/_rejected/`` and are read from there.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cluster.errors import ClusterError, VerifyError
from cluster.sink import REJECTED_DIR, list_published
from cluster.lake_settings import LakeTarget, TableFormat
from cluster.verify import OutputScan, read_output, scan_table

__all__ = ["read_iceberg_output", "read_lake_output", "rows_per_partition"]

_COLUMNS = ["_topic", "_partition", "_offset"]


def read_lake_output(target: LakeTarget, fs: pafs.FileSystem, root: str, topic: str) -> OutputScan:
    """Scan ``topic``'s published output in ``target``'s format (raises :class:`VerifyError`)."""
    if target.table_format is TableFormat.ICEBERG:
        return read_iceberg_output(target, fs, root, topic)
    return read_output(fs, root, topic)


def read_iceberg_output(target: LakeTarget, fs: pafs.FileSystem, root: str, topic: str) -> OutputScan:
    """Scan ``topic``'s table (current snapshot), then the rejected records under ``root``.

    Raises :class:`VerifyError` when the catalog or the table cannot be read (a table that does not
    exist yet scans as empty: everything is missing)."""
    from cluster.iceberg_tables import load_table_or_none, open_catalog

    assert target.iceberg is not None
    identifier = (target.iceberg.namespace, target.table_of(topic))
    scan = OutputScan()
    try:
        table = load_table_or_none(open_catalog(target.iceberg, fs, root), identifier)
        if table is not None and table.current_snapshot() is not None:
            for task in table.scan(selected_fields=tuple(_COLUMNS)).plan_files():
                path = task.file.file_path
                with table.io.new_input(path).open() as handle:
                    data = pq.ParquetFile(handle).read(columns=_COLUMNS)
                scan_table(data, topic, path, scan)
        rejected_root = f"{root}/{REJECTED_DIR}" if root else REJECTED_DIR
        for path in list_published(fs, rejected_root):
            with fs.open_input_file(path) as handle:
                scan_table(pq.ParquetFile(handle).read(columns=_COLUMNS), topic, path, scan, rejected=True)
    except ClusterError as exc:
        raise VerifyError(f"cannot read table {'.'.join(identifier)}: {exc}", cause=exc) from exc
    except (OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read table {'.'.join(identifier)}: {exc}", cause=exc) from exc
    return scan


def rows_per_partition(target: LakeTarget, topic: str) -> dict[int, int]:
    """``SELECT _partition, count(*) FROM <the topic's table> GROUP BY _partition`` on an Iceberg
    lake, through pyiceberg and pyarrow (the current snapshot)."""
    from cluster.iceberg_tables import load_table_or_none, open_catalog
    from cluster.sink import open_output

    assert target.iceberg is not None
    fs, root = open_output(target.output)
    table = load_table_or_none(open_catalog(target.iceberg, fs, root), (target.iceberg.namespace, target.table_of(topic)))
    if table is None:
        return {}
    rows = table.scan(selected_fields=("_partition",)).to_arrow()
    counts = rows.group_by("_partition").aggregate([("_partition", "count")])
    return dict(zip(counts["_partition"].to_pylist(), counts["_partition_count"].to_pylist()))
