"""Edge cases of KafkaSource ownership against a real Kafka: self -> other -> self, stale rounds,
deadline expiry, a Commit before ready, and try_checkpoint while unreconciled."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.devstack.waiting import await_until
from laminar_kafka.kafka_source import (
    DrainError,
    FatalError,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
)
from tests.integration.kafka_source.driver import Node, Producing, assert_contiguous, emitted_by_partition
from tests.integration.kafka_source.test_drain import PARTITIONS, finish, stop_all, two_nodes

pytestmark = pytest.mark.timeout(90)


def _split(key: str) -> tuple[str, int]:
    topic, partition = key.rsplit(":", 1)
    return topic, int(partition)


def commit_directly(bootstrap: str, group: str, topic: str, offsets: dict[str, int]) -> None:
    """Commit group offsets as another member of `group` would."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(*_split(k), o) for k, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str, keys: set[str]) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(*_split(k)) for k in keys])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=10)
    return {f"{tp.topic}:{tp.partition}": tp.offset for tp in result.topic_partitions}


async def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    await await_until(condition, timeout, "the drain condition")


async def test_self_other_self_reacquires_at_the_explicit_cursor(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    sa, sb = a.source, b.source
    assert sa is not None and sb is not None
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=3000) as producing:
            await asyncio.sleep(0.5)
            moving = sorted({driver.routes[(topic, p)] for p in (0, 1, 2)})
            parts = {tp for tp, v in driver.routes.items() if v in moving}
            v1 = driver.snapshot
            owners2 = list(v1.owners)
            for vnode in moving:
                owners2[vnode] = 2
            d1: dict[str, int] = {}
            release_a = asyncio.Event()

            async def hold_a() -> None:  # A stops polling right after this exact cursor
                checkpoint = sa.try_checkpoint()
                assert checkpoint is not None
                d1.update(checkpoint.offsets)
                await release_a.wait()

            held = asyncio.create_task(a.call(hold_a))
            await wait_for(lambda: bool(d1))
            # v2: B takes the vnodes without a drain (A presumed dead); B needs explicit cursors.
            v2 = driver.snapshot = v1.next(2, owners2)
            b.registry.publish(2, owners2)
            await wait_for(lambda: sb.acquisition_needed() is not None)
            assert sb.acquisition_needed() == (2, frozenset(parts))
            assert sb.try_checkpoint() is None and not sb.checkpoint_ready()
            await b.call(lambda: _sync(sb.acquire_partitions, d1, 2))
            await wait_for(sb.checkpoint_ready)
            await wait_for(lambda: all(any(p == tp[1] for p, _o, _t in b.rows()) for tp in parts))
            d2: dict[str, int] = {}
            v3 = driver.snapshot = v2.next(3, v1.owners)

            async def hand_back() -> None:  # B's exact cursor, then v3 before B polls again
                checkpoint = sb.try_checkpoint()
                assert checkpoint is not None and checkpoint.assignment_version == 2
                d2.update(checkpoint.offsets)
                b.registry.publish(3, v3.owners)

            await b.call(hand_back)
            # A looks again only at v3: the vnodes left and came back (changed_at = 3 > 1).
            a.registry.publish(2, owners2)
            a.registry.publish(3, v3.owners)
            release_a.set()
            await held
            await wait_for(lambda: sa.acquisition_needed() is not None)
            assert sa.acquisition_needed() == (3, frozenset(parts))
            assert sa.try_checkpoint() is None
            stale = {f"{t}:{p}" for t, p in parts}
            assert all(d2[k] > d1[k] for k in stale), "B must have read past A's stale cursor"
            await a.call(lambda: _sync(sa.acquire_partitions, {**d1, **d2}, 3))
            await driver.wait_reconciled()
            # Advisory offsets: while B owned the partitions it committed up to its cursor (d2).
            # A checkpoint of A's from before the move (version 1, cursors d1) must not move the
            # group back, and A must not trust its own stale knowledge of the group's offsets.
            group = sa.config.group_id
            commit_directly(kafka.bootstrap, group, topic, {k: d2[k] for k in stale})
            await a.call(lambda: sa.notify_epoch_committed(8, SourceCheckpoint({k: d1[k] for k in stale}, 1)))
            assert group_offsets(kafka.bootstrap, group, topic, stale) == {k: d2[k] for k in stale}
            assert sa.metrics.commit_failures == 0
            await asyncio.sleep(0.3)
            ends = await finish(driver, producing, kafka, topic)
        assert_contiguous([a, b], ends)
        by_partition = emitted_by_partition([a, b])
        for t, p in parts:
            nodes = [n for _o, n, _at in by_partition[p]]
            first_b = nodes.index(2)
            back_at_a = len(nodes) - nodes[::-1].index(2)
            assert by_partition[p][first_b][0] == d1[f"{t}:{p}"]
            assert by_partition[p][back_at_a][0] == d2[f"{t}:{p}"]
            assert set(nodes[back_at_a:]) == {1}
        assert sa.checkpoint().assignment_version == 3
    finally:
        await stop_all(driver)


