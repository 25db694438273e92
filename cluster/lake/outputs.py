"""The lake a pipeline publishes into, as the node runtime sees it: the sink it stages an epoch's
rows in, and the lake output it publishes committed epochs into. Two formats implement the lake
output: :class:`~laminar_kafka.cluster.lake.parquet.tree.ParquetTree` (a Hive-style Parquet tree)
and :class:`~laminar_kafka.cluster.lake.iceberg.commit.IcebergOutput` (Apache Iceberg tables).

Both share the sink's staged files and their names (:mod:`laminar_kafka.cluster.lake.staged_names`);
they differ in what publishing a committed epoch means:

- Parquet tree: rename every staged file the manifest lists to its final name (idempotent).
  Readers of the tree see a file once it is renamed.
- Iceberg: the same renames, then one Iceberg commit per table holding every node's files of the
  epoch, recognised by a table property when it is retried. Readers of the table see an epoch once
  that commit lands.

Contract of :meth:`LakeOutput.publish` (called on every node for each committed epoch, by recovery,
and before a generation starts; concurrently on several nodes): idempotent, and when it returns, the
epoch and every earlier epoch whose manifest is still known are visible to readers, and each leaves its
:class:`~laminar_kafka.cluster.lake.record.LakeRecord` (the ``record_of`` it was built with)
atomically with its rows: the lake is the durable truth a node reconciles its control state with
at start (:mod:`laminar_kafka.cluster.lake.reconcile`).

This module names no format at import time: the runtime depends on these protocols only.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from laminar_kafka.cluster.lake.commits import CommitListener, IgnoreCommits
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.reconcile import LakeFacts
from laminar_kafka.cluster.lake.record import LakeRecord, RecordOf, no_records
from laminar_kafka.cluster.lake.settings import IcebergSettings, TableFormat
from laminar_kafka.errors import ConfigurationError

__all__ = ["LakeFactory", "LakeOutput", "ManifestOutputs", "RecordOf", "StagingSink", "open_lake"]

#: manifest E's staged outputs, or None when the manifest is unknown (garbage-collected)
ManifestOutputs = Callable[[int], "tuple[str, ...] | None"]


class StagingSink(Protocol):
    """Where one node writes the rows of the epoch in progress: staged files, sealed at each barrier
    (:class:`~laminar_kafka.cluster.lake.parquet.sink.ParquetSink`, for both formats). Called from
    one thread at a time, in order."""

    def write(self, batch: pa.RecordBatch, rejected: pa.RecordBatch | None = None) -> None:
        """Append ``batch`` (and the ``rejected`` records, if any) to the epoch in progress."""

    def seal(self, epoch: int) -> tuple[str, ...]:
        """Seal everything written since the last seal as epoch ``epoch``'s staged files; returns
        their paths relative to the output root (the ack's outputs)."""

    def discard_unsealed(self) -> int:
        """Drop every row not sealed yet; returns how many files were removed."""

    def new_boot(self, boot_id: str) -> None:
        """Name the next files with ``boot_id`` (after a rejoin); discards unsealed rows first."""

    def recover_staged(self, *, latest_epoch: int, manifest_outputs: ManifestOutputs, live_boots: set[str]) -> None:
        """Settle the staging directory against the committed manifests: publish the sealed files
        of epochs up to ``latest_epoch`` their manifest lists, delete the others, and delete the
        unsealed files of boots not in ``live_boots``."""


class LakeOutput(Protocol):
    """What the runtime publishes a committed epoch into."""

    table_format: TableFormat

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


#: builds the node's lake output with the runtime's collaborators, ``(record_of, commit_listener)``:
#: the record each published epoch leaves (blocking, called from ``publish``), and the listener of each
#: table commit, lost race and no-op (a format without tables never calls it)
LakeFactory = Callable[[RecordOf, CommitListener], LakeOutput]


def open_lake(
    table_format: TableFormat,
    fs: pafs.FileSystem,
    root: str,
    *,
    output_uri: str,
    pipeline: str,
    partitioning: PartitionSpec,
    iceberg: IcebergSettings | None = None,
    record_of: RecordOf = no_records,
    commit_listener: CommitListener | None = None,
) -> LakeOutput:
    """The lake of ``table_format`` over the sink's ``fs`` and ``root``; ``iceberg`` is the
    :class:`~laminar_kafka.cluster.lake.settings.IcebergSettings` of the Iceberg format. Without
    ``record_of`` the lake writes no records (tools that only read it); without
    ``commit_listener`` nobody hears its commits."""
    listener = commit_listener if commit_listener is not None else IgnoreCommits()
    if table_format is TableFormat.PARQUET:
        from laminar_kafka.cluster.lake.parquet.tree import ParquetTree

        return ParquetTree(fs, root, record_of=record_of)
    from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput  # pyiceberg loads only for Iceberg pipelines

    if iceberg is None:
        raise ConfigurationError("an Iceberg lake needs its catalog settings (iceberg)")
    return IcebergOutput(iceberg, partitioning, pipeline, output_uri, fs, root, record_of=record_of,
                         commit_listener=listener)
