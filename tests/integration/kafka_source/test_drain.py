"""KafkaSource drain / commit / abort handoff against a real Kafka, driven by the in-process driver."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from kafka_source import SourceDrainOutcome
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
