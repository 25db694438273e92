"""The runtime's vnode path with the in-memory connector (no servers): first assignment and
acquisition from a manifest, a committed and an aborted round, acks of exactly the owned cursors,
the two connector policies, and the retired generation's detached tasks."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from laminar_kafka.cluster.lake.parquet.tree import parquet_tree
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime, RuntimeOptions, ack_cursors
from laminar_kafka.cluster.runtime.topology import TopicInfo, Topology
from laminar_kafka.connector.memory import MemoryLog, MemorySource
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy as Cancellation,
)
from laminar_kafka.connector.protocol import (
    ConnectorConfig,
    ResumePosition,
)
from laminar_kafka.connector.protocol import (
    SourceCheckpointUnavailablePolicy as Unavailable,
)
from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    EpochOpened,
    Manifest,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
)
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import partition_vnode
from tests.unit.cluster.fakes import FakeCoordinator, published_offsets, wait_for

VNODES = 8
#: partition -> vnode ("src", topic "t", 8 vnodes): 0 -> 7, 1 -> 5, 2 -> 1, 3 -> 3
VNODE_OF = {p: partition_vnode("src", "t", p, VNODES) for p in range(4)}
END = 50
OPTIONS = RuntimeOptions(node_id=1, source_identity="src", connector=ConnectorConfig("memory", {}),
                         vnode_mode=True, topology_interval_s=0)


def owners(mine: set[int]) -> list[int]:
    """An owner map where node 1 owns the vnodes of partitions ``mine`` and node 2 every other vnode."""
    result = [2] * VNODES
    for partition in mine:
        result[VNODE_OF[partition]] = 1
    return result


class Cluster:
    """A node runtime on the memory connector, with a fake coordinator the test drives."""

    def __init__(self, tmp_path: Path, mine: set[int], options: RuntimeOptions = OPTIONS, **source: object) -> None:
        self.log = MemoryLog.of("t", 4, END)
        self.coordinator = FakeCoordinator()
        self.last_sent: dict[str, int] = {}
        self.coordinator.snapshot = AssignmentSnapshot.initial(VNODES).next(1, owners(mine))
        # the last durable manifest: an earlier owner read every partition up to 10 + p
        self.coordinator.manifests[3] = Manifest(3, 1, {"src": {f"t:{p}": 10 + p for p in range(4)}})
        self.generations: list[MemorySource] = []
        #: called before each generation is built
        self.before_build: Callable[[], None] = lambda: None

        def factory() -> MemorySource:
            self.before_build()
            self.generations.append(MemorySource(self.log, **source))  # type: ignore[arg-type]
            return self.generations[-1]

        sink = ParquetSink(str(tmp_path / "out"), node_id=1, boot_id="x", partitioning=PartitionSpec())
        topology = Topology.of(TopicInfo("t", "id-t", 4))
        self.runtime = NodeRuntime(self.coordinator, sink, parquet_tree(sink.fs, sink.root), factory, lambda: topology,
                                   options)
        self.task: asyncio.Task[None] | None = None

    @property
    def source(self) -> MemorySource:
        return self.generations[-1]

    async def start(self) -> None:
        self.task = asyncio.create_task(self.runtime.run())
        await wait_for(lambda: self.generations and self.source.cursor
                       and all(o == self.log.end(tp) for tp, o in self.source.cursor.items()))

    async def ack(self, epoch: int, version: int) -> dict[str, int]:
        """Open ``epoch``; returns the cursors its ack stands for: every owned partition's, the ones it
        left out as unchanged taken from the previous manifest (``last_sent``: what it carried)."""
        acks = len(self.coordinator.acks)
        previous = self.coordinator.latest_manifest()
        self.coordinator.emit(EpochOpened(epoch, version))
        await wait_for(lambda: len(self.coordinator.acks) > acks)
        ack = self.coordinator.acks[-1]
        assert ack.epoch == epoch and ack.assignment_version == version
        self.last_sent = dict(ack.cursors["src"])
        base = dict(previous.cursors.get("src", {})) if previous is not None else {}
        owned = ack_cursors({**base, **self.last_sent}, "src", self.coordinator.snapshot, 1)
        assert self.last_sent.items() <= owned.items()  # only owned partitions
        return owned

    async def commit(self, epoch: int, version: int) -> dict[str, int]:
        cursors = await self.ack(epoch, version)
        committed = self.runtime.epochs_committed
        self.coordinator.commit(self.coordinator.acks[-1])
        await wait_for(lambda: self.runtime.epochs_committed > committed)
        return cursors

    def start_round(self, target: list[int]) -> AssignmentDrainId:
        drain_id = AssignmentDrainId.for_round(self.coordinator.snapshot, target, 1)
        self.coordinator.emit(RoundStarted(drain_id, tuple(target), int((time.time() + 30) * 1000)))
        return drain_id

    async def drain_reported(self, target: list[int]) -> AssignmentDrainId:
        """Start a round to ``target``; returns its id once this node has reported its drain ready."""
        drain_id = self.start_round(target)
        await wait_for(lambda: self.coordinator.drain_reports == [drain_id])
        return drain_id

    async def produce_past_the_cut(self) -> None:
        """Five more records on t:0 (being drained: they stay behind its cut) and on t:1 (kept);
        returns once the source has read t:1's."""
        self.log.append(("t", 0), 5)
        self.log.append(("t", 1), 5)
        await wait_for(lambda: self.source.cursor[("t", 1)] == END + 5)

    def publish(self, target: list[int], manifest_epoch: int) -> None:
        self.coordinator.snapshot = self.coordinator.snapshot.next(self.coordinator.snapshot.version + 1, target)
        self.coordinator.emit(AssignmentChanged(self.coordinator.snapshot, manifest_epoch))

    async def stop(self) -> None:
        assert self.task is not None
        self.runtime.request_stop(planned_leave=False)
        await asyncio.wait_for(self.task, 5)


