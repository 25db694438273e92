"""NodeRuntime against an in-memory coordinator and source (no servers): barriers, publish, restarts.

The vnode-mode drain path runs in test_runtime_vnode.py, with the memory connector."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pyarrow as pa
import pytest

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published
from laminar_kafka.cluster.lake.parquet.tree import parquet_tree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.runtime.measures import Watermarks
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions, ack_cursors
from laminar_kafka.cluster.runtime.topology import TopicInfo, Topology
from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import FatalError
from laminar_kafka.connector.protocol import (
    ConnectorConfig,
    ResumePosition,
    SourceBatch,
    SourceConnector,
    SourceContract,
    SourceOrdering,
    SourceStart,
    SourceTopology,
)
from laminar_kafka.coordinator.base import (
    AckRejected,
    AssignmentChanged,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    SessionState,
    SessionStateChanged,
)
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import partition_vnode
from tests.unit.cluster.fakes import FakeCoordinator, parquet_sink, published_offsets, wait_for

TOPIC = "t"
PARTITIONS = [(TOPIC, 0), (TOPIC, 1)]
TOPOLOGY = Topology.of(TopicInfo(TOPIC, "id-t", 2))


class FakeSource(SourceConnector):
    """Emits `rows_per_poll` rows per partition per poll from an unbounded log."""

    generations: list["FakeSource"] = []

    def __init__(self, rows_per_poll: int = 5) -> None:
        self.rows_per_poll = rows_per_poll
        self.cursor: dict[tuple[str, int], int] = {}
        self.started_with: SourceStart | None = None
        self.closed = False
        self.committed: list[tuple[int, SourceCheckpoint]] = []
        FakeSource.generations.append(self)

    async def start(self, request: SourceStart) -> None:
        self.started_with = request
        position = request.position
        cursor = position.checkpoint.partitions() if isinstance(position, ResumePosition) else {}
        self.cursor = {tp: cursor.get(tp, 0) for tp in PARTITIONS}

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        if self.closed:  # as KafkaSource
            raise FatalError("poll_batch on a source that is not running")
        await asyncio.sleep(0.001)
        parts, offsets = [], []
        for (topic, partition), start in sorted(self.cursor.items()):
            parts += [partition] * self.rows_per_poll
            offsets += range(start, start + self.rows_per_poll)
            self.cursor[(topic, partition)] = start + self.rows_per_poll
        batch = pa.record_batch({
            "_topic": [TOPIC] * len(parts), "_partition": pa.array(parts, pa.int32()), "_offset": pa.array(offsets, pa.int64()),
        })
        return SourceBatch(batch, self.checkpoint())

    def schema(self) -> pa.Schema:
        raise AssertionError("unused")

    def checkpoint(self) -> SourceCheckpoint:
        return SourceCheckpoint.from_partitions(self.cursor)

    async def close(self) -> None:
        self.closed = True

    def contract(self, config: ConnectorConfig) -> SourceContract:
        return SourceContract(True, SourceTopology.SPLITTABLE, True, SourceOrdering.PER_SPLIT)

    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        self.committed.append((epoch, checkpoint))


def make_runtime(tmp_path: Path, coordinator: FakeCoordinator, watermarks: Watermarks | None = None) -> NodeRuntime:
    FakeSource.generations = []
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    return NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), FakeSource, lambda: TOPOLOGY, options,
                       watermarks=watermarks)


async def start_running(runtime: NodeRuntime, rows: int) -> asyncio.Task[None]:
    """``runtime.run()`` in a task, returned once the runtime has written at least ``rows`` rows."""
    task = asyncio.create_task(runtime.run())
    await wait_for(lambda: runtime.rows_written >= rows)
    return task


async def stop_running(runtime: NodeRuntime, task: asyncio.Task[None]) -> None:
    """Stop the runtime (not a planned leave) and wait for its run to end (5 s at most)."""
    runtime.request_stop(planned_leave=False)
    await asyncio.wait_for(task, 5)


async def ack_of(coordinator: FakeCoordinator, epoch: int, version: int = 1) -> EpochAck:
    """Open ``epoch`` at ``version``; returns the next ack the coordinator records."""
    held = len(coordinator.acks)
    coordinator.emit(EpochOpened(epoch, version))
    await wait_for(lambda: len(coordinator.acks) > held)
    return coordinator.acks[held]


async def commit(runtime: NodeRuntime, coordinator: FakeCoordinator, ack: EpochAck) -> Manifest:
    """Commit ``ack``'s epoch; returns its manifest once the runtime has counted one more commit."""
    committed = runtime.epochs_committed
    manifest = coordinator.commit(ack)
    await wait_for(lambda: runtime.epochs_committed > committed)
    return manifest


