"""An Iceberg table's partitioning: the spec of ``partition-by``, the check of an existing table's,
and the data files of published Parquet files with their partition values.

- :func:`partition_spec_of`: the Iceberg spec of a pipeline's
  :class:`~laminar_kafka.cluster.lake.partition_spec.PartitionSpec` (the same transforms, fields named
  as Iceberg names them by default: ``customer_id_bucket``, ``_timestamp_day``...).
- :func:`check_partitioning`: an existing table must be partitioned by exactly that spec (its
  current spec), else a :class:`ConfigurationError` naming the table, both specs and the setting to change.
  The spec is pinned with the pipeline, so a node never evolves it; evolving a live table's spec is
  the operator's (Iceberg keeps old files under their spec), and then ``partition-by`` must say the
  new one.
- :func:`data_files`: pyiceberg's ``add_files`` infers a file's partition from its column statistics,
  which cannot give a bucket (not order-preserving) nor an identity of a long string (statistics are
  truncated). Every file the sink writes holds the rows of one partition (it splits rows by the
  same transforms), so the partition is read from the file's first row instead, through pyiceberg's
  own scalar transforms: the record Iceberg readers prune by is right by construction.

Reads files (one footer, and the first row of the partition columns, per file); no catalog calls.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    # private in pyiceberg 0.12 (pinned <0.13): the check its add_files makes of a file's schema
    # against the table's, which data_files makes the same way; no public function does it
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    TruncateTransform,
)
from pyiceberg.transforms import (
    Transform as IcebergTransform,
)
from pyiceberg.typedef import Record

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec as LakePartitionSpec
from laminar_kafka.cluster.lake.partition_spec import PartitionTerm, Transform
from laminar_kafka.errors import ConfigurationError

__all__ = ["append_data_files", "check_partitioning", "data_files", "partition_spec_of"]

#: Iceberg's first partition field id
_FIRST_FIELD_ID = 1000


def _iceberg_transform(term: PartitionTerm) -> IcebergTransform[Any, Any]:
    if term.transform is Transform.IDENTITY:
        return IdentityTransform()
    if term.transform is Transform.DAY:
        return DayTransform()
    if term.transform is Transform.HOUR:
        return HourTransform()
    assert term.parameter is not None  # PartitionTerm checks it
    if term.transform is Transform.BUCKET:
        return BucketTransform(term.parameter)
    return TruncateTransform(term.parameter)


def partition_spec_of(spec: LakePartitionSpec, schema: Schema) -> PartitionSpec:
    """The Iceberg spec of ``spec`` over ``schema``. Raises :class:`ConfigurationError` when the schema lacks
    a term's column or holds it with a type the transform does not take."""
    if not spec.terms:
        return UNPARTITIONED_PARTITION_SPEC
    fields = []
    for offset, term in enumerate(spec.terms):
        try:
            source = schema.find_field(term.source)
        except ValueError:
            raise ConfigurationError(f"partition-by {term.text} needs a {term.source} column") from None
        transform = _iceberg_transform(term)
        if not transform.can_transform(source.field_type):
            raise ConfigurationError(f"partition-by {term.text}: {term.source} is {source.field_type}, which "
                              f"{term.transform.value} does not take")
        fields.append(PartitionField(source_id=source.field_id, field_id=_FIRST_FIELD_ID + offset,
                                     transform=transform, name=term.name))
    return PartitionSpec(*fields)


def check_partitioning(table: Table, spec: LakePartitionSpec) -> None:
    """Raise :class:`ConfigurationError` (naming the table, both specs and the setting ``partition-by``, the
    one to change) unless the table's current spec is exactly ``spec``'s transforms of the same
    columns, in order."""
    name = ".".join(table.name())
    current = table.spec()
    schema = table.schema()
    have = [_describe(field, schema) for field in current.fields]
    want = [_term_description(term) for term in spec.terms]
    if have != want:
        raise ConfigurationError(
            f"iceberg table {name} is partitioned by {', '.join(have) or 'nothing'}, but setting "
            f"partition-by is {spec.text} here ({', '.join(want) or 'unpartitioned'})"
        )


