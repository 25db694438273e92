"""A Parquet tree for the compaction tests: the sink's files, published and recorded epoch by epoch
as a pipeline does, on the local filesystem (no servers)."""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from laminar_kafka.cluster.lake.parquet.compaction import WORK_DIR, TreeCompaction
from laminar_kafka.cluster.lake.parquet.compaction_plan import CompactionSettings
from laminar_kafka.cluster.lake.parquet.records import write_record
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, final_path, list_published, open_output, publish
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.record import LakeRecord, record_path

__all__ = ["DAY0", "MIB", "TOPIC", "Tree", "work_dirs"]

DAY0 = dt.datetime(2024, 5, 1, 10, 30)
MIB = 1024 * 1024
TOPIC = "orders"


class Tree:
    """A Parquet tree landed by ``nodes`` sinks, epoch by epoch, each epoch published and recorded."""

    def __init__(self, tmp_path: Path, nodes: int = 2, partition_by: str = "day") -> None:
        self.fs, self.root = open_output(str(tmp_path / "out"))
        self.sinks = [ParquetSink(self.root, node_id=n, boot_id="b", filesystem=(self.fs, self.root),
                                  partitioning=PartitionSpec.parse(partition_by)) for n in range(1, nodes + 1)]
        self.offsets: Counter[int] = Counter()
        self.epoch = 0
        self.files: dict[int, tuple[str, ...]] = {}

    def land(self, epochs: int = 1, rows: int = 3, days: int = 1, extra: str | None = None) -> None:
        for _ in range(epochs):
            self.epoch += 1
            staged: list[str] = []
            for sink in self.sinks:
                for partition in (sink.node_id * 2, sink.node_id * 2 + 1):
                    offsets = list(range(self.offsets[partition], self.offsets[partition] + rows))
                    self.offsets[partition] += rows
                    columns = {
                        "_topic": pa.array([TOPIC] * rows).dictionary_encode(),
                        "_partition": pa.array([partition] * rows, pa.int32()),
                        "_offset": pa.array(offsets, pa.int64()),
                        "_timestamp": pa.array([DAY0 + dt.timedelta(days=o % days) for o in offsets], pa.timestamp("ms")),
                        "value": pa.array([f"v{o}".encode() for o in offsets]),
                    }
                    if extra:
                        columns[extra] = pa.array(offsets, pa.int64())
                    sink.write(pa.record_batch(columns))
                staged.extend(sink.seal(self.epoch))
            publish(self.fs, self.root, staged)
            self.files[self.epoch] = tuple(final_path(s) for s in staged)
            write_record(self.fs, self.root, LakeRecord(
                "p", self.epoch, 1, {"kafka": {f"{TOPIC}:{p}": o for p, o in self.offsets.items()}}, {TOPIC: "id"},
                self.files[self.epoch]))

    def keep_records_from(self, epoch: int) -> None:
        """Delete the records of the epochs before ``epoch``, as the pipeline does past RECORDS_KEPT."""
        for old in range(1, epoch):
            Path(self.root, record_path(old)).unlink(missing_ok=True)

    def rows(self) -> Counter[tuple[int, int]]:
        """What pyarrow.dataset reads of the topic (hive partitioning, default ignore prefixes)."""
        table = ds.dataset(f"{self.root}/{TOPIC}", format="parquet", partitioning="hive").to_table(
            columns=["_partition", "_offset"])
        return Counter(zip(table["_partition"].to_pylist(), table["_offset"].to_pylist(), strict=True))

    def expected(self) -> Counter[tuple[int, int]]:
        return Counter((p, o) for p, n in self.offsets.items() for o in range(n))

    def published(self) -> list[str]:
        return [p[len(self.root) + 1:] for p in list_published(self.fs, f"{self.root}/{TOPIC}")]

    def compaction(self, grace: float = 0.0, **kwargs: object) -> TreeCompaction:
        settings = CompactionSettings(target_file_bytes=MIB, grace_s=grace)
        return TreeCompaction(self.root, settings, **kwargs)  # type: ignore[arg-type]


def work_dirs(tree: Tree) -> list[str]:
    base = Path(tree.root, WORK_DIR)
    return sorted(os.listdir(base)) if base.exists() else []