def every_offset_below(cursors: dict[str, int]) -> dict[int, list[int]]:
    """Partition -> every offset below its cursor: what the lake holds once ``cursors`` are published."""
    return {p: list(range(cursors[f"t:{p}"])) for p in (0, 1)}


def test_ack_cursors_route_every_partition_by_the_snapshot() -> None:
    partitions = {("t", p): 10 + p for p in range(40)}  # includes partitions added after start
    cp = SourceCheckpoint.from_partitions(partitions)
    assert ack_cursors(cp.offsets, "src", None, 1) == {f"t:{p}": 10 + p for p in range(40)}
    snapshot = AssignmentSnapshot.initial(8).next(1, [1, 2] * 4)
    mine = ack_cursors(cp.offsets, "src", snapshot, 1)
    theirs = ack_cursors(cp.offsets, "src", snapshot, 2)
    assert mine and theirs and not set(mine) & set(theirs)
    assert {**mine, **theirs} == dict(cp.offsets)
    for key in mine:
        topic, partition = key.split(":")
        assert snapshot.owners[partition_vnode("src", topic, int(partition), 8)] == 1


async def test_barrier_acks_exact_cursors_and_commit_publishes(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=50)
    ack = await ack_of(coordinator, epoch=1)
    assert ack.boot_id == "boot-1" and ack.epoch == 1 and ack.assignment_version == 1
    cursors = ack.cursors["src"]
    assert list_published(*parquet_sink(runtime)) == []  # not before the manifest
    await commit(runtime, coordinator, ack)
    assert published_offsets(runtime) == every_offset_below(cursors)
    assert FakeSource.generations[0].committed[0][1].offsets == cursors  # advisory commit after the manifest
    await stop_running(runtime, task)


