"""The sink routing rows by a table-template: one directory per table, the unroutable rows in the
rejected stream with their reason (or the write refused under on-bad-record=fail), and verify
summing the tables of a Parquet tree (local filesystem, no servers)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, ParquetSink, list_published, open_output, publish
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.routing import Router
from laminar_kafka.cluster.lake.routing_template import TableTemplate
from laminar_kafka.cluster.ops.verify import audit, read_output
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA


def rows(regions: list[str | None], first: int = 0) -> pa.RecordBatch:
    offsets = list(range(first, first + len(regions)))
    return pa.record_batch({
        "_topic": pa.array(["t"] * len(regions)).dictionary_encode(),
        "_partition": pa.array([0] * len(regions), pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array([1_700_000_000_000] * len(regions), pa.timestamp("ms")),
        "region": pa.array(regions, pa.string()),
    })


def sink(tmp_path: Path, *, fail: bool = False) -> ParquetSink:
    fs, root = open_output(str(tmp_path / "out"))
    return ParquetSink(root, node_id=1, boot_id="b", filesystem=(fs, root), partitioning=PartitionSpec.parse("none"),
                       router=Router(TableTemplate.parse("ev_{field:region}"), fail_on_bad=fail))


def test_each_table_its_directory_and_the_unroutable_rows_rejected(tmp_path: Path) -> None:
    writer = sink(tmp_path)
    bad_json = pa.RecordBatch.from_pylist([{"_topic": "t", "_partition": 0, "_offset": 4, "_timestamp": None,
                                            "_key": None, "value": b"{", "error": "bad json"}], schema=REJECTED_SCHEMA)
    writer.write(rows(["eu", "us", None, "eu"]), bad_json)
    writer.write(rows(["e/u", "us"], first=5))
    staged = writer.seal(1)
    publish(writer.fs, writer.root, staged)
    published = sorted(p.removeprefix(writer.root + "/") for p in list_published(writer.fs, writer.root))
    assert [p.split("/")[0] for p in published] == ["ev_eu", "ev_us"]
    rejected = pq.read_table(list_published(writer.fs, f"{writer.root}/{REJECTED_DIR}")[0])
    assert rejected["_offset"].to_pylist() == [2, 4, 5]
    assert rejected["error"].to_pylist()[:2] == ["table-template: field region is null", "bad json"]
    scan = read_output(writer.fs, writer.root, "t")
    report = audit("t", {0: np.arange(7, dtype=np.int64)}, {0: 7}, scan, {0: 0})
    assert report.ok and report.rows == 4 and report.rejected == 3


def test_fail_refuses_the_write_naming_the_record(tmp_path: Path) -> None:
    writer = sink(tmp_path, fail=True)
    with pytest.raises(SinkError, match=r"^record t:0@1 cannot be routed: table-template: field region is null"):
        writer.write(rows(["eu", None]))
    assert writer.seal(1) == ()  # nothing of the call was written
