"""The batch wait (``batch-wait-ms``, default 250) delays neither a drain nor a moved partition's first
fetch: on a trickle (far below ``fetch.min.bytes`` per wait) every fetch of the batching consumer
waits out the 250 ms, and a partition assigned to it joined only the fetch after the one in flight
(first records 0.25-0.5 s after the assignment), while a drain cut at what the last batched fetch
brought (the records of up to 250 ms before it still at the broker).
"""
from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable

import pytest

from laminar_kafka.kafka_source import SourceDrainOutcome
from tests.integration.kafka_source.driver import (
    Driver,
    Node,
    Producing,
    RoundReport,
    assert_contiguous,
    emitted_by_partition,
    wait_caught_up,
)
from tests.integration.kafka_source.helpers import props
from tests.support import create_topic, high_watermarks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

PARTITIONS = 8
#: records/s over all partitions: 100 B records, about 80 KB/s, far below 256 KiB per 250 ms
TRICKLE = 800
ROUNDS = 4


async def test_a_moved_partition_flows_again_without_waiting_for_the_batch_wait(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("handoff")
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    driver = Driver(topic, PARTITIONS)
    properties = props(kafka.bootstrap, topic, unique("g"), include_metadata="_topic,_partition,_offset")
    assert "batch-wait-ms" not in properties  # the default, 250 ms
    driver.publish([1] * driver.vnode_count)
    a, b = Node(1, properties, driver.vnode_count), Node(2, properties, driver.vnode_count)
    await driver.add_node(a)
    await driver.add_node(b)
    await driver.wait_reconciled()
    reports: list[RoundReport] = []
    try:
        with Producing(kafka.bootstrap, topic, PARTITIONS, rate=TRICKLE) as producing:
            await asyncio.sleep(1.0)
            for index in range(ROUNDS):
                report = await driver.round(driver.place([1, 2] if index % 2 == 0 else [1]), SourceDrainOutcome.COMMIT)
                await driver.wait_reconciled()
                reports.append(report)
                await asyncio.sleep(1.2)  # past the reader's fresh window: the next round moves handed-over partitions
            producing.stop()
            assert not producing.errors
            ends = high_watermarks(kafka.bootstrap, topic)
            await wait_caught_up([a, b], ends)
        assert_contiguous([a, b], ends)
        by_partition = emitted_by_partition([a, b])
        pauses: list[float] = []
        first_fetches: list[float] = []
        for report in reports:
            for (_t, p), (old, new) in report.moved.items():
                cut = report.cut[f"{topic}:{p}"]
                last_old = [at for offset, node, at in by_partition[p] if offset == cut - 1 and node == old]
                first_new = [at for offset, node, at in by_partition[p] if offset == cut and node == new]
                assert first_new, f"partition {p}: its new owner emitted nothing from the cut {cut} until the next round"
                first_fetches.append(first_new[0] - report.times["published"])
                if last_old:
                    pauses.append(first_new[0] - last_old[0])
        assert len(first_fetches) >= 8 and len(pauses) >= 4, (first_fetches, pauses)
        # Before: first fetch p50 0.26-0.29 s, pause p50 about 0.5 s (bench/bench_handoff.py).
        assert statistics.median(first_fetches) < 0.15, sorted(first_fetches)
        assert statistics.median(pauses) < 0.25, sorted(pauses)
    finally:
        await a.stop()
        await b.stop()
