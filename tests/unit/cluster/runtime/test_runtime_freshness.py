"""A runtime with a freshness target (fake coordinator and source, real Parquet sink): it asks for an
epoch once its oldest pending row would otherwise miss the target, not before and not while nothing
is pending; the rows' visibility is observed at the publish and the freshness gauge reads 0 after."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pyarrow as pa
from prometheus_client import generate_latest

from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from laminar_kafka.cluster.lake.parquet.tree import parquet_tree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions
from laminar_kafka.cluster.runtime.state import FreshnessPolicy
from laminar_kafka.connector.protocol import ConnectorConfig, SourceBatch
from tests.unit.cluster.fakes import FakeCoordinator, wait_for
from tests.unit.cluster.runtime.test_runtime import TOPOLOGY, FakeSource, ack_of, commit, stop_running

TARGET_S = 0.8


class TrickleSource(FakeSource):
    """One row per partition per poll while ``flowing``, stamped with the wall clock (ms)."""

    flowing = True

    def __init__(self) -> None:
        super().__init__(rows_per_poll=1)

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        await asyncio.sleep(0.02)
        if not TrickleSource.flowing:
            return None
        batch = await super().poll_batch(max_records)
        assert batch is not None
        records = batch.records
        stamps = pa.array([int(time.time() * 1000)] * records.num_rows, pa.timestamp("ms"))
        return SourceBatch(pa.record_batch([*records.columns, stamps], names=[*records.schema.names, "_timestamp"]),
                           batch.checkpoint)


def metric(runtime: NodeRuntime, prefix: str) -> list[str]:
    return [line for line in generate_latest(runtime.metrics.registry).decode().splitlines() if line.startswith(prefix)]


async def test_a_node_asks_when_its_oldest_row_would_miss_the_target_and_not_while_idle(tmp_path: Path) -> None:
    TrickleSource.flowing = True
    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False,
                             freshness=FreshnessPolicy(TARGET_S))
    runtime = NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), TrickleSource, lambda: TOPOLOGY,
                          options)
    task = asyncio.create_task(runtime.run())
    await wait_for(lambda: runtime.rows_written > 0)
    first_row = time.time()
    await wait_for(lambda: coordinator.epoch_asks == [0])
    asked = time.time() - first_row
    # before any measure an ask is taken to need a quarter of the target: the ask comes at 3/4 of it
    assert 0.5 * TARGET_S <= asked <= TARGET_S, asked

    TrickleSource.flowing = False
    ack = await ack_of(coordinator, 1)
    await commit(runtime, coordinator, ack)
    assert any(line.startswith("laminar_visibility_seconds_count") and not line.endswith(" 0.0")
               for line in metric(runtime, "laminar_visibility_seconds_count")), metric(runtime, "laminar_visibility")
    assert all(line.endswith(" 0.0") for line in metric(runtime, "laminar_freshness_seconds{"))
    assert len(metric(runtime, "laminar_freshness_seconds{")) == 2  # one series per partition written
    await asyncio.sleep(2 * TARGET_S)  # idle: nothing pending, no ask whatever the time
    assert coordinator.epoch_asks == [0]
    await stop_running(runtime, task)
