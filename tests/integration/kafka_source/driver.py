"""A small in-process driver that plays the node runtime and the coordinator for KafkaSource tests.

Each :class:`Node` owns one ``KafkaSource`` and its own mirror :class:`VnodeRegistry` (as a cluster
node does) and runs a loop that, like the runtime, calls ``drive_control_plane`` every turn, holds
intake while ``try_checkpoint()`` is ``None``, and runs control calls (drain hooks) *between* two
``poll_batch`` calls. The :class:`Driver` publishes versions to every mirror, runs rounds
(begin_drain -> all ready -> durable checkpoint holding the cut -> decision -> finish_drain with the
durable cursors as handoff cursors) and keeps the "manifest" (durable cursors) in memory.

Every emitted row is recorded as ``(topic, partition, offset)`` with its emission time, so tests can
check per-partition contiguity, duplicates, handoff continuity and pauses.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
from confluent_kafka import Producer

from laminar_kafka.coordinator.vnodes.placement import balanced
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode
from laminar_kafka.kafka_source import (
    CheckpointAttempt,
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    SourceCheckpoint,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourcePosition,
    SourceStart,
    TransientError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
SOURCE_IDENTITY = "orders_source"


@dataclass
class Emission:
    """Rows of one batch: ``rows`` is ``[(partition, offset)]``; ``at`` the monotonic emit time."""

    at: float
    topic: str
    partitions: list[int]
    offsets: list[int]


@dataclass
class Node:
    node_id: int
    properties: dict[str, str]
    vnode_count: int
    registry: VnodeRegistry = field(init=False)
    source: KafkaSource | None = None
    emissions: list[Emission] = field(default_factory=list)
    max_records: int = 2000
    _calls: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] | None = None
    _task: asyncio.Task[None] | None = None
    _stop: bool = False
    failure: BaseException | None = None

    def __post_init__(self) -> None:
        self.registry = VnodeRegistry(self.vnode_count)

    async def start(self, position: SourcePosition | None = None) -> None:
        request = SourceStart(
            ConnectorConfig("kafka", self.properties),
            position or SourcePosition.Initial(),
            DeliveryGuarantee.EXACTLY_ONCE,
        )
        for attempt in range(20):  # a fresh topic's leaders may still be settling
            source = KafkaSource()
            source.set_vnode_assignment(SOURCE_IDENTITY, self.registry, self.node_id)
            try:
                await source.start(request)
                break
            except TransientError:
                if attempt == 19:
                    raise
                await asyncio.sleep(0.25)
        self.source = source
        self._calls = asyncio.Queue()
        self._stop = False
        self._task = asyncio.create_task(self._run(), name=f"node-{self.node_id}")

    async def stop(self) -> None:
        self._stop = True
        if self._task is not None:
            await self._task
        if self.source is not None:
            await self.source.close()
        self.source = None

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` on the node loop between two polls (as the runtime handles events)."""
        assert self._calls is not None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._calls.put((fn, future))
        return await future

    async def _run(self) -> None:
        source = self.source
        assert source is not None and self._calls is not None
        event = source.data_ready_notify()
        assert event is not None
        try:
            while not self._stop:
                while not self._calls.empty():
                    fn, future = self._calls.get_nowait()
                    try:
                        future.set_result(await fn())
                    except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                        future.set_exception(exc)
                source.drive_control_plane()
                if source.try_checkpoint() is None:
                    await asyncio.sleep(0.002)
                    continue
                batch = await source.poll_batch(self.max_records)
                if batch is not None:
                    self._record(batch.records)
                    continue
                try:
                    await asyncio.wait_for(event.wait(), 0.01)
                except asyncio.TimeoutError:
                    pass
        except BaseException as exc:  # noqa: BLE001 - kept for the test to assert on
            self.failure = exc
            while not self._calls.empty():
                _fn, future = self._calls.get_nowait()
                future.set_exception(exc)

    def _record(self, records: pa.RecordBatch) -> None:
        topics = records.column("_topic").to_pylist()
        self.emissions.append(
            Emission(
                time.monotonic(),
                topics[0],
                records.column("_partition").to_pylist(),
                records.column("_offset").to_pylist(),
            )
        )

    def rows(self) -> list[tuple[int, int, float]]:
        """``(partition, offset, emitted_at)`` of every emitted row, in emission order."""
        return [(p, o, e.at) for e in self.emissions for p, o in zip(e.partitions, e.offsets, strict=True)]


