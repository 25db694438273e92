"""The sink's rejected stream (the dead-letter output), schema-change rotation, and verify's
accounting of rejected records (local filesystem, no servers)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.lake.parquet.sink import (
    REJECTED_DIR,
    STAGING_DIR,
    OutputStream,
    ParquetSink,
    StagedName,
    final_path,
    list_published,
    open_output,
    parse_staged,
    publish,
    recover,
)
from laminar_kafka.cluster.lake.parquet.tree import parquet_tree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.ops.verify import OutputScan, audit, read_output
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions
from laminar_kafka.connector.protocol import ConnectorConfig, SourceBatch
from laminar_kafka.coordinator.base import EpochOpened
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA
from tests.unit.cluster.fakes import FakeCoordinator, wait_for
from tests.unit.cluster.runtime.test_runtime import TOPOLOGY, FakeSource

TOPIC = "t"


def rows(partition: int, offsets: list[int], extra: str | None = None) -> pa.RecordBatch:
    columns = {
        "id": pa.array(offsets, pa.int64()),
        "_topic": pa.array([TOPIC] * len(offsets)),
        "_partition": pa.array([partition] * len(offsets), pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "_timestamp": pa.array([1_700_000_000_000] * len(offsets), pa.timestamp("ms")),
    }
    if extra is not None:
        columns[extra] = pa.array([f"{extra}{o}" for o in offsets])
    return pa.record_batch(columns)


def rejected(partition: int, offsets: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([
        {"_topic": TOPIC, "_partition": partition, "_offset": o, "_timestamp": None, "_key": None,
         "value": b"{bad %d" % o, "error": "JSON parse error"}
        for o in offsets
    ], schema=REJECTED_SCHEMA)


def files_under(directory: str | Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*") if p.is_file())


def sink_at(root: str, fs: object, boot: str = "b00t", node: int = 3, **kwargs: object) -> ParquetSink:
    return ParquetSink(root, node_id=node, boot_id=boot, filesystem=(fs, root), **kwargs)  # type: ignore[arg-type]


def offsets_in(files: list[str]) -> list[int]:
    return sorted(o for f in files for o in pq.read_table(f)["_offset"].to_pylist())


@given(
    epoch=st.integers(0, 10**10 - 1), node=st.integers(1, 10**6), seq=st.integers(1, 10**8 - 1),
    boot=st.from_regex(r"[A-Za-z0-9-]{1,36}", fullmatch=True), stream=st.sampled_from(OutputStream),
)
def test_staged_names_of_both_streams_round_trip(epoch: int, node: int, seq: int, boot: str, stream: OutputStream) -> None:
    name = StagedName(epoch, node, boot, seq, stream)
    assert parse_staged(name.staged_path()) == name
    if epoch:
        published = final_path(name.staged_path())
        assert published.startswith(f"{REJECTED_DIR}/") == (stream is OutputStream.REJECTED)
        assert published.endswith(f"epoch-{epoch:010d}.node-{node}.boot-{boot}.seq-{seq:08d}.parquet")


def test_rejected_records_are_sealed_with_the_rows_and_published_under_rejected(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    sink = sink_at(root, fs)
    sink.write(rows(0, [0, 1, 3]), rejected(0, [2]))
    sink.write(rows(0, [4]), None)
    sink.write(rows(0, [])[:0], rejected(0, [5, 6]))  # a poll of only bad records
    staged = sink.seal(1)
    assert sorted(Path(s).name for s in staged) == [
        "epoch-0000000001.node-3.boot-b00t.seq-00000001.parquet",
        "rejected.epoch-0000000001.node-3.boot-b00t.seq-00000002.parquet",
    ]
    assert publish(fs, root, staged) == 2
    assert publish(fs, root, staged) == 0  # idempotent
    assert offsets_in(list_published(fs, root)) == [0, 1, 3, 4]  # readers of the rows never see _rejected/
    dead_letter = list_published(fs, f"{root}/{REJECTED_DIR}")
    table = pq.read_table(dead_letter[0])
    assert table.schema.equals(REJECTED_SCHEMA, check_metadata=False)
    assert table["_offset"].to_pylist() == [2, 5, 6] and table["value"].to_pylist()[0] == b"{bad 2"
    assert (sink.rows_written, sink.rejected_written) == (4, 3)


def test_a_node_killed_between_staging_and_publishing_neither_loses_nor_duplicates_rejected_rows(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    dead = sink_at(root, fs, boot="dead")
    dead.write(rows(0, [0, 2]), rejected(0, [1]))
    committed = dead.seal(1)  # acked; epoch 1 commits with it, then the node dies before publishing
    dead.write(rows(0, [3]), rejected(0, [4]))
    dropped = dead.seal(2)  # acked; epoch 2 committed without it (a rejected ack)
    dead.write(rows(0, [5]), rejected(0, [6]))
    dead.flush()  # open files of the dead boot
    manifests = {1: committed, 2: ()}
    for _ in range(2):  # every node recovers the same directory; the second pass changes nothing
        recover(fs, root, latest_epoch=2, manifest_outputs=manifests.get, live_boots={"restarted"})
    assert offsets_in(list_published(fs, root)) == [0, 2]
    assert offsets_in(list_published(fs, f"{root}/{REJECTED_DIR}")) == [1]
    assert files_under(Path(root) / STAGING_DIR) == []
    assert len(dropped) == 2
    scan = read_output(fs, root, TOPIC)
    report = audit(TOPIC, {0: np.arange(3)}, {0: 3}, scan)
    assert report.ok and report.rejected == 1 and report.partitions[0].present == 2


def test_discard_unsealed_drops_open_rejected_files_too(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    sink = sink_at(root, fs, row_group_rows=1)
    sink.write(rows(0, [0]), rejected(0, [1]))
    assert sink.discard_unsealed() == 2
    assert sink.seal(1) == ()
    assert files_under(Path(root) / STAGING_DIR) == []


def test_a_schema_change_starts_a_new_file_and_a_change_back_goes_to_the_first(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    sink = sink_at(root, fs, row_group_rows=2)
    sink.write(rows(0, [0, 1]))  # flushed: the open file has the first schema
    sink.write(rows(0, [2], extra="note"))  # buffered with the evolved schema
    sink.write(rows(0, [3], extra="note"))  # flushed into a second file
    sink.write(rows(0, [4]))  # buffered, then at seal a second row group of the first file
    staged = sink.seal(1)
    assert len(staged) == 2 and all(parse_staged(s).epoch == 1 for s in staged)  # type: ignore[union-attr]
    publish(fs, root, staged)
    files = list_published(fs, root)
    schemas = [pq.read_schema(f).names for f in files]
    assert schemas == [["id", "_topic", "_partition", "_offset", "_timestamp"],
                       ["id", "_topic", "_partition", "_offset", "_timestamp", "note"]]
    assert pq.read_table(files[0])["_offset"].to_pylist() == [0, 1, 4]
    assert pq.read_table(files[1])["note"].to_pylist() == ["note2", "note3"]


def test_a_schema_change_inside_the_buffer_keeps_each_batch_with_its_schema(tmp_path: Path) -> None:
    fs, root = open_output(str(tmp_path / "out"))
    sink = sink_at(root, fs)  # large row groups: both batches are still buffered at the change
    sink.write(rows(0, [0]))
    sink.write(rows(0, [1], extra="note"))
    staged = sink.seal(1)
    assert len(staged) == 2
    publish(fs, root, staged)
    assert [pq.read_table(f).num_columns for f in list_published(fs, root)] == [5, 6]


def scan_of(good: dict[int, list[int]], bad: dict[int, list[int]]) -> OutputScan:
    return OutputScan(
        offsets={p: np.array(o, np.int64) for p, o in good.items()},
        rejected={p: np.array(o, np.int64) for p, o in bad.items()}, files=1,
    )


def test_rejected_offsets_are_accounted_for_not_missing() -> None:
    report = audit(TOPIC, {0: np.arange(6), 1: np.arange(2)}, {0: 6, 1: 2}, scan_of({0: [0, 2, 3, 5], 1: [0]}, {0: [1, 4]}))
    p0, p1 = report.partitions
    assert (p0.expected, p0.present, p0.rejected, p0.missing, p0.duplicated) == (6, 4, 2, 0, 0)
    assert p1.missing == 1 and not report.ok
    assert report.to_json()["rejected"] == 2 and "rejected" in report.table().splitlines()[0]


def test_an_offset_in_both_outputs_or_twice_rejected_is_a_duplicate() -> None:
    both = audit(TOPIC, {0: np.arange(3)}, {0: 3}, scan_of({0: [0, 1, 2]}, {0: [1]}))
    assert both.partitions[0].duplicated == 1 and not both.ok
    twice = audit(TOPIC, {0: np.arange(3)}, {0: 3}, scan_of({0: [0, 2]}, {0: [1, 1]}))
    assert twice.partitions[0].duplicated == 1 and not twice.ok


def test_a_rejected_offset_the_topic_does_not_hold_is_unexpected() -> None:
    report = audit(TOPIC, {0: np.array([0, 2])}, {0: 3}, scan_of({0: [0, 2]}, {0: [1]}))
    assert report.partitions[0].unexpected == 1 and not report.ok


class _SourceWithBadRecords(FakeSource):
    """Every offset divisible by 3 is a record that did not decode (skipped into ``rejected``)."""

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        batch = await super().poll_batch(max_records)
        assert batch is not None
        is_bad = pa.array(batch.records["_offset"].to_numpy() % 3 == 0)
        skipped = batch.records.filter(is_bad)
        dead_letter = pa.RecordBatch.from_pylist([
            {"_topic": TOPIC, "_partition": p, "_offset": o, "_timestamp": None, "_key": None, "value": b"?", "error": "bad"}
            for p, o in zip(skipped["_partition"].to_pylist(), skipped["_offset"].to_pylist(), strict=True)
        ], schema=REJECTED_SCHEMA)
        return SourceBatch(batch.records.filter(pc.invert(is_bad)), batch.checkpoint, dead_letter)


async def test_the_runtime_publishes_rejected_records_with_the_epoch_and_counts_them(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    FakeSource.generations = []
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    runtime = NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), _SourceWithBadRecords,
                          lambda: TOPOLOGY, options)
    task = asyncio.create_task(runtime.run())
    try:
        await wait_for(lambda: runtime.rows_written >= 50)
        coordinator.emit(EpochOpened(1, 1))
        await wait_for(lambda: coordinator.acks)
        ack = coordinator.acks[0]
        assert any(parse_staged(o).stream is OutputStream.REJECTED for o in ack.outputs)  # type: ignore[union-attr]
        assert list_published(sink.fs, f"{sink.root}/{REJECTED_DIR}") == []  # not before the manifest
        coordinator.commit(ack)
        await wait_for(lambda: runtime.epochs_committed == 1)
        cursors = ack.cursors["src"]
        scan = read_output(sink.fs, sink.root, TOPIC)
        expected = {p: np.arange(cursors[f"{TOPIC}:{p}"]) for p in (0, 1)}
        report = audit(TOPIC, expected, {p: int(e.size) for p, e in expected.items()}, scan)
        assert report.ok, report.table()
        assert report.rejected == sum(int(np.count_nonzero(e % 3 == 0)) for e in expected.values())
        counted = runtime.metrics.registry.get_sample_value("laminar_records_rejected_total", {"node": "1"})
        assert counted is not None and counted >= report.rejected
    finally:
        runtime.request_stop(planned_leave=False)
        await asyncio.wait_for(task, 10)
