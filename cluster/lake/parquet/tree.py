"""The Parquet tree as a lake output: publishing is the idempotent rename of the listed staged files,
then each epoch's record (:mod:`laminar_kafka.cluster.lake.parquet.records`)."""
from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.lake.parquet.records import drop_records_after, read_parquet_facts, write_record
from laminar_kafka.cluster.lake.parquet.sink import list_published, publish
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import LakeRecord, RecordOf, no_records
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.cluster.lake.staged_names import REJECTED_DIR

logger = logging.getLogger(__name__)

__all__ = ["ParquetTree", "drop_files_after", "parquet_tree"]

#: a published file's name (rows or rejected records) and its epoch
_PUBLISHED_NAME = re.compile(r"epoch-([0-9]{10,19})\.node-[0-9]+\.")

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
        """Delete the files and records of the epochs the lake lost (after ``shown_epoch``), then
        write the seed's: the tree's latest whole epoch is then the seed's. A lost epoch's files may
        have been published without its record (its nodes stopped between the renames and the
        record): the seed's cursors read those rows again, so the files go."""
        dropped = drop_files_after(self.fs, self.root, shown_epoch)
        if dropped:
            logger.warning("deleted %d published file(s) of epochs after %d that the lake holds no record of "
                           "(their rows are read again from the seed)", dropped, shown_epoch)
        drop_records_after(self.fs, self.root, shown_epoch, seed.epoch)
        write_record(self.fs, self.root, seed)
        self._recorded_through = seed.epoch


def drop_files_after(fs: pafs.FileSystem, root: str, epoch: int) -> int:
    """Delete every published file (rows and ``_rejected/``) of an epoch after ``epoch``; returns how
    many. Staged files are the sink's recovery's."""
    paths = list_published(fs, root)
    rejected = f"{root}/{REJECTED_DIR}" if root else REJECTED_DIR
    paths += [info.path for info in fs.get_file_info(pafs.FileSelector(rejected, allow_not_found=True))
              if info.type == pafs.FileType.File]
    dropped = 0
    for path in paths:
        match = _PUBLISHED_NAME.match(posixpath.basename(path))
        if match and int(match.group(1)) > epoch:
            fs.delete_file(path)
            dropped += 1
    return dropped


def parquet_tree(fs: pafs.FileSystem, root: str) -> Callable[[RecordOf, CommitListener], ParquetTree]:
    """The :data:`~laminar_kafka.cluster.lake.outputs.LakeFactory` of the tree at ``root`` of ``fs``
    (a tree has no tables: the commit listener is never called)."""

    def build(record_of: RecordOf, commit_listener: CommitListener) -> ParquetTree:
        return ParquetTree(fs, root, record_of=record_of)

    return build