class Producing:
    """Produce to every partition of ``topic`` at about ``rate`` records/s on a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
        self._topic = topic
        self._partitions = partitions
        self._rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.errors: list[str] = []
        self.sent = 0

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            if self._producer.flush(30):
                self.errors.append("undelivered records at stop")

    def _run(self) -> None:
        interval = 0.01
        per_tick = max(1, int(self._rate * interval))
        next_tick = time.monotonic()
        while not self._stop.is_set():
            for _ in range(per_tick):
                partition = self.sent % self._partitions
                try:
                    self._producer.produce(self._topic, b"v%d" % self.sent, partition=partition, on_delivery=self._done)
                except BufferError:
                    self._producer.poll(0.01)
                    continue
                self.sent += 1
            self._producer.poll(0)
            next_tick += interval
            self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def _done(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))


@dataclass
class RoundReport:
    drain_id: AssignmentDrainId
    outcome: SourceDrainOutcome
    moved: dict[TopicPartitionId, tuple[int, int]]  # partition -> (old owner, new owner)
    cut: dict[str, int]
    drain_s: float
    #: monotonic times of the round's steps: began, ready (every node drained), durable (the
    #: checkpoint holding the cut), finished (every node's finish_drain returned), published
    times: dict[str, float] = field(default_factory=dict)


class Driver:
    """Plays the coordinator for ``nodes``: versions, rounds, durable cursors."""

    def __init__(self, topic: str, partitions: int, vnode_count: int = 64, leader_token: int = 7) -> None:
        self.topic = topic
        self.partitions = [(topic, p) for p in range(partitions)]
        self.vnode_count = vnode_count
        self.leader_token = leader_token
        self.nodes: dict[int, Node] = {}
        self.snapshot = AssignmentSnapshot.initial(vnode_count)
        self.durable: dict[str, int] = {}
        self.epoch = 0
        self.routes = {tp: partition_vnode(SOURCE_IDENTITY, tp[0], tp[1], vnode_count) for tp in self.partitions}

    # -- views ------------------------------------------------------------------------------------

    def load(self) -> dict[int, int]:
        load: dict[int, int] = {}
        for vnode in self.routes.values():
            load[vnode] = load.get(vnode, 0) + 1
        return load

    def owner_of(self, tp: TopicPartitionId, owners: Sequence[int] | None = None) -> int:
        return (owners or self.snapshot.owners)[self.routes[tp]]

    def owned(self, node_id: int, owners: Sequence[int] | None = None) -> set[TopicPartitionId]:
        return {tp for tp in self.partitions if self.owner_of(tp, owners) == node_id}

    def place(self, nodes: Sequence[int]) -> tuple[int, ...]:
        return balanced(self.snapshot.owners, nodes, self.load())

    # -- control ----------------------------------------------------------------------------------

    def publish(self, owners: Sequence[int]) -> AssignmentSnapshot:
        self.snapshot = self.snapshot.next(self.snapshot.version + 1, owners)
        for node in self.nodes.values():
            node.registry.publish(self.snapshot.version, self.snapshot.owners)
        return self.snapshot

    async def add_node(self, node: Node, position: SourcePosition | None = None) -> None:
        self.nodes[node.node_id] = node
        if self.snapshot.version:
            node.registry.publish(self.snapshot.version, self.snapshot.owners)
        await node.start(position)

    async def wait_reconciled(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.raise_failures()
            if all(n.source is None or n.source.checkpoint_ready() for n in self.nodes.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("nodes did not reconcile")
            await asyncio.sleep(0.005)

    def raise_failures(self) -> None:
        for node in self.nodes.values():
            if node.failure is not None:
                raise AssertionError(f"node {node.node_id} failed: {node.failure!r}") from node.failure

    async def checkpoint(self) -> None:
        """One epoch: each node's cursors of the partitions it owns at the current version become durable."""
        self.epoch += 1
        version = self.snapshot.version
        for node in self.nodes.values():
            if node.source is None:
                continue
            source = node.source
            checkpoint = await node.call(lambda s=source: _async(s.try_checkpoint))
            assert checkpoint is not None, f"node {node.node_id} not reconciled at epoch {self.epoch}"
            assert checkpoint.assignment_version == version
            mine = {f"{t}:{p}" for t, p in self.owned(node.node_id)}
            assert set(checkpoint.offsets) == mine, (node.node_id, sorted(checkpoint.offsets), sorted(mine))
            self.durable.update(checkpoint.offsets)

    async def round(
        self,
        target: Sequence[int],
        outcome: SourceDrainOutcome = SourceDrainOutcome.COMMIT,
        deadline_s: float = 20.0,
    ) -> RoundReport:
        """Run one round to ``target`` owners and resolve it with ``outcome``."""
        predecessor = self.snapshot
        target = tuple(target)
        drain_id = AssignmentDrainId.for_round(predecessor, target, self.leader_token)
        moved = {
            tp: (self.owner_of(tp), self.owner_of(tp, target))
            for tp in self.partitions
            if self.owner_of(tp) != self.owner_of(tp, target)
        }
        for node in self.nodes.values():
            node.registry.begin_round(drain_id, target)
        started = time.monotonic()
        deadline = started + deadline_s
        request = SourceDrainRequest(drain_id)
        active = [n for n in self.nodes.values() if n.source is not None]
        for node in active:
            source = node.source
            await node.call(lambda s=source: _async(s.begin_drain, request, deadline))
        for node in active:
            source = node.source
            while not await node.call(lambda s=source: _async(s.poll_drain_ready, drain_id)):
                self.raise_failures()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node.node_id} did not drain")
                await asyncio.sleep(0.002)
        ready_at = time.monotonic()
        drain_s = ready_at - started
        await self.checkpoint()  # the epoch whose manifest holds the cut
        durable_at = time.monotonic()
        cut = {f"{t}:{p}": self.durable[f"{t}:{p}"] for t, p in moved}
        resolution = SourceDrainResolution(drain_id, outcome)
        for node in self.nodes.values():
            node.registry.clear_round(drain_id)
        finish_by = time.monotonic() + 20.0
        handoff = dict(self.durable)
        # every node resolves on its own (they are separate processes in a cluster)
        await asyncio.gather(
            *(node.call(lambda s=node.source: s.finish_drain(resolution, finish_by, handoff)) for node in active)
        )
        finished_at = time.monotonic()
        self.publish(target if outcome is SourceDrainOutcome.COMMIT else predecessor.owners)
        times = {"began": started, "ready": ready_at, "durable": durable_at, "finished": finished_at,
                 "published": time.monotonic()}
        return RoundReport(drain_id, outcome, moved, cut, drain_s, times)


