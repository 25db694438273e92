"""Three nodes, a seeded random sequence of joins and leaves (commits and some aborts), against a real
Kafka under continuous production: after every round each partition is read by exactly one node at
the published version; at the end the union of emitted offsets is contiguous with no duplicate."""
from __future__ import annotations

import asyncio
import random

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
from tests.integration.kafka_source.test_drain import PARTITIONS, node_props
from tests.support import create_topic, high_watermarks

pytestmark = pytest.mark.timeout(120)

ROUNDS = 8


def check_invariants(driver: Driver) -> None:
    seen: dict[tuple[str, int], int] = {}
    for node in driver.nodes.values():
        assert node.source is not None
        checkpoint = node.source.try_checkpoint()
        assert checkpoint is not None, f"node {node.node_id} not reconciled"
        assert checkpoint.assignment_version == driver.snapshot.version
        for tp in checkpoint.partitions():
            assert tp not in seen, f"{tp} read by nodes {seen[tp]} and {node.node_id}"
            seen[tp] = node.node_id
            assert driver.owner_of(tp) == node.node_id
    assert set(seen) == set(driver.partitions), "every partition has exactly one reader"


async def test_random_joins_and_leaves_keep_every_invariant(kafka, unique) -> None:
    rng = random.Random(20240611)
    topic = unique("drain-random")
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    properties = node_props(kafka.bootstrap, topic, unique("g"))
    driver = Driver(topic, PARTITIONS, vnode_count=32)
    driver.publish([1] * driver.vnode_count)
    history: list[Node] = []

    async def join(node_id: int) -> None:
        node = Node(node_id, properties, driver.vnode_count)
        history.append(node)
        await driver.add_node(node)

    await join(1)
    await driver.wait_reconciled()
    outcomes = {SourceDrainOutcome.COMMIT: 0, SourceDrainOutcome.ABORT: 0}
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=2000) as producing:
            for _ in range(ROUNDS):
                alive = sorted(driver.nodes)
                joinable = [n for n in (1, 2, 3) if n not in alive]
                if joinable and (len(alive) == 1 or rng.random() < 0.5):
                    joiner = rng.choice(joinable)
                    await join(joiner)
                    await driver.wait_reconciled()
                    members = alive + [joiner]
                    leaver = None
                else:
                    leaver = rng.choice(alive)
                    members = [n for n in alive if n != leaver]
                outcome = SourceDrainOutcome.ABORT if rng.random() < 0.25 else SourceDrainOutcome.COMMIT
                target = driver.place(members)
                if target == driver.snapshot.owners:
                    continue
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                await driver.round(target, outcome)
                outcomes[outcome] += 1
                await driver.wait_reconciled()
                check_invariants(driver)
                if leaver is not None and outcome is SourceDrainOutcome.COMMIT:
                    node = driver.nodes.pop(leaver)
                    assert node.source is not None and node.source.checkpoint().is_empty
                    await node.stop()
                    check_invariants(driver)
            producing.stop()
            assert not producing.errors
            ends = high_watermarks(kafka.bootstrap, topic)
            await wait_caught_up(history, ends)
        assert_contiguous(history, ends)
        assert outcomes[SourceDrainOutcome.COMMIT] >= 3
        by_partition = emitted_by_partition(history)
        assert sum(len({n for _o, n, _t in rows}) > 1 for rows in by_partition.values()) >= 1
    finally:
        for node in history:
            await node.stop()
