"""PartitionedLogSource's own rules: a subclass names its cursor format, every cursor it is given
goes through that format's check (mappings too), and in vnode mode partitions that appear in the
log join the routing table through the ownership machine."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from laminar_kafka.connector.checkpoint import CursorFormat, SourceCheckpoint
from laminar_kafka.connector.errors import CheckpointError
from laminar_kafka.connector.log_source import PartitionedLogSource, PartitionRead
from laminar_kafka.connector.memory import MemoryLog, MemorySource
from laminar_kafka.connector.owner_map import route_partitions
from laminar_kafka.connector.protocol import ConnectorConfig, DeliveryGuarantee, InitialPosition, SourceStart
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError

TOPIC = "events"
IDENTITY = "memory-source"
VNODES = 8
START = SourceStart(ConnectorConfig("memory", {}), InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE)


class Nameless(PartitionedLogSource):
    """A log source whose author forgot ``cursor_format``."""

    def log_partitions(self) -> Iterable[TopicPartitionId]:
        return ()

    async def read_records(self, starts: Mapping[TopicPartitionId, int], max_records: int) -> list[PartitionRead]:
        return []

    async def commit_advisory(self, offsets: Mapping[TopicPartitionId, int]) -> None:
        return None


class EvenOnly(CursorFormat):
    """A cursor format whose positions are even (its own rule beyond the checkpoint's)."""

    def check_cursor(self, partition: TopicPartitionId, position: int) -> None:
        if position % 2:
            raise CheckpointError(f"odd cursor {position} for {partition}")


class EvenSource(MemorySource):
    cursor_format = EvenOnly("even")


def test_a_subclass_without_cursor_format_fails_at_construction_naming_the_attribute() -> None:
    with pytest.raises(ConfigurationError, match=r"Nameless must set the class attribute cursor_format.*CursorFormat"):
        Nameless()


def test_a_subclass_with_a_non_format_cursor_format_is_refused_too() -> None:
    class Wrong(Nameless):
        cursor_format = "mine"  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match="cursor_format"):
        Wrong()


async def _vnode_source(source: MemorySource, registry: VnodeRegistry, self_id: int = 1) -> MemorySource:
    source.set_vnode_assignment(IDENTITY, registry, self_id)
    await source.start(START)
    return source


async def test_acquire_partitions_checks_a_mapping_with_the_cursor_format() -> None:
    registry = VnodeRegistry(VNODES)
    registry.publish(1, [1] * VNODES)
    source = await _vnode_source(EvenSource(MemoryLog.of(TOPIC, 2, 4)), registry)
    with pytest.raises(CheckpointError, match="odd cursor 3"):
        source.acquire_partitions({f"{TOPIC}:0": 3}, 1)
    with pytest.raises(CheckpointError, match="odd cursor 3"):
        source.acquire_partitions(SourceCheckpoint({f"{TOPIC}:0": 3}), 1)
    source.acquire_partitions({f"{TOPIC}:0": 2}, 1)  # an even cursor is taken
    assert source.acquired == [(1, {f"{TOPIC}:0": 2})]


async def test_handoff_cursors_given_as_a_mapping_go_through_the_cursor_format() -> None:
    registry = VnodeRegistry(VNODES)
    registry.publish(1, [1] * VNODES)
    source = await _vnode_source(EvenSource(MemoryLog.of(TOPIC, 2, 4)), registry)
    with pytest.raises(CheckpointError, match="odd cursor 5"):
        source._cursors_of({f"{TOPIC}:1": 5})
    with pytest.raises(CheckpointError, match="invalid offset"):
        source._cursors_of({f"{TOPIC}:1": -1})
    assert source._cursors_of({f"{TOPIC}:1": 6}) == {(TOPIC, 1): 6}


def _owners_giving(mine: set[int], self_id: int, other: int) -> list[int]:
    return [self_id if vnode in mine else other for vnode in range(VNODES)]


async def test_a_partition_that_appears_in_the_log_is_routed_and_acquired_in_vnode_mode() -> None:
    log = MemoryLog.of(TOPIC, 2, 3)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, [1] * VNODES)  # node 1 owns every vnode
    source = await _vnode_source(MemorySource(log), registry)
    assert source.checkpoint_ready() and set(source.cursor) == {(TOPIC, 0), (TOPIC, 1)}

    new = (TOPIC, 2)
    log.records[new] = [7, 8]
    source.drive_control_plane()
    assert source.own is not None and new in source.own.routes and new in source.own.owned
    assert not source.checkpoint_ready()  # owned and pending: waits for its cursor
    assert source.acquisition_needed() == (1, frozenset({new}))
    source.acquire_partitions({}, 1)  # the manifest lacks it: read from position 0
    source.drive_control_plane()
    assert source.cursor[new] == 0 and source.checkpoint_ready()
    batch = await source.poll_batch(100)
    assert batch is not None and batch.checkpoint.offsets[f"{TOPIC}:2"] == 2


async def test_a_new_partition_of_another_node_is_routed_but_not_read() -> None:
    log = MemoryLog.of(TOPIC, 1, 1)
    new = (TOPIC, 1)
    vnode = route_partitions(IDENTITY, [new], VNODES)[new]
    registry = VnodeRegistry(VNODES)
    registry.publish(1, _owners_giving(set(range(VNODES)) - {vnode}, 1, 2))
    source = await _vnode_source(MemorySource(log), registry)
    log.records[new] = [1]
    source.drive_control_plane()
    assert source.own is not None and new in source.own.routes and new not in source.own.owned
    assert source.acquisition_needed() is None and new not in source.cursor


async def test_growth_waits_while_the_source_is_pinned_behind_the_published_version() -> None:
    log = MemoryLog.of(TOPIC, 1, 1)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, [1] * VNODES)
    source = await _vnode_source(MemorySource(log), registry)
    assert source.own is not None
    pinned = source.own
    registry.publish(2, [1] * VNODES)
    log.records[(TOPIC, 1)] = [1]
    # pinned to 1 while 2 is published: can_route_more is False, so the reconcile to 2 goes first
    assert not pinned.can_route_more(registry.snapshot())
    source.drive_control_plane()
    assert source.version == 2 and (TOPIC, 1) not in source.own.routes
    source.drive_control_plane()  # pinned to the published version now: the new partition joins
    assert (TOPIC, 1) in source.own.routes
    assert source.acquisition_needed() == (2, frozenset({(TOPIC, 1)}))
