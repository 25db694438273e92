"""The lake a pipeline publishes into: a Hive-style Parquet tree, or Apache Iceberg tables.

Both share the sink's staged files and its file layout (:mod:`laminar_kafka.cluster.lake.settings`); they differ in
what publishing a committed epoch means:

- :class:`ParquetTree`: rename every staged file the manifest lists to its final name (idempotent).
  Readers of the tree see a file once it is renamed.
- :class:`laminar_kafka.cluster.lake.iceberg.commit.IcebergOutput`: the same renames, then one Iceberg commit per table
  holding every node's files of the epoch, recognised by a table property when it is retried.
  Readers of the table see an epoch once that commit lands.

Contract of :meth:`LakeOutput.publish` (called on every node for each committed epoch, by recovery,
and before a generation starts; concurrently on several nodes): idempotent, and when it returns, the
epoch and every earlier epoch whose manifest is still known are visible to readers, and each leaves its
:class:`~laminar_kafka.cluster.lake.record.LakeRecord` (``record_of``) atomically with its rows: the lake is the
durable truth a node reconciles its control state with at start (:mod:`laminar_kafka.cluster.lake.reconcile`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.lake.commits import CommitListener, IgnoreCommits
from laminar_kafka.cluster.lake.parquet.records import drop_records_after, read_parquet_facts, write_record
from laminar_kafka.cluster.lake.parquet.sink import publish
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import LakeRecord, RecordOf, no_records
from laminar_kafka.cluster.lake.settings import TableFormat

__all__ = ["LakeOutput", "ManifestOutputs", "RecordOf", "ParquetTree", "open_lake"]

#: manifest E's staged outputs, or None when the manifest is unknown (garbage-collected)
ManifestOutputs = Callable[[int], "tuple[str, ...] | None"]


class LakeOutput(Protocol):
    """What the runtime publishes a committed epoch into."""

    table_format: TableFormat
    #: the record each published epoch leaves (set by the runtime; blocking, called from publish)
    record_of: RecordOf
    #: hears each table commit, lost race and no-op (set by the runtime; a format without tables never calls it)
    commit_listener: CommitListener

    def check(self, topics: Sequence[str], schema: pa.Schema | None) -> None:
        """At start: raise a ``UsageError`` subclass (one line) when the output cannot take
        ``topics``' records of ``schema`` (None: not known yet). May create empty tables."""

    def publish(self, epoch: int, staged: tuple[str, ...], manifest_outputs: ManifestOutputs,
                oldest_epoch: int, *, tables_through: int | None = None) -> int:
        """Make committed epoch ``epoch`` (its manifest lists ``staged``) visible to readers, and
        every earlier epoch from ``oldest_epoch`` on that is not yet. Idempotent. Returns how many
        table commits this call made (0 for a format without tables). ``tables_through``: commit
        the tables only up to this epoch (another node's turn for the later ones, see
        :func:`laminar_kafka.cluster.lake.commits.committer_of`); None: up to ``epoch``."""

    def read_facts(self, pipeline: str, topics: Sequence[str]) -> LakeFacts:
        """What the lake shows of ``pipeline`` for ``topics`` (blocking; CodecError naming the object
        when a record does not decode)."""

    def seal(self, seed: LakeRecord, shown_epoch: int) -> None:
        """After the control state was reseeded with ``seed``: make the lake agree, so the next start
        finds them consistent (idempotent). ``shown_epoch``: the epoch the lake showed (its facts);
        records of later epochs are the lake's lost ones."""


class ParquetTree:
    """The Parquet directory: publishing is the idempotent rename of the listed staged files."""

    table_format = TableFormat.PARQUET

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs, self.root = fs, root
        self.record_of: RecordOf = no_records
        self.commit_listener: CommitListener = IgnoreCommits()  # no tables, nothing to hear
        #: records up to this epoch are known to be written (a cache: each publish checks from here)
        self._recorded_through = 0

    def check(self, topics: Sequence[str], schema: pa.Schema | None) -> None:
        """Nothing to check beyond the sink's writable output."""

    def publish(self, epoch: int, staged: tuple[str, ...], manifest_outputs: ManifestOutputs,
                oldest_epoch: int, *, tables_through: int | None = None) -> int:
        """(No tables: ``tables_through`` changes nothing.) Earlier epochs' files were published by their own call or by the sink's recovery. Records
        are written in order for each epoch from ``oldest_epoch`` on whose manifest is known, once its
        files are published (an epoch a crash left unrecorded is recorded by the next publish)."""
        publish(self.fs, self.root, staged)
        for e in range(max(oldest_epoch, self._recorded_through + 1, 1), epoch + 1):
            record = self.record_of(e)
            if record is not None:
                write_record(self.fs, self.root, record)
                self._recorded_through = e
        return 0

    def read_facts(self, pipeline: str, topics: Sequence[str]) -> LakeFacts:
        return read_parquet_facts(self.fs, self.root, pipeline, topics)

    def seal(self, seed: LakeRecord, shown_epoch: int) -> None:
        """Delete the records of the epochs the lake lost (after ``shown_epoch``), then write the
        seed's: the tree's latest whole epoch is then the seed's."""
        drop_records_after(self.fs, self.root, shown_epoch, seed.epoch)
        write_record(self.fs, self.root, seed)
        self._recorded_through = seed.epoch


def open_lake(
    table_format: TableFormat,
    fs: pafs.FileSystem,
    root: str,
    *,
    output_uri: str,
    pipeline: str,
    partitioning: PartitionSpec,
    iceberg: object | None = None,
) -> LakeOutput:
    """The lake of ``table_format`` over the sink's ``fs`` and ``root``; ``iceberg`` is the
    :class:`~laminar_kafka.cluster.lake.settings.IcebergSettings` of the Iceberg format."""
    if table_format is TableFormat.PARQUET:
        return ParquetTree(fs, root)
    from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput  # pyiceberg loads only for Iceberg pipelines
    from laminar_kafka.cluster.lake.settings import IcebergSettings

    assert isinstance(iceberg, IcebergSettings)
    return IcebergOutput(iceberg, partitioning, pipeline, output_uri, fs, root)
