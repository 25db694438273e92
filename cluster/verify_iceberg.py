"""The audit's reader of an Iceberg output: the data files of the table's current snapshot.

Each data file the current snapshot lists is read like a published Parquet file (only ``_topic``,
``_partition``, ``_offset``; offsets must increase per partition inside a file), so a file listed
twice, or two files holding the same offsets, shows as duplicated, and a committed epoch missing from
the table shows as missing. The records the bad-record policy skipped stay a Parquet stream under
``<output>/_rejected/`` and are read from there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cluster.errors import ClusterError, VerifyError
from cluster.sink import REJECTED_DIR, list_published
from cluster.verify import OutputScan, scan_table

if TYPE_CHECKING:
    from cluster.cli_lake import LakeTarget

__all__ = ["read_iceberg_output"]

_COLUMNS = ["_topic", "_partition", "_offset"]


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
