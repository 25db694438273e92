"""A KafkaSource whose consumer reaches no broker for a while replaces it (kafka_source/read/client_watch.py)
and the stream stays exact: the broker is frozen (SIGSTOP: its sockets stay open, nothing answers)
past the reader's stall, so its probe fails and a new consumer is assigned at the positions handed
out; the broker then thaws and every record is read once."""
from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from laminar_kafka.kafka_source.read.client_watch import PROBE_TIMEOUT_S, STALL_S
from tests import support
from tests.integration.kafka_source.helpers import (
    offsets_by_partition,
    poll_until,
    props,
    row_count,
    rows,
    start_source,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(240)]


async def test_a_consumer_that_reaches_no_broker_is_replaced_and_the_stream_stays_exact(
    kafka_restartable, unique: Callable[[str], str]
) -> None:
    kafka = kafka_restartable
    topic = unique("src-lost-client")
    support.create_topic(kafka.bootstrap, topic, 4)
    support.produce(kafka.bootstrap, topic, [b"before-%d" % i for i in range(6_000)])
    source = await start_source(props(kafka.bootstrap, topic, unique("g")))
    try:
        batches = await poll_until(source, row_count(6_000), timeout=60)
        kafka.pause_broker(0)
        try:
            frozen_at = time.monotonic()
            # nothing to read, the broker answers nothing: after the stall the probe fails
            batches += await poll_until(source, lambda _: source.metrics.clients_replaced >= 1,
                                        timeout=STALL_S + PROBE_TIMEOUT_S + 30)
            assert time.monotonic() - frozen_at >= STALL_S - 1  # not before the stall
        finally:
            kafka.resume_broker(0)
        support.produce(kafka.bootstrap, topic, [b"after-%d" % i for i in range(4_000)])
        ends = support.high_watermarks(kafka.bootstrap, topic)
        total = sum(ends.values())
        batches += await poll_until(source, row_count(total - sum(b.num_rows for b in batches)), timeout=120)
        by_partition = offsets_by_partition(rows(batches))
        for partition, end in ends.items():
            assert by_partition.get(partition) == list(range(end)), f"partition {partition}: gap or duplicate"
        assert total == 10_000
        assert source.checkpoint().partitions() == {(topic, p): e for p, e in ends.items()}
    finally:
        await source.close()