async def test_stale_superseded_and_repeated_rounds(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    sa = a.source
    assert sa is not None
    try:
        target = driver.place([1, 2])
        v1 = driver.snapshot
        round1 = AssignmentDrainId.for_round(v1, target, 7)
        # not the registry's pending round yet
        with pytest.raises(DrainError, match="pending"):
            await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(round1), time.monotonic() + 10))
        for node in driver.nodes.values():
            node.registry.begin_round(round1, target)
        # a round whose predecessor is not the published version
        stale = AssignmentDrainId(v1.version + 5, v1.version + 6, round1.digest)
        with pytest.raises(DrainError, match="stale"):
            await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(stale), time.monotonic() + 10))
        await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(round1), time.monotonic() + 10))
        await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(round1), time.monotonic() + 10))  # no-op
        other = AssignmentDrainId(v1.version, v1.version + 1, round1.digest + 1)
        with pytest.raises(DrainError, match="active"):
            await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(other), time.monotonic() + 10))
        with pytest.raises(DrainError):
            await a.call(lambda: _sync(sa.poll_drain_ready, other))
        with pytest.raises(DrainError):
            await a.call(
                lambda: sa.finish_drain(SourceDrainResolution(other, SourceDrainOutcome.ABORT), time.monotonic() + 10)
            )
        await wait_for(lambda: sa.poll_drain_ready(round1))
        abort = SourceDrainResolution(round1, SourceDrainOutcome.ABORT)
        await a.call(lambda: sa.finish_drain(abort, time.monotonic() + 10))
        await a.call(lambda: sa.finish_drain(abort, time.monotonic() + 10))  # idempotent
        with pytest.raises(DrainError, match="resolved"):
            await a.call(
                lambda: sa.finish_drain(SourceDrainResolution(round1, SourceDrainOutcome.COMMIT), time.monotonic() + 10)
            )
        for node in driver.nodes.values():
            node.registry.clear_round(round1)
        driver.publish(v1.owners)
        await driver.wait_reconciled()
        # the resolved round cannot start again, and an older round is stale
        with pytest.raises(DrainError):
            await a.call(lambda: _sync(sa.begin_drain, SourceDrainRequest(round1), time.monotonic() + 10))
        assert a.failure is None and sa.checkpoint_ready()
    finally:
        await stop_all(driver)


async def _held_drain(node: Node, drain_id: AssignmentDrainId, deadline_s: float, then) -> None:  # type: ignore[no-untyped-def]
    """On ``node``'s loop with records queued before the boundary: begin the drain, then ``then()``."""
    source = node.source
    assert source is not None

    async def run() -> None:
        event = source.data_ready_notify()
        assert event is not None
        await asyncio.wait_for(event.wait(), 10)  # records are queued: the boundary lands behind them
        source.begin_drain(SourceDrainRequest(drain_id), time.monotonic() + deadline_s)
        assert not source.poll_drain_ready(drain_id)
        await then(source)

    await node.call(run)


async def test_deadline_before_the_boundary_fails_the_generation(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=3000):
            await asyncio.sleep(0.3)
            target = driver.place([1, 2])
            drain_id = AssignmentDrainId.for_round(driver.snapshot, target, 7)
            for node in driver.nodes.values():
                node.registry.begin_round(drain_id, target)

            async def expire(source) -> None:  # type: ignore[no-untyped-def]
                await asyncio.sleep(0.2)  # no poll: the boundary stays behind queued records
                with pytest.raises(FatalError, match="deadline"):
                    source.poll_drain_ready(drain_id)
                with pytest.raises(FatalError):
                    source.try_checkpoint()
                with pytest.raises(FatalError):
                    await source.finish_drain(
                        SourceDrainResolution(drain_id, SourceDrainOutcome.ABORT), time.monotonic() + 10
                    )
                with pytest.raises(FatalError):
                    await source.poll_batch(100)

            await _held_drain(a, drain_id, 0.05, expire)
    finally:
        await stop_all(driver)


async def test_commit_before_the_drain_is_ready_is_refused_and_retires(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=3000):
            await asyncio.sleep(0.3)
            target = driver.place([1, 2])
            drain_id = AssignmentDrainId.for_round(driver.snapshot, target, 7)
            for node in driver.nodes.values():
                node.registry.begin_round(drain_id, target)

            async def early_commit(source) -> None:  # type: ignore[no-untyped-def]
                before = source.checkpoint()
                with pytest.raises(FatalError, match="before the drain was ready"):
                    await source.finish_drain(
                        SourceDrainResolution(drain_id, SourceDrainOutcome.COMMIT), time.monotonic() + 10, {}
                    )
                assert source.checkpoint() == before  # nothing moved
                with pytest.raises(FatalError):
                    await source.poll_batch(100)

            await _held_drain(a, drain_id, 10.0, early_commit)
    finally:
        await stop_all(driver)


async def _sync(fn, *args):  # type: ignore[no-untyped-def]
    return fn(*args)