def key(partition: int) -> str:
    return f"t:{partition}"


async def test_first_assignment_resumes_from_the_manifest_and_a_dead_nodes_partition_is_acquired(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, {0, 1})
    await cluster.start()
    position = cluster.source.started_with.position if cluster.source.started_with else None
    assert isinstance(position, ResumePosition) and position.attempt.epoch == 3
    assert await cluster.commit(4, 1) == {key(0): END, key(1): END}  # exactly the owned partitions
    assert cluster.last_sent == {key(0): END, key(1): END}  # the first epoch of a boot: all of them

    cluster.publish(owners({0, 1, 2}), manifest_epoch=4)  # node 2 died: its t:2 moves without a drain
    await wait_for(lambda: cluster.source.cursor.get(("t", 2)) == END)
    assert len(cluster.generations) == 1  # acquired in place
    assert cluster.source.acquired == [(2, {key(p): 10 + p for p in (2, 3)} | {key(0): END, key(1): END})]
    assert await cluster.commit(5, 2) == {key(0): END, key(1): END, key(2): END}
    assert cluster.last_sent == {key(2): END}  # manifest 4 seen committed: only what moved since
    offsets = published_offsets(cluster.runtime)
    assert offsets == {0: list(range(10, END)), 1: list(range(11, END)), 2: list(range(12, END))}
    await cluster.stop()


async def test_a_committed_round_hands_partitions_over_without_restarting_the_source(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, {0, 1})
    await cluster.start()
    target = owners({1, 2})  # node 1 loses t:0 and gains t:2
    drain_id = await cluster.drain_reported(target)
    await cluster.produce_past_the_cut()  # kept partitions flow
    assert await cluster.commit(4, 1) == {key(0): END, key(1): END + 5}  # t:0 stopped at its cut

    cluster.coordinator.emit(RoundDecided(drain_id, RoundOutcome.COMMIT, 4))
    cluster.publish(target, manifest_epoch=4)
    await wait_for(lambda: cluster.source.cursor.get(("t", 2)) == END)
    assert len(cluster.generations) == 1 and ("t", 0) not in cluster.source.cursor
    assert "finish_drain:commit" in cluster.source.calls and cluster.source.acquired == []
    assert await cluster.commit(5, 2) == {key(1): END + 5, key(2): END}
    assert cluster.last_sent == {key(2): END}
    offsets = published_offsets(cluster.runtime)
    assert offsets[0] == list(range(10, END)) and offsets[2] == list(range(12, END))  # from the handoff cursor
    assert [h.partition for h in cluster.runtime.handoffs] == [key(2)]
    await cluster.stop()


async def test_an_aborted_round_resumes_the_paused_partitions_at_their_cut(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, {0, 1})
    await cluster.start()
    drain_id = await cluster.drain_reported(owners({1}))
    await cluster.produce_past_the_cut()
    assert await cluster.commit(4, 1) == {key(0): END, key(1): END + 5}

    cluster.coordinator.emit(RoundDecided(drain_id, RoundOutcome.ABORT, 4))
    cluster.publish(owners({0, 1}), manifest_epoch=4)  # an abort publishes the predecessor's owners
    await wait_for(lambda: cluster.source.cursor[("t", 0)] == END + 5)
    assert len(cluster.generations) == 1 and "finish_drain:abort" in cluster.source.calls
    assert await cluster.commit(5, 2) == {key(0): END + 5, key(1): END + 5}
    assert published_offsets(cluster.runtime)[0] == list(range(10, END + 5))
    await cluster.stop()


async def test_hold_intake_polls_nothing_while_no_checkpoint_is_available(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, {0, 1, 2, 3}, unavailable=Unavailable.HOLD_INTAKE)
    await cluster.start()
    source = cluster.source
    source.unreconciled = True
    source.calls.clear()
    cluster.log.append(("t", 0), 5)
    await wait_for(lambda: source.calls.count("checkpoint_ready") >= 20)
    assert "poll" not in source.calls and source.cursor[("t", 0)] == END
    source.unreconciled = False
    await wait_for(lambda: source.cursor[("t", 0)] == END + 5)
    await cluster.stop()