async def test_restart_resumes_from_the_manifest_without_duplicates(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    manifest = await commit(runtime, coordinator, await ack_of(coordinator, epoch=1))
    await stop_running(runtime, task)  # rows after epoch 1 are dropped at stop

    runtime = make_runtime(tmp_path, coordinator)  # a new process
    task = await start_running(runtime, rows=20)
    start = FakeSource.generations[0].started_with
    assert isinstance(start.position, ResumePosition) and start.position.attempt.epoch == 1
    assert dict(start.position.checkpoint.offsets) == dict(manifest.cursors["src"])
    second = await ack_of(coordinator, epoch=2)
    await commit(runtime, coordinator, second)
    offsets = published_offsets(runtime)
    final = second.cursors["src"]
    assert offsets == every_offset_below(final)
    await stop_running(runtime, task)


async def test_suspended_session_admits_no_epoch_and_lost_rejoins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    caplog.set_level(logging.INFO, logger="laminar_kafka.cluster.runtime.epochs")
    coordinator.emit(SessionStateChanged(SessionState.SUSPENDED))
    coordinator.emit(EpochOpened(1, 1))
    await wait_for(lambda: "epoch 1 not admitted: session suspended" in caplog.text)
    assert coordinator.acks == [] and runtime.epochs.pending is None
    coordinator.emit(SessionStateChanged(SessionState.LOST))
    await wait_for(lambda: coordinator.rejoins == 1 and len(FakeSource.generations) == 2 and runtime.rows_written > 0)
    assert FakeSource.generations[0].closed
    assert isinstance(runtime.sink, ParquetSink) and runtime.sink.boot_id == "boot-2"
    ack = await ack_of(coordinator, epoch=2)
    assert ack.boot_id == "boot-2"
    await commit(runtime, coordinator, ack)
    final = ack.cursors["src"]
    assert published_offsets(runtime) == every_offset_below(final)
    await stop_running(runtime, task)


class FlakyAckCoordinator(FakeCoordinator):
    """The first `failures` acks fail without being fenced (a connection loss)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts: list[EpochAck] = []

    def ack_epoch(self, ack: EpochAck) -> None:
        self.attempts.append(ack)
        if len(self.attempts) <= self.failures:
            raise CoordinatorError("connection loss")
        super().ack_epoch(ack)


async def test_an_ack_that_fails_transiently_is_sent_again_unchanged(tmp_path: Path) -> None:
    coordinator = FlakyAckCoordinator(failures=2)
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    ack = await ack_of(coordinator, epoch=1)
    assert len(coordinator.attempts) == 3
    assert all(a == ack for a in coordinator.attempts)  # same cursors, same sealed files
    assert ack.outputs and len(FakeSource.generations) == 1
    await commit(runtime, coordinator, ack)
    cursors = ack.cursors["src"]
    assert published_offsets(runtime) == every_offset_below(cursors)
    await stop_running(runtime, task)


async def test_a_lost_ack_answer_is_dropped_once_its_epoch_commits(tmp_path: Path) -> None:
    coordinator = FlakyAckCoordinator(failures=1000)
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    coordinator.emit(EpochOpened(1, 1))
    await wait_for(lambda: coordinator.attempts)
    await commit(runtime, coordinator, coordinator.attempts[0])  # it was recorded; only the answer was lost
    assert runtime.epochs.unsent is None  # nothing left to send again
    await stop_running(runtime, task)


async def test_a_rejected_ack_restarts_the_generation_and_acks_the_epoch_again(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    rejected = await ack_of(coordinator, epoch=1)
    coordinator.emit(AckRejected(1, "cursor src/t:0 regresses"))
    await wait_for(lambda: len(coordinator.acks) == 2)
    assert len(FakeSource.generations) == 2 and FakeSource.generations[0].closed
    replacement = coordinator.acks[1]
    assert replacement.epoch == 1 and replacement.boot_id == rejected.boot_id
    assert set(replacement.outputs).isdisjoint(rejected.outputs)
    await commit(runtime, coordinator, replacement)
    cursors = replacement.cursors["src"]  # the new generation acked from where it started
    expected = {p: list(range(cursors[f"t:{p}"])) for p in (0, 1) if cursors[f"t:{p}"]}
    assert published_offsets(runtime) == expected  # none of the rejected ack's rows
    assert runtime.metrics.acks_rejected.labels("1")._value.get() == 1
    coordinator.emit(AckRejected(1, "late duplicate of the rejection"))  # already committed: ignored
    coordinator.emit(EpochOpened(2, 1))  # handled after the duplicate
    await wait_for(lambda: len(coordinator.acks) == 3)
    assert len(FakeSource.generations) == 2 and not FakeSource.generations[1].closed
    await stop_running(runtime, task)


def vnode_runtime(tmp_path: Path, coordinator: FakeCoordinator) -> NodeRuntime:
    FakeSource.generations = []
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}),
                             vnode_mode=True, topology_interval_s=0)
    return NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), FakeSource, lambda: TOPOLOGY, options)


async def test_an_owner_of_vnodes_without_partitions_acks_empty_and_a_non_owner_not_at_all(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    # t:0 routes to vnode 3 and t:1 to vnode 1 (source identity "src", 4 vnodes): node 1 owns neither
    coordinator.snapshot = AssignmentSnapshot.initial(4).next(1, [1, 2, 1, 2])
    runtime = vnode_runtime(tmp_path, coordinator)
    task = asyncio.create_task(runtime.run())
    await wait_for(lambda: runtime.assignment.snapshot is not None)
    ack = await ack_of(coordinator, epoch=1)
    assert ack.cursors == {"src": {}} and ack.outputs == () and FakeSource.generations == []
    await commit(runtime, coordinator, ack)
    # a version where node 1 owns no vnode at all: the leader does not wait for it, no ack
    coordinator.emit(AssignmentChanged(coordinator.snapshot.next(2, [2, 2, 2, 2]), 1))
    coordinator.emit(EpochOpened(2, 2))
    coordinator.emit(EpochCommitted(Manifest(2, 2, {"src": {}})))  # handled after the EpochOpened
    await wait_for(lambda: runtime.epochs_committed == 2)
    assert len(coordinator.acks) == 1 and runtime.epochs.pending is None
    await stop_running(runtime, task)


async def test_a_failed_start_still_stops_the_coordinator(tmp_path: Path) -> None:
    class Unreachable(FakeCoordinator):
        stopped = False

        def start(self, timeout: float = 30.0) -> None:
            raise CoordinatorError("unreachable")

        def stop(self) -> None:
            self.stopped = True

    coordinator = Unreachable()
    runtime = make_runtime(tmp_path, coordinator)
    with pytest.raises(RuntimeFailure, match="cannot join the pipeline: unreachable"):
        await asyncio.wait_for(runtime.run(), 5)
    assert coordinator.stopped


async def test_a_fenced_ack_rejoins_without_touching_the_retired_source(tmp_path: Path) -> None:
    class FencedOnce(FakeCoordinator):
        def ack_epoch(self, ack: EpochAck) -> None:
            if ack.boot_id == "boot-1":
                raise FencedError("stale boot")
            super().ack_epoch(ack)

    coordinator = FencedOnce()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=20)
    coordinator.emit(EpochOpened(1, 1))
    await wait_for(lambda: coordinator.rejoins == 1 and len(FakeSource.generations) == 2)
    assert runtime.metrics.generations_retired.labels(runtime.metrics.node)._value.get() == 0
    assert runtime.generations.failures == 0
    await stop_running(runtime, task)


async def test_a_failing_watermark_close_still_stops_source_and_coordinator(tmp_path: Path) -> None:
    class Watermarks:
        def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
            return {}

        def close(self) -> None:
            raise RuntimeError("consumer already closed")

    class Recording(FakeCoordinator):
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    coordinator = Recording()
    runtime = make_runtime(tmp_path, coordinator, Watermarks())
    task = await start_running(runtime, rows=20)
    runtime.request_stop(planned_leave=False)
    with pytest.raises(RuntimeError, match="already closed"):
        await asyncio.wait_for(task, 5)
    assert coordinator.stopped and FakeSource.generations[0].closed


def test_handoff_clock_closes_only_for_partitions_with_rows(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, FakeCoordinator())
    runtime.handoff_clock.awaiting_first_row = {"a:0": 1.0, "b:1": 1.0, "a:1": 1.0, "b:0": 1.0}
    rows = pa.record_batch({
        "_topic": pa.array(["a", "b", "a"]).dictionary_encode(),
        "_partition": pa.array([0, 1, 0], pa.int32()),
    })

    runtime.handoff_clock.note_rows(rows)

    assert sorted(h.partition for h in runtime.handoffs) == ["a:0", "b:1"]
    assert sorted(runtime.handoff_clock.awaiting_first_row) == ["a:1", "b:0"], "a topic x partition cross product is not a row"


async def test_a_transient_metadata_failure_at_start_is_retried(tmp_path: Path) -> None:
    """Chaos seed 10: a node started during a Kafka controller failover exited at once."""
    coordinator = FakeCoordinator()
    failures = [RuntimeError("Timed out waiting for controller")] * 2

    def topology() -> Topology:
        if failures:
            raise failures.pop()
        return TOPOLOGY

    runtime = make_runtime(tmp_path, coordinator)
    runtime.topology.read_topology = topology
    task = await start_running(runtime, rows=10)
    assert not failures
    await stop_running(runtime, task)


async def test_a_transient_source_failure_restarts_the_generation_without_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema registry that stays unreachable for a while (TransientError from poll_batch, nothing
    consumed) must not stop the node after max_generation_failures: each generation is retired and
    the next starts from the manifest after START_RETRY_S."""
    from laminar_kafka.connector.errors import TransientError

    monkeypatch.setattr("laminar_kafka.cluster.runtime.generation.START_RETRY_S", 0.01)
    outages = [TransientError("the schema registry is unreachable")] * 8  # > max_generation_failures

    class RegistryDown(FakeSource):
        async def poll_batch(self, max_records: int) -> SourceBatch | None:
            if outages:
                raise outages.pop()
            return await super().poll_batch(max_records)

    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    runtime.generations._source_factory = RegistryDown
    task = await start_running(runtime, rows=10)
    assert not outages and len(FakeSource.generations) == 9 and runtime.generations.failures == 0
    assert all(g.closed for g in FakeSource.generations[:-1])
    await stop_running(runtime, task)


async def test_the_bad_record_limit_stops_the_node_at_once(tmp_path: Path) -> None:
    """ErrorRateExceededError is not a generation failure to retry: the same records would fail again."""
    from laminar_kafka.cluster.errors import RuntimeFailure
    from laminar_kafka.kafka_source.errors import ErrorRateExceededError

    class TooManyBad(FakeSource):
        async def poll_batch(self, max_records: int) -> SourceBatch | None:
            raise ErrorRateExceededError("3 of 100 records were bad (max-error-rate=0.01)")

    runtime = make_runtime(tmp_path, FakeCoordinator())
    runtime.generations._source_factory = TooManyBad
    with pytest.raises(RuntimeFailure, match="max-error-rate"):
        await asyncio.wait_for(runtime.run(), 10)
    assert len(FakeSource.generations) == 1


async def test_new_topic_ids_that_cannot_be_pinned_now_are_tried_again(tmp_path: Path) -> None:
    """Chaos (zk-ensemble-replaced with new-topic): the session expired while a new topic's id was being
    pinned, and the CoordinatorError ended the node in a traceback. Nothing is adopted; the next
    metadata read pins it."""
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    task = await start_running(runtime, rows=10)
    grown = Topology.of(TopicInfo(TOPIC, "id-t", 2), TopicInfo("other", "id-o", 1))
    pin = coordinator.pin_topic_ids
    failures = [CoordinatorError("topic ids not confirmed: SessionExpiredError()")]

    def flaky(ids: dict[str, str]) -> dict[str, str]:
        if failures:
            raise failures.pop()
        return pin(ids)

    coordinator.pin_topic_ids = flaky  # type: ignore[method-assign]
    await runtime.topology.adopt(grown)
    assert not failures and "other" not in coordinator.topic_ids and "other" not in runtime.topology.topic_ids()
    generation = runtime.generations.current
    assert generation is not None and not task.done()
    generation.connector.add_partitions = lambda partitions: None  # type: ignore[method-assign]
    await runtime.topology.adopt(grown)  # the next metadata read
    assert coordinator.topic_ids["other"] == "id-o" and runtime.topology.topic_ids()["other"] == "id-o"
    await stop_running(runtime, task)


class QuietSource(FakeSource):
    """Nothing to read until :meth:`release`; a ready event as ``KafkaSource`` has (cleared by a
    poll that finds nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()
        self.polls = 0
        self.ready = False

    def data_ready_notify(self) -> asyncio.Event | None:
        return self.event

    def release(self) -> None:
        self.ready = True
        self.event.set()

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        self.polls += 1
        if not self.ready:
            self.event.clear()
            return None
        self.ready = False
        return await super().poll_batch(max_records)


async def test_a_settled_runtime_turns_when_its_source_is_ready_not_every_50_ms(tmp_path: Path) -> None:
    import laminar_kafka.cluster.runtime.node_runtime as runtime_module

    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    runtime = NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), QuietSource, lambda: TOPOLOGY,
                          options)
    task = asyncio.create_task(runtime.run())
    await wait_for(lambda: runtime.generations.current is not None and runtime._settled())
    source = runtime.generations.current.connector
    assert isinstance(source, QuietSource)
    polls, started = source.polls, asyncio.get_running_loop().time()
    await wait_for(lambda: source.polls >= polls + 3)  # settled: a turn per SETTLED_WAIT_S at most
    assert asyncio.get_running_loop().time() - started >= 2 * runtime_module.SETTLED_WAIT_S * 0.9

    released = asyncio.get_running_loop().time()
    source.release()  # the ready event wakes it at once
    await wait_for(lambda: runtime.rows_written > 0)
    assert asyncio.get_running_loop().time() - released < runtime_module.SETTLED_WAIT_S / 2

    ack = await ack_of(coordinator, 1)  # an epoch in flight: not settled until it commits
    assert not runtime._settled()
    await commit(runtime, coordinator, ack)
    await wait_for(runtime._settled)
    await stop_running(runtime, task)


async def test_a_node_holding_rows_asks_for_an_epoch_once_per_commit_when_none_comes(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False,
                             epoch_ask_after_s=0.3)
    runtime = NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), FakeSource, lambda: TOPOLOGY,
                          options)
    started = asyncio.get_running_loop().time()
    task = await start_running(runtime, 1)
    await wait_for(lambda: coordinator.epoch_asks == [0])  # rows, and no epoch since the start
    assert asyncio.get_running_loop().time() - started >= 0.3

    ack = await ack_of(coordinator, 1)
    committed = asyncio.get_running_loop().time()
    await commit(runtime, coordinator, ack)
    await wait_for(lambda: len(coordinator.epoch_asks) == 2)  # rows again after the commit
    assert coordinator.epoch_asks == [0, 1] and asyncio.get_running_loop().time() - committed >= 0.3
    assert runtime.metrics.epoch_asks.labels(runtime.metrics.node)._value.get() == 2
    await stop_running(runtime, task)


class HeldSource(QuietSource):
    """Not reconciled while ``held`` (HOLD_INTAKE: the runtime polls nothing); counts its turns."""

    def __init__(self) -> None:
        super().__init__()
        self.held = False
        self.turns = 0

    def checkpoint_ready(self) -> bool:
        self.turns += 1
        return not self.held


async def test_a_held_generation_with_data_waiting_turns_on_the_timer_not_in_a_loop(tmp_path: Path) -> None:
    """Intake held with records in the source's queue: nothing clears its ready event (no poll), so
    the loop must not wait on it (it spun at about 28,000 turns a second)."""
    import laminar_kafka.cluster.runtime.node_runtime as runtime_module

    coordinator = FakeCoordinator()
    sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", row_group_rows=7, partitioning=PartitionSpec())
    options = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("kafka", {}), vnode_mode=False)
    runtime = NodeRuntime(coordinator, sink, parquet_tree(sink.fs, sink.root), HeldSource, lambda: TOPOLOGY,
                          options)
    task = asyncio.create_task(runtime.run())
    await wait_for(lambda: runtime.generations.current is not None)
    source = runtime.generations.current.connector
    assert isinstance(source, HeldSource)
    source.held = True
    source.event.set()  # records waiting
    start, turns = asyncio.get_running_loop().time(), source.turns
    await wait_for(lambda: source.turns >= turns + 5)
    elapsed = asyncio.get_running_loop().time() - start
    assert elapsed >= 4 * runtime_module.TURN_WAIT_S * 0.9  # five turns took four timer waits at least
    source.held = False
    source.release()
    await wait_for(lambda: runtime.rows_written > 0)  # reconciled: the waiting records land
    await stop_running(runtime, task)
