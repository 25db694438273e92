"""The runtime and its lake: a committed epoch whose publishing cannot read the coordinator now (a
session expiring) is durable all the same; the node goes on, and a later publish finishes it. The
nodes that acked an epoch take turns committing its tables; the others commit up to the epoch before."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published
from laminar_kafka.cluster.lake.parquet.tree import ParquetTree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.record import RecordOf
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.coordinator.errors import CoordinatorUnavailable
from tests.unit.cluster.fakes import FakeCoordinator, wait_for
from tests.unit.cluster.runtime.test_runtime import TOPOLOGY, FakeSource, ack_of, commit, start_running, stop_running


class ExpiringLake(ParquetTree):
    """The Parquet tree, whose first publish finds the coordinator's session expired."""

    def __init__(self, sink: ParquetSink, record_of: RecordOf) -> None:
        super().__init__(sink.fs, sink.root, record_of=record_of)
        self.failures = 1

    def publish(self, epoch: int, staged: tuple[str, ...], manifest_outputs: Callable[[int], tuple[str, ...] | None],
                oldest_epoch: int, *, tables_through: int | None = None) -> int:
        if self.failures:
            self.failures -= 1
            raise CoordinatorUnavailable("manifest cannot be read now: SessionExpiredError()")
        return super().publish(epoch, staged, manifest_outputs, oldest_epoch, tables_through=tables_through)


async def test_a_publish_the_coordinator_cannot_answer_now_does_not_stop_the_node(tmp_path: Path) -> None:
    FakeSource.generations = []
    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    runtime = NodeRuntime(coordinator, sink, lambda record_of, _: ExpiringLake(sink, record_of), FakeSource,
                          lambda: TOPOLOGY, options)
    lake = runtime.lake
    assert isinstance(lake, ExpiringLake)
    task = await start_running(runtime, rows=20)
    first = await commit(runtime, coordinator, await ack_of(coordinator, epoch=1))
    assert lake.failures == 0 and not task.done()
    assert runtime.epochs.latest_committed_epoch == 1  # durable: the manifest says so
    assert list_published(sink.fs, sink.root) == []  # not visible yet
    await wait_for(lambda: runtime.rows_written >= 40)
    await commit(runtime, coordinator, await ack_of(coordinator, epoch=2))
    await runtime.epochs.recover_sink()  # what every 10th epoch and every start do
    published = {p.rsplit("/", 1)[1] for p in list_published(sink.fs, sink.root)}
    assert {name.rsplit("/", 1)[1].replace("_staging/", "") for name in first.outputs} <= published
    await stop_running(runtime, task)


class TurnsLake(ParquetTree):
    """The Parquet tree, remembering each publish's ``tables_through`` by epoch."""

    def __init__(self, sink: ParquetSink, record_of: RecordOf) -> None:
        super().__init__(sink.fs, sink.root, record_of=record_of)
        self.through: dict[int, int | None] = {}

    def publish(self, epoch: int, staged: tuple[str, ...], manifest_outputs: Callable[[int], tuple[str, ...] | None],
                oldest_epoch: int, *, tables_through: int | None = None) -> int:
        self.through[epoch] = tables_through
        return super().publish(epoch, staged, manifest_outputs, oldest_epoch, tables_through=tables_through)


async def test_a_node_commits_the_tables_of_the_epochs_whose_turn_is_its_own(tmp_path: Path) -> None:
    FakeSource.generations = []
    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    runtime = NodeRuntime(coordinator, sink, lambda record_of, _: TurnsLake(sink, record_of), FakeSource,
                          lambda: TOPOLOGY, options)
    lake = runtime.lake
    assert isinstance(lake, TurnsLake)
    task = await start_running(runtime, rows=20)
    for epoch in (1, 2, 3):  # nodes 1 and 2 acked each: node 2 has the odd epochs' turn, node 1 the even
        committed = runtime.epochs_committed
        coordinator.commit(await ack_of(coordinator, epoch=epoch), other_acks=((2, "y"),))
        await wait_for(lambda committed=committed: runtime.epochs_committed > committed)
    assert lake.through == {1: 0, 2: None, 3: 2}
    await runtime.epochs.recover_sink()  # start, join and every 10th epoch: every table, whoever's turn
    assert lake.through[3] is None
    await stop_running(runtime, task)
