"""Test doubles shared by the runtime's unit tests: an in-memory coordinator the test drives, and
helpers that await conditions (never a sleep followed by a negative assertion)."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.sink import ParquetSink, list_published
from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime
from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    Coordinator,
    CoordinatorMetrics,
    EpochAck,
    EpochCommitted,
    EventCallback,
    Manifest,
    Member,
)
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.devstack.waiting import await_until


class FakeCoordinator(Coordinator):
    """Records acks; the test drives events through `emit`."""

    node_id = 1

    def __init__(self) -> None:
        self._boot = "boot-1"
        self._callbacks: list[EventCallback] = []
        self.acks: list[EpochAck] = []
        self.manifests: dict[int, Manifest] = {}
        self.rejoins = 0
        self.topic_ids: dict[str, str] = {}
        self.settings: dict[str, str] = {}
        self.snapshot = AssignmentSnapshot.initial(4).next(1, [1, 1, 1, 1])
        self.drain_reports: list[AssignmentDrainId] = []
        #: the ``after_epoch`` of every ``request_epoch``
        self.epoch_asks: list[int] = []

    @property
    def boot_id(self) -> str:
        return self._boot

    @property
    def metrics(self) -> CoordinatorMetrics:
        return CoordinatorMetrics()

    def subscribe(self, callback: EventCallback) -> None:
        self._callbacks.append(callback)

    def emit(self, event: object) -> None:
        for callback in self._callbacks:
            callback(event)  # type: ignore[arg-type]

    def start(self, timeout: float = 30.0) -> None:
        self.emit(AssignmentChanged(self.snapshot, max(self.manifests, default=0)))

    def stop(self) -> None:
        pass

    def rejoin(self) -> None:
        self.rejoins += 1
        self._boot = f"boot-{self.rejoins + 1}"

    def is_leader(self) -> bool:
        return True

    def members(self) -> tuple[Member, ...]:
        return (Member(1, self._boot),)

    def assignment(self) -> AssignmentSnapshot:
        return self.snapshot

    def request_leave(self) -> None:
        pass

    def report_drain_ready(self, drain_id: AssignmentDrainId) -> None:
        self.drain_reports.append(drain_id)

    def ack_epoch(self, ack: EpochAck) -> None:
        self.acks.append(ack)

    def latest_manifest(self) -> Manifest | None:
        return self.manifests[max(self.manifests)] if self.manifests else None

    def manifest(self, epoch: int) -> Manifest:
        if epoch not in self.manifests:
            raise CoordinatorError(f"no manifest {epoch}")
        return self.manifests[epoch]

    def set_vnode_load(self, load: Mapping[int, int]) -> None:
        pass

    def request_epoch(self, after_epoch: int) -> None:
        self.epoch_asks.append(after_epoch)

    def pin_start(self, manifest: Manifest) -> Manifest:
        self.manifests.setdefault(0, manifest)
        return self.manifests[0]

    def pin_topic_ids(self, ids: Mapping[str, str]) -> dict[str, str]:
        for topic, topic_id in ids.items():
            self.topic_ids.setdefault(topic, topic_id)
        return {topic: self.topic_ids[topic] for topic in ids}

    def pin_setting(self, name: str, value: str | None) -> str | None:
        return self.settings.get(name) if value is None else self.settings.setdefault(name, value)

    def commit(self, ack: EpochAck, other_acks: tuple[tuple[int, str], ...] = ()) -> Manifest:
        """Write the manifest of ``ack``'s epoch: the previous manifest's cursors, updated by the ack's
        (``other_acks``: (node, boot) of other nodes that acked the epoch too, for its ``acked_by``)."""
        previous = self.latest_manifest()
        cursors = {s: dict(c) for s, c in previous.cursors.items()} if previous is not None else {}
        for source, acked in ack.cursors.items():
            cursors.setdefault(source, {}).update(acked)
        manifest = Manifest(ack.epoch, ack.assignment_version, cursors, ack.outputs, ((1, ack.boot_id), *other_acks))
        self.manifests[ack.epoch] = manifest
        self.emit(EpochCommitted(manifest))
        return manifest


async def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    await await_until(predicate, timeout, "the runtime condition")


def parquet_sink(runtime: NodeRuntime) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root of ``runtime``'s sink (a :class:`ParquetSink` in these tests)."""
    sink = runtime.sink
    assert isinstance(sink, ParquetSink)
    return sink.fs, sink.root


def published_offsets(runtime: NodeRuntime) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for path in list_published(*parquet_sink(runtime)):
        table = pq.read_table(path)
        for p, o in zip(table["_partition"].to_pylist(), table["_offset"].to_pylist(), strict=True):
            result.setdefault(p, []).append(o)
    return {p: sorted(o) for p, o in result.items()}