async def _async(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


def emitted_by_partition(nodes: Sequence[Node]) -> dict[int, list[tuple[int, int, float]]]:
    """partition -> [(offset, node_id, at)] over every node, sorted by offset."""
    result: dict[int, list[tuple[int, int, float]]] = {}
    for node in nodes:
        for partition, offset, at in node.rows():
            result.setdefault(partition, []).append((offset, node.node_id, at))
    for rows in result.values():
        rows.sort()
    return result


def assert_contiguous(
    nodes: Sequence[Node], ends: dict[int, int], starts: dict[int, int] | None = None
) -> None:
    """Per partition the union of emitted offsets is exactly ``starts[p]..ends[p]-1``, no duplicate."""
    by_partition = emitted_by_partition(nodes)
    for partition, end in ends.items():
        offsets = [o for o, _n, _t in by_partition.get(partition, [])]
        start = (starts or {}).get(partition, 0)
        duplicates = len(offsets) - len(set(offsets))
        assert duplicates == 0, f"partition {partition}: {duplicates} duplicate offset(s)"
        assert offsets == list(range(start, end)), (
            f"partition {partition}: emitted {len(offsets)} offsets, expected {start}..{end - 1}; "
            f"first gap near {next((a for a, b in zip(offsets, range(start, end), strict=False) if a != b), None)}"
        )


async def wait_caught_up(nodes: Sequence[Node], ends: dict[int, int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for node in nodes:
            if node.failure is not None:
                raise AssertionError(f"node {node.node_id} failed: {node.failure!r}") from node.failure
        reached: dict[int, int] = {}
        for node in nodes:
            for partition, offset, _at in node.rows():
                reached[partition] = max(reached.get(partition, -1), offset)
        if all(reached.get(p, -1) >= end - 1 for p, end in ends.items() if end > 0):
            return
        if time.monotonic() > deadline:
            behind = {p: (reached.get(p, -1), end) for p, end in ends.items() if reached.get(p, -1) < end - 1}
            raise TimeoutError(f"not caught up: {behind}")
        await asyncio.sleep(0.02)


def resume_position(checkpoint: SourceCheckpoint, epoch: int = 1) -> SourcePosition:
    return SourcePosition.Resume(CheckpointAttempt(epoch, epoch), checkpoint)
