"""A local lake for the Iceberg tests: staged Parquet files in a topic/day layout, manifests per
epoch, and an :class:`IcebergOutput` on an embedded SQLite catalog under ``tmp_path``."""
from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.lake.iceberg.commit import IcebergOutput
from laminar_kafka.cluster.lake.iceberg.retries import RetryPolicy
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.record import RecordOf, no_records
from laminar_kafka.cluster.lake.settings import IcebergSettings

STAGING = "_staging/"
DAY_1 = dt.datetime(2026, 1, 1, 3, 0)
DAY_2 = dt.datetime(2026, 1, 2, 5, 0)
DAY = PartitionSpec.parse("day")
FAST_RETRY = RetryPolicy(attempts=20, deadline_s=20.0, base_delay_s=0.001, max_delay_s=0.05)


def layout_final_path(staged: str) -> str:
    """The test layout: ``_staging/<topic>/dt=<day>/<name>`` publishes to ``<topic>/dt=<day>/<name>``."""
    if not staged.startswith(STAGING):
        raise SinkError(f"{staged!r} is not staged")
    return staged[len(STAGING):]


def layout_publish(fs: pafs.FileSystem, root: str, staged: Iterable[str]) -> int:
    """Idempotent publish by rename, like :func:`laminar_kafka.cluster.lake.parquet.sink.publish`, in the test layout."""
    renamed = 0
    for relative in staged:
        source, target = f"{root}/{relative}", f"{root}/{layout_final_path(relative)}"
        if fs.get_file_info(source).type == pafs.FileType.File:
            fs.create_dir(posixpath.dirname(target), recursive=True)
            fs.move(source, target)
            renamed += 1
        elif fs.get_file_info(target).type != pafs.FileType.File:
            raise SinkError(f"{relative} is neither staged nor published")
    return renamed


def rows(topic: str, partition: int, offsets: Iterable[int], when: dt.datetime | None = DAY_1,
         **extra: pa.Array) -> pa.Table:
    """Rows as the sink writes them: dictionary ``_topic``, ``_partition``, ``_offset``, ``_timestamp``."""
    offsets = list(offsets)
    count = len(offsets)
    columns: dict[str, pa.Array] = {
        "_topic": pa.array([topic] * count).dictionary_encode(),
        "_partition": pa.array([partition] * count, pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array([when] * count, pa.timestamp("ms")),
        "value": pa.array([b"v%d" % o for o in offsets], pa.binary()),
    }
    columns.update(extra)
    return pa.table(columns)


class Lake:
    """An output root with staged files, manifests and Iceberg outputs (one per simulated node)."""

    def __init__(self, tmp_path: Path, *, pipeline: str = "pipe",
                 partitioning: PartitionSpec = DAY,
                 settings: IcebergSettings | None = None) -> None:
        self.root = str(tmp_path / "out")
        self.fs = pafs.LocalFileSystem()
        self.fs.create_dir(self.root, recursive=True)
        self.pipeline = pipeline
        self.partitioning = partitioning
        self.settings = settings or IcebergSettings(namespace=pipeline)
        self.manifests: dict[int, tuple[str, ...]] = {}
        self._seq = 0

    def output(self, *, record_of: RecordOf = no_records, commit_listener: CommitListener | None = None) -> IcebergOutput:
        return IcebergOutput(
            self.settings, self.partitioning, self.pipeline, self.root, self.fs, self.root,
            final_path_of=layout_final_path, publish_files=layout_publish, retry=FAST_RETRY,
            record_of=record_of, commit_listener=commit_listener,
        )

    def stage(self, epoch: int, table: pa.Table, *, topic: str = "orders", node: int = 1,
              directory: str | None = None) -> str:
        """Write ``table`` as a staged file of ``epoch`` and list it in manifest ``epoch``."""
        self._seq += 1
        if directory is None:
            first = table.column("_timestamp")[0].as_py() if table.num_rows else None
            directory = f"{topic}/dt={first:%Y-%m-%d}" if first else f"{topic}/dt=__HIVE_DEFAULT_PARTITION__"
        relative = f"{STAGING}{directory}/epoch-{epoch:010d}.node-{node}.boot-b.seq-{self._seq:08d}.parquet"
        self.fs.create_dir(posixpath.dirname(f"{self.root}/{relative}"), recursive=True)
        pq.write_table(table, f"{self.root}/{relative}")
        self.manifests[epoch] = self.manifests.get(epoch, ()) + (relative,)
        return relative

    def manifest_outputs(self, epoch: int) -> tuple[str, ...] | None:
        return self.manifests.get(epoch)

    def publish(self, output: IcebergOutput, epoch: int, oldest_epoch: int = 1) -> int:
        return output.publish(epoch, self.manifests.get(epoch, ()), self.manifest_outputs, oldest_epoch)


def offsets_of(table: pa.Table) -> list[tuple[str, int, int]]:
    """Sorted ``(topic, partition, offset)`` triples of a table with those columns."""
    data = table.select(["_topic", "_partition", "_offset"]).to_pylist()
    return sorted((str(r["_topic"]), r["_partition"], r["_offset"]) for r in data)
