"""A broker restart in the middle of a KafkaSource stream loses and duplicates nothing."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from tests import support
from tests.integration.kafka_source.helpers import offsets_by_partition, props, rows, start_source

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(240)]


async def test_broker_restart_mid_stream_no_loss_no_duplicate(
    kafka_restartable, unique: Callable[[str], str]
) -> None:
    kafka = kafka_restartable
    topic = unique("src-restart")
    support.create_topic(kafka.bootstrap, topic, 4)
    support.produce(kafka.bootstrap, topic, [b"before-%d" % i for i in range(20_000)])
    source = await start_source(
        props(kafka.bootstrap, topic, unique("g"), **{"max-fetched-bytes": "200000"})
    )
    batches = []
    try:
        # Read part of the stream, then restart the broker while the reader is mid-fetch.
        while sum(b.num_rows for b in batches) < 5_000:
            batch = await source.poll_batch(500)
            if batch is None:
                ready = source.data_ready_notify()
                assert ready is not None
                await asyncio.wait_for(ready.wait(), 10)
            else:
                batches.append(batch)
        restarted = threading.Event()

        def restart() -> None:
            kafka.restart_broker(0)
            restarted.set()

        restarter = threading.Thread(target=restart)
        restarter.start()
        while not restarted.is_set():
            batch = await source.poll_batch(500)
            if batch is not None:
                batches.append(batch)
            else:
                await asyncio.sleep(0.05)
        restarter.join()
        support.produce(kafka.bootstrap, topic, [b"after-%d" % i for i in range(4_000)])
        ends = support.high_watermarks(kafka.bootstrap, topic)
        total = sum(ends.values())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while sum(b.num_rows for b in batches) < total and loop.time() < deadline:
            batch = await source.poll_batch(2_000)
            if batch is not None:
                batches.append(batch)
            else:
                await asyncio.sleep(0.05)
        emitted = rows(batches)
        by_partition = offsets_by_partition(emitted)
        for partition, end in ends.items():
            assert by_partition.get(partition) == list(range(end)), f"partition {partition}: gap or duplicate"
        assert len(emitted) == total == 24_000
        assert source.checkpoint().partitions() == {(topic, p): e for p, e in ends.items()}
    finally:
        await source.close()