def _describe(field: PartitionField, schema: Schema) -> str:
    try:
        source = schema.find_column_name(field.source_id) or f"#{field.source_id}"
    except ValueError:
        source = f"#{field.source_id}"
    return f"{field.transform}({source})"


def _term_description(term: PartitionTerm) -> str:
    return f"{_iceberg_transform(term)}({term.source})"


def data_files(io: FileIO, metadata: TableMetadata, paths: Iterable[str]) -> list[DataFile]:
    """The data files of the Parquet files at ``paths`` (absolute, as ``io`` reads them) for a table
    of ``metadata``, each with its statistics and its partition read from its first row. Raises
    :class:`SinkError` naming a file whose schema the table cannot take or whose rows hold no value
    for a partition column; ``ValueError`` from pyiceberg's schema check is left to the caller."""
    schema = metadata.schema()
    spec = metadata.spec()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)
    result = []
    for path in paths:
        input_file = io.new_input(path)
        with input_file.open() as stream:
            parquet_file = pq.ParquetFile(stream)
            parquet_metadata = parquet_file.metadata
            _check_pyarrow_schema_compatible(schema, parquet_metadata.schema.to_arrow_schema(),
                                             format_version=metadata.format_version)
            partition = _partition_of(parquet_file, spec, schema, path) if spec.fields else Record()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet_metadata, stats_columns=plan, parquet_column_mapping=mapping,
        )
        result.append(DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition,
            file_size_in_bytes=len(input_file),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        ))
    return result


def append_data_files(transaction: Transaction, paths: list[str], summary: dict[str, str]) -> None:
    """Append the Parquet files at ``paths`` as data files in ``transaction``, each with the partition
    of its rows (:func:`data_files`), as pyiceberg's ``add_files`` would otherwise: the name mapping
    set first (our files carry no field ids), then one fast append with the snapshot ``summary``."""
    if transaction.table_metadata.name_mapping() is None:
        schema = transaction.table_metadata.schema()
        transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: schema.name_mapping.model_dump_json()})
    files = data_files(transaction._table.io, transaction.table_metadata, paths)
    with transaction.update_snapshot(snapshot_properties=summary).fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


def _partition_of(parquet_file: pq.ParquetFile, spec: PartitionSpec, schema: Schema, path: str) -> Record:
    """The partition of a file whose rows share one: its first row's values, transformed."""
    names = {field.source_id: schema.find_column_name(field.source_id) for field in spec.fields}
    columns = sorted({name for name in names.values() if name is not None})
    first = next(parquet_file.iter_batches(batch_size=1, columns=columns), None)
    if first is None or first.num_rows == 0:
        raise SinkError(f"file {path} holds no rows to read its partition from")
    values = []
    for field in spec.fields:
        name = names[field.source_id]
        if name is None or name not in first.schema.names:
            raise SinkError(f"file {path} has no column for partition field {field.name}")
        raw = _physical(first.column(name))
        if raw is None and not field.name.startswith("_timestamp"):
            raise SinkError(f"file {path}: the first row's {name} is null (partition field {field.name})")
        source_type = schema.find_field(field.source_id).field_type
        value = partition_record_value(field, raw, schema)
        values.append(None if value is None else field.transform.transform(source_type)(value))
    return Record(*values)


def _physical(column: pa.Array) -> Any:
    """The first value of ``column`` as Iceberg stores it: timestamps in microseconds, dates in
    days since the epoch, everything else as Python."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    head = column.slice(0, 1)
    if head.null_count:
        return None
    if pa.types.is_timestamp(head.type):
        return head.cast(pa.timestamp("us"), safe=False).view(pa.int64())[0].as_py()
    if pa.types.is_date(head.type):
        return head.cast(pa.date32()).view(pa.int32())[0].as_py()
    return head[0].as_py()