async def test_poll_to_replay_boundary_polls_one_batch_per_barrier_retry(tmp_path: Path) -> None:
    options = replace(OPTIONS, max_batch_records=2)
    cluster = Cluster(tmp_path, {0, 1, 2, 3}, options, unavailable=Unavailable.POLL_TO_REPLAY_BOUNDARY)
    await cluster.start()
    source = cluster.source
    source.unreconciled = True
    source.calls.clear()
    cluster.coordinator.emit(EpochOpened(4, 1))
    cluster.log.append(("t", 0), 5)
    await wait_for(lambda: source.cursor[("t", 0)] == END + 5)  # polled while no checkpoint was available
    assert cluster.coordinator.acks == []  # the barrier is retained while try_checkpoint() is None
    polls = [i for i, call in enumerate(source.calls) if call == "poll"]
    assert len(polls) >= 3
    assert all("try_checkpoint" in source.calls[a:b] for a, b in zip(polls, polls[1:], strict=False))  # one batch per retry
    source.unreconciled = False
    await wait_for(lambda: cluster.coordinator.acks)
    assert cluster.coordinator.acks[0].cursors["src"][key(0)] == END + 5
    await cluster.stop()


@pytest.mark.parametrize("policy", [Cancellation.RETIRE_CONNECTOR, Cancellation.CANCEL_SAFE])
async def test_a_cancelled_poll_follows_the_cancellation_policy(tmp_path: Path, policy: Cancellation) -> None:
    cluster = Cluster(tmp_path, {0, 1, 2, 3}, replace(OPTIONS, poll_timeout_s=0.1), cancellation=policy)
    await cluster.start()
    first = cluster.source
    first.hang_polls = 1  # the next poll_batch never returns by itself
    cluster.log.append(("t", 0), 5)
    await wait_for(lambda: cluster.source.cursor.get(("t", 0)) == END + 5)
    assert cluster.runtime.generations.failures == 1
    if policy is Cancellation.RETIRE_CONNECTOR:
        assert len(cluster.generations) == 2 and first.closed
    else:
        assert cluster.generations == [first] and not first.closed
    await cluster.stop()


@pytest.mark.parametrize("policy", [Cancellation.RETIRE_CONNECTOR, Cancellation.CANCEL_SAFE])
async def test_a_cancelled_finish_drain_follows_the_cancellation_policy(tmp_path: Path, policy: Cancellation) -> None:
    options = replace(OPTIONS, finish_drain_timeout_s=0.1)
    cluster = Cluster(tmp_path, {0, 1}, options, cancellation=policy)
    await cluster.start()
    first = cluster.source
    drain_id = await cluster.drain_reported(owners({1}))
    await cluster.commit(4, 1)
    first.hang_finishes = 1  # the resolution hangs past its deadline
    cluster.coordinator.emit(RoundDecided(drain_id, RoundOutcome.ABORT, 4))
    cluster.publish(owners({0, 1}), manifest_epoch=4)
    cluster.log.append(("t", 0), 5)
    await wait_for(lambda: cluster.source.cursor.get(("t", 0)) == END + 5)
    assert cluster.runtime.generations.failures == 1
    if policy is Cancellation.RETIRE_CONNECTOR:
        assert len(cluster.generations) == 2 and first.closed  # the successor starts from manifest 4
    else:
        assert cluster.generations == [first]
        assert first.calls.count("finish_drain:abort") == 2  # applied again at the next turn
    await cluster.stop()


async def test_the_next_generation_starts_only_after_the_retired_ones_tasks_ended(tmp_path: Path) -> None:
    release = threading.Event()
    reader = threading.Thread(target=release.wait, daemon=True)
    reader.start()
    cluster = Cluster(tmp_path, {0, 1, 2, 3}, replace(OPTIONS, poll_timeout_s=0.1), tracked_thread=reader)
    await cluster.start()
    reader_alive_at_build: list[bool] = []
    cluster.before_build = lambda: reader_alive_at_build.append(reader.is_alive())
    asyncio.get_running_loop().call_later(0.3, release.set)
    cluster.source.hang_polls = 1  # its next poll is cancelled: the generation is retired
    await wait_for(lambda: len(cluster.generations) == 2)
    assert reader_alive_at_build == [False]
    await cluster.stop()


async def test_a_retired_generation_whose_tasks_do_not_end_stops_the_node(tmp_path: Path) -> None:
    release = threading.Event()
    reader = threading.Thread(target=release.wait, daemon=True)
    reader.start()
    try:
        options = replace(OPTIONS, retire_wait_s=0.1, poll_timeout_s=0.1)
        cluster = Cluster(tmp_path, {0, 1, 2, 3}, options, tracked_thread=reader)
        await cluster.start()
        cluster.source.hang_polls = 1
        assert cluster.task is not None
        with pytest.raises(RuntimeFailure, match="did not terminate within"):
            await asyncio.wait_for(cluster.task, 5)
        assert len(cluster.generations) == 1
    finally:
        release.set()
