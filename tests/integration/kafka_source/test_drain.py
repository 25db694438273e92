"""KafkaSource drain / commit / abort handoff against a real Kafka, driven by the in-process driver."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from laminar_kafka.kafka_source import SourceDrainOutcome
from tests.integration.kafka_source.driver import (
    Driver,
    Node,
    Producing,
    assert_contiguous,
    emitted_by_partition,
    wait_caught_up,
)
from tests.integration.kafka_source.helpers import props
from tests.support import create_topic, high_watermarks

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 8


def node_props(bootstrap: str, topic: str, group: str) -> dict[str, str]:
    return props(bootstrap, topic, group, include_metadata="_topic,_partition,_offset")


async def two_nodes(kafka, unique: Callable[[str], str]) -> tuple[Driver, Node, Node, str]:
    topic = unique("drain")
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    driver = Driver(topic, PARTITIONS)
    properties = node_props(kafka.bootstrap, topic, unique("g"))
    driver.publish([1] * driver.vnode_count)
    a = Node(1, properties, driver.vnode_count)
    b = Node(2, properties, driver.vnode_count)
    await driver.add_node(a)
    await driver.add_node(b)
    await driver.wait_reconciled()
    return driver, a, b, topic


async def finish(driver: Driver, producing: Producing, kafka, topic: str) -> dict[int, int]:
    producing.stop()
    assert not producing.errors
    ends = high_watermarks(kafka.bootstrap, topic)
    await wait_caught_up(list(driver.nodes.values()), ends)
    return ends


async def stop_all(driver: Driver) -> None:
    for node in driver.nodes.values():
        await node.stop()


async def test_commit_round_moves_partitions_at_the_cut(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=4000) as producing:
            await asyncio.sleep(0.5)
            report = await driver.round(driver.place([1, 2]), SourceDrainOutcome.COMMIT)
            assert report.moved and all(old == 1 and new == 2 for old, new in report.moved.values())
            await driver.wait_reconciled()
            await asyncio.sleep(0.5)
            ends = await finish(driver, producing, kafka, topic)
        assert_contiguous([a, b], ends)
        by_partition = emitted_by_partition([a, b])
        for (t, p), _move in report.moved.items():
            cut = report.cut[f"{t}:{p}"]
            rows = by_partition[p]
            from_a = [o for o, n, _ in rows if n == 1]
            from_b = [o for o, n, _ in rows if n == 2]
            assert from_b and from_b[0] == cut, (p, cut, from_b[:3])
            assert not from_a or from_a[-1] == cut - 1
        stay = [p for p in range(PARTITIONS) if (topic, p) not in report.moved]
        for p in stay:
            assert {n for _o, n, _ in by_partition[p]} == {1}
        assert a.source is not None and a.source.metrics.drains_committed == 1
    finally:
        await stop_all(driver)


async def test_abort_round_resumes_at_the_cut_and_the_target_never_emits(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=4000) as producing:
            await asyncio.sleep(0.5)
            report = await driver.round(driver.place([1, 2]), SourceDrainOutcome.ABORT)
            await driver.wait_reconciled()
            assert driver.snapshot.owners == (1,) * driver.vnode_count
            assert a.source is not None and a.source.checkpoint().assignment_version == driver.snapshot.version
            await asyncio.sleep(0.5)
            ends = await finish(driver, producing, kafka, topic)
        assert_contiguous([a, b], ends)
        assert b.rows() == []
        by_partition = emitted_by_partition([a])
        for (_t, p) in report.moved:
            cut = report.cut[f"{topic}:{p}"]
            offsets = [o for o, _n, _at in by_partition[p]]
            assert cut in offsets and cut - 1 in offsets or cut == 0  # A went on exactly at the cut
        assert a.source.metrics.drains_aborted == 1
    finally:
        await stop_all(driver)


async def test_abort_before_the_boundary_is_consumed_rewinds_to_the_pause_position(kafka, unique) -> None:
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=4000) as producing:
            await asyncio.sleep(0.3)
            target = driver.place([1, 2])
            predecessor = driver.snapshot
            from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
            from laminar_kafka.kafka_source import SourceDrainRequest, SourceDrainResolution

            drain_id = AssignmentDrainId.for_round(predecessor, target, 7)
            for node in driver.nodes.values():
                node.registry.begin_round(drain_id, target)
            source = a.source
            assert source is not None

            async def begin_and_abort() -> None:  # no poll in between: the boundary is still queued
                source.begin_drain(SourceDrainRequest(drain_id), time.monotonic() + 10)
                await source.finish_drain(
                    SourceDrainResolution(drain_id, SourceDrainOutcome.ABORT), time.monotonic() + 10
                )

            await a.call(begin_and_abort)
            for node in driver.nodes.values():
                node.registry.clear_round(drain_id)
            driver.publish(predecessor.owners)
            await driver.wait_reconciled()
            await asyncio.sleep(0.3)
            ends = await finish(driver, producing, kafka, topic)
        assert_contiguous([a, b], ends)
        assert b.rows() == []
    finally:
        await stop_all(driver)


async def test_partitions_that_stay_keep_flowing_during_the_drain(kafka, unique) -> None:
    """While a drain waits (held open between ready and the decision), kept partitions emit on."""
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=4000) as producing:
            await asyncio.sleep(2.0)  # past the start-up backlog: the steady window sees the production rate
            target = driver.place([1, 2])
            kept = {p for (t, p) in driver.owned(1, target)}
            from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
            from laminar_kafka.kafka_source import SourceDrainRequest, SourceDrainResolution

            drain_id = AssignmentDrainId.for_round(driver.snapshot, target, 7)
            for node in driver.nodes.values():
                node.registry.begin_round(drain_id, target)
            source = a.source
            assert source is not None
            window = 1.5
            before_start = time.monotonic()
            await asyncio.sleep(window)
            began = time.monotonic()
            await a.call(lambda: _sync(source.begin_drain, SourceDrainRequest(drain_id), began + 30))
            while not await a.call(lambda: _sync(source.poll_drain_ready, drain_id)):
                await asyncio.sleep(0.002)
            await asyncio.sleep(window)
            ended = time.monotonic()
            await a.call(
                lambda: source.finish_drain(SourceDrainResolution(drain_id, SourceDrainOutcome.ABORT), time.monotonic() + 10)
            )
            for node in driver.nodes.values():
                node.registry.clear_round(drain_id)
            driver.publish(driver.snapshot.owners)
            await driver.wait_reconciled()
            ends = await finish(driver, producing, kafka, topic)
        rows = a.rows()
        steady = sum(1 for p, _o, at in rows if p in kept and before_start <= at < began)
        during = sum(1 for p, _o, at in rows if p in kept and began <= at < ended)
        ratio = (during / (ended - began)) / (steady / (began - before_start))
        assert steady > 0 and ratio >= 0.8, (steady, during, ratio)
        assert_contiguous([a, b], ends)
    finally:
        await stop_all(driver)


async def _sync(fn, *args):  # type: ignore[no-untyped-def]
    return fn(*args)


async def test_commit_there_and_back_reacquires_a_partition_paused_earlier(kafka, unique) -> None:
    """A -> B then B -> A in one generation: a partition A paused for the first drain fetches again."""
    driver, a, b, topic = await two_nodes(kafka, unique)
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=3000) as producing:
            await asyncio.sleep(0.3)
            there = await driver.round(driver.place([1, 2]), SourceDrainOutcome.COMMIT)
            await driver.wait_reconciled()
            await asyncio.sleep(0.3)
            back = await driver.round(driver.place([1]), SourceDrainOutcome.COMMIT)
            assert set(back.moved) == set(there.moved)
            await driver.wait_reconciled()
            await asyncio.sleep(0.3)
            ends = await finish(driver, producing, kafka, topic)
        assert_contiguous([a, b], ends)
        by_partition = emitted_by_partition([a, b])
        for t, p in back.moved:
            cut = back.cut[f"{t}:{p}"]
            assert [n for o, n, _ in by_partition[p] if o >= cut] == [1] * (ends[p] - cut)
    finally:
        await stop_all(driver)
