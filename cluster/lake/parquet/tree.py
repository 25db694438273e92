"""The Parquet tree as a lake output: publishing is the idempotent rename of the listed staged files,
then each epoch's record (:mod:`laminar_kafka.cluster.lake.parquet.records`)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.lake.parquet.records import drop_records_after, read_parquet_facts, write_record
from laminar_kafka.cluster.lake.parquet.sink import publish
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import LakeRecord, RecordOf, no_records
from laminar_kafka.cluster.lake.settings import TableFormat

__all__ = ["ParquetTree", "parquet_tree"]

#: manifest E's staged outputs, or None when it is unknown (as :data:`laminar_kafka.cluster.lake.outputs.ManifestOutputs`)
ManifestOutputs = Callable[[int], "tuple[str, ...] | None"]


class ParquetTree:
    """The Parquet directory at ``root`` of ``fs`` (a :class:`~laminar_kafka.cluster.lake.outputs.LakeOutput`).
    ``record_of``: the record each published epoch leaves (the default: none, for tools that only
    read the tree). A tree has no tables: no commit listener."""

    table_format = TableFormat.PARQUET

    def __init__(self, fs: pafs.FileSystem, root: str, *, record_of: RecordOf = no_records) -> None:
        self.fs, self.root = fs, root
        self._record_of = record_of
        #: records up to this epoch are known to be written (a cache: each publish checks from here)
        self._recorded_through = 0

    def check(self, topics: Sequence[str], schema: pa.Schema | None) -> None:
        """Nothing to check beyond the sink's writable output."""

    def publish(self, epoch: int, staged: tuple[str, ...], manifest_outputs: ManifestOutputs,
                oldest_epoch: int, *, tables_through: int | None = None) -> int:
        """(No tables: ``tables_through`` changes nothing.) Earlier epochs' files were published by
        their own call or by the sink's recovery. Records are written in order for each epoch from
        ``oldest_epoch`` on whose manifest is known, once its files are published (an epoch a crash
        left unrecorded is recorded by the next publish)."""
        publish(self.fs, self.root, staged)
        for e in range(max(oldest_epoch, self._recorded_through + 1, 1), epoch + 1):
            record = self._record_of(e)
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


def parquet_tree(fs: pafs.FileSystem, root: str) -> Callable[[RecordOf, CommitListener], ParquetTree]:
    """The :data:`~laminar_kafka.cluster.lake.outputs.LakeFactory` of the tree at ``root`` of ``fs``
    (a tree has no tables: the commit listener is never called)."""

    def build(record_of: RecordOf, commit_listener: CommitListener) -> ParquetTree:
        return ParquetTree(fs, root, record_of=record_of)

    return build
