"""The audit's reader of a routed Iceberg lake (``table-template``): a topic's rows spread over many
tables, so its scan is the sum over every table the pipeline committed into.

Each table's current snapshot is read as :func:`~laminar_kafka.cluster.ops.verify_lake.read_iceberg_output`
reads one table (only ``_topic``, ``_partition``, ``_offset``; rows of other topics are not this
topic's), so a record in two tables shows as duplicated and one in none as missing; then the
rejected records under ``<output>/_rejected/`` (where rows the template could not route land too).
"""
from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from laminar_kafka.cluster.errors import ClusterError, VerifyError
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published
from laminar_kafka.cluster.lake.settings import LakeTarget
from laminar_kafka.cluster.ops.verify import DamagedFile, OutputScan, opener_of, read_offset_columns, scan_table
from laminar_kafka.errors import ConfigurationError

__all__ = ["read_routed_output", "routed_rows_per_partition"]

_COLUMNS = ("_topic", "_partition", "_offset")


def read_routed_output(target: LakeTarget, fs: pafs.FileSystem, root: str, topic: str) -> OutputScan:
    """Scan ``topic``'s rows in every table of ``target``'s pipeline, then the rejected records.
    Raises :class:`VerifyError` when the catalog, a table or a file cannot be read."""
    from laminar_kafka.cluster.lake.iceberg.records import pipeline_tables
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog

    assert target.iceberg is not None
    scan = OutputScan()
    namespace = target.iceberg.namespace
    try:
        catalog = open_catalog(target.iceberg, fs, root)
        for identifier in pipeline_tables(catalog, namespace, target.pipeline):
            table = load_table_or_none(catalog, identifier)
            snapshot = table.current_snapshot() if table is not None else None
            if table is None or snapshot is None:
                continue
            for task in table.scan(snapshot_id=snapshot.snapshot_id, selected_fields=_COLUMNS).plan_files():
                path = task.file.file_path
                _add(read_offset_columns(opener_of(table.io, path), path), topic, path, scan, rejected=False)
        rejected_root = f"{root}/{REJECTED_DIR}" if root else REJECTED_DIR
        for path in list_published(fs, rejected_root):
            _add(read_offset_columns(functools.partial(fs.open_input_file, path), path), topic, path, scan,
                 rejected=True)
    except (ClusterError, ConfigurationError, OSError, pa.ArrowException) as exc:
        raise VerifyError(f"cannot read the routed tables of namespace {namespace}: {exc}", cause=exc) from exc
    return scan


def _add(columns: pa.Table | DamagedFile, topic: str, path: str, scan: OutputScan, *, rejected: bool) -> None:
    if isinstance(columns, DamagedFile):
        scan.damaged.append(columns)
    else:
        scan_table(columns, topic, path, scan, rejected=rejected)


def routed_rows_per_partition(target: LakeTarget, topic: str) -> dict[int, int]:
    """Rows of ``topic`` per Kafka partition, summed over every table of the pipeline."""
    from laminar_kafka.cluster.lake.iceberg.records import pipeline_tables
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output

    assert target.iceberg is not None
    fs, root = open_output(target.output)
    catalog = open_catalog(target.iceberg, fs, root)
    counts: dict[int, int] = {}
    for identifier in pipeline_tables(catalog, target.iceberg.namespace, target.pipeline):
        table = load_table_or_none(catalog, identifier)
        if table is None:
            continue
        rows = table.scan(selected_fields=("_topic", "_partition")).to_arrow()
        rows = rows.filter(pc.equal(rows["_topic"].cast(pa.string()), topic))
        for partition, count in zip(*_count(rows), strict=True):
            counts[partition] = counts.get(partition, 0) + count
    return counts


def _count(rows: pa.Table) -> tuple[list[int], list[int]]:
    grouped = rows.group_by("_partition").aggregate([("_partition", "count")])
    return grouped["_partition"].to_pylist(), grouped["_partition_count"].to_pylist()
