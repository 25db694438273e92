"""In-place acquisition (reconcile without a drain) and advisory commits while the FIFO is full.

The runtime holds intake (no ``poll_batch``) while ``checkpoint_ready()`` is False, so nothing
drains the byte-bounded FIFO during a reconciliation: the assignment change must complete on its
own, with the FIFO at its cap and a large backlog behind it in the client, and the records already
queued for partitions the source keeps must be emitted afterwards exactly once.

The runtime also awaits ``notify_epoch_committed`` between two polls (on every ``EpochCommitted``,
held intake or not). librdkafka delivers a commit's result only inside ``consume``, which the
reader stops calling at the byte cap; the source must still get the result promptly, or every
committed epoch freezes the node's loop (no ``drive_control_plane``, no polls) for the whole
request timeout.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from laminar_kafka.devstack.waiting import await_until
from laminar_kafka.kafka_source import SourceCheckpoint
from laminar_kafka.kafka_source.read.fifo import MESSAGE_OVERHEAD_BYTES
from tests.integration.kafka_source.driver import Driver, Node, assert_contiguous, wait_caught_up
from tests.integration.kafka_source.helpers import props, start_source
from tests.support import create_topic, high_watermarks, produce

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 8
RECORDS = 40_000
VALUE = b"x" * 200
#: An advisory commit waited for by the caller must finish far below the source's request timeout (10 s).
COMMIT_BOUND_S = 3.0


async def _wait_for(condition: Callable[[], bool], what: str, timeout: float) -> None:
    await await_until(condition, timeout, what)


@pytest.mark.parametrize("poll_first", [False, True], ids=["held-from-start", "after-polling"])
async def test_acquisition_completes_while_the_fifo_is_full(kafka, unique, poll_first: bool) -> None:
    topic = unique("reconcile-bp")
    create_topic(kafka.bootstrap, topic, PARTITIONS)
    produce(kafka.bootstrap, topic, [VALUE] * RECORDS)
    ends = high_watermarks(kafka.bootstrap, topic)
    driver = Driver(topic, PARTITIONS)
    # node 1 starts with the vnodes of about 3 partitions; the others belong to a node that is gone
    # (whole vnodes: two partitions of one vnode always go together, whatever the topic's name hashes to)
    first = _partitions_of_some_vnodes(driver, at_least=3)
    mine = {driver.routes[tp] for tp in first}
    owners = [1 if vnode in mine else 2 for vnode in range(driver.vnode_count)]
    driver.publish(owners)
    properties = props(
        kafka.bootstrap, topic, unique("g"),
        include_metadata="_topic,_partition,_offset",
        **{"max-fetched-bytes": "65536", "consume-chunk-records": "200"},
    )
    a = Node(1, properties, driver.vnode_count, max_records=500)
    await driver.add_node(a)
    source = a.source
    assert source is not None
    try:
        await driver.wait_reconciled()
        fifo = source._fifo  # the precondition is a full FIFO
        assert fifo is not None
        if poll_first:
            await _wait_for(lambda: len(a.rows()) > 1000, "first rows", 30)
        # hold the node between two polls until the FIFO is at its cap (a large backlog behind it)
        full = asyncio.Event()

        async def wait_full() -> None:
            await _wait_for(lambda: fifo.nbytes >= fifo.max_bytes, "a full FIFO", 30)
            full.set()

        await a.call(wait_full)
        assert full.is_set()
        emitted_before = len(a.rows())
        # v2: node 1 takes every vnode without a drain; it needs explicit cursors (none durable)
        driver.publish([1] * driver.vnode_count)
        await _wait_for(lambda: source.acquisition_needed() is not None, "acquisition_needed", 10)
        needed = source.acquisition_needed()
        assert needed is not None
        version, partitions = needed
        assert version == 2 and partitions == set(driver.partitions) - driver.owned(1, owners)
        assert partitions == set(driver.partitions) - first and len(partitions) >= 3
        await a.call(lambda: _offer(source, {}, 2))
        started = time.monotonic()
        # an epoch commits while intake is held: the runtime awaits the advisory commit inline
        durable = SourceCheckpoint({f"{t}:{p}": 1 for t, p in sorted(first)}, 1)
        await a.call(lambda: source.notify_epoch_committed(1, durable))
        assert time.monotonic() - started < COMMIT_BOUND_S
        assert source.metrics.commits == 1 and source.metrics.commit_failures == 0
        await driver.wait_reconciled(timeout=15.0)
        assert time.monotonic() - started < 15.0
        assert source.metrics.reconciliations >= 1
        await wait_caught_up([a], ends, timeout=60.0)
        assert len(a.rows()) > emitted_before
    finally:
        await a.stop()
    driver.raise_failures()
    assert_contiguous([a], ends)


def _partitions_of_some_vnodes(driver: Driver, at_least: int) -> set[tuple[str, int]]:
    """The partitions of the fewest-partition vnodes, taken whole until there are ``at_least``."""
    by_vnode: dict[int, set[tuple[str, int]]] = {}
    for tp, vnode in driver.routes.items():
        by_vnode.setdefault(vnode, set()).add(tp)
    taken: set[tuple[str, int]] = set()
    for group in sorted(by_vnode.values(), key=lambda g: (len(g), min(g))):
        if len(taken) >= at_least:
            break
        taken |= group
    return taken


async def _offer(source, cursors: dict[str, int], version: int) -> None:  # type: ignore[no-untyped-def]
    source.acquire_partitions(cursors, version)


async def test_advisory_commit_completes_while_the_fifo_is_full(kafka, unique) -> None:
    topic = unique("commit-bp")
    create_topic(kafka.bootstrap, topic, 2)
    produce(kafka.bootstrap, topic, [VALUE] * 20_000)
    properties = props(
        kafka.bootstrap, topic, unique("g"), **{"max-fetched-bytes": "65536", "consume-chunk-records": "200"}
    )
    source = await start_source(properties)
    try:
        fifo = source._fifo  # the precondition is a full FIFO
        assert fifo is not None
        await _wait_for(lambda: fifo.nbytes >= fifo.max_bytes, "a full FIFO", 30)
        full_at = fifo.nbytes  # nothing is polled below, so the FIFO only grows
        for epoch in (1, 2, 3):
            started = time.monotonic()
            cursors = {f"{topic}:{p}": 10 * epoch for p in range(2)}
            await source.notify_epoch_committed(epoch, SourceCheckpoint(cursors))
            assert time.monotonic() - started < COMMIT_BOUND_S, f"commit {epoch} waited for the FIFO"
        assert source.metrics.commits == 3 and source.metrics.commit_failures == 0
        # serving the commit results takes at most a few records past the cap, never a chunk
        assert fifo.nbytes - full_at <= 3 * 20 * (len(VALUE) + MESSAGE_OVERHEAD_BYTES)
        batch = await source.poll_batch(10)
        assert batch is not None and batch.records.column("_offset").to_pylist()[:1] == [0]
    finally:
        await source.close()
