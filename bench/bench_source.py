"""Benchmark: KafkaSource.poll_batch (Arrow batches with _partition, _offset) vs a raw
confluent-kafka ``consume`` loop that only counts messages.

Fills one topic (8 partitions, N x 100-byte records) once, then alternates runs of both readers
in this process and prints one JSON object: records/s of each (best and median), their ratio,
and peak RSS. Not a timed test.

    .venv/bin/python bench/bench_source.py [--bootstrap HOST:PORT] [--records 2000000] [--runs 3]

Without ``--bootstrap`` a local single-broker dev stack is started via ``cluster.devstack``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafka_source import (  # noqa: E402
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    SourcePosition,
    SourceStart,
)

PARTITIONS = 8
RECORD_BYTES = 100


def fill(bootstrap: str, topic: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000}
    )
    payload = b"x" * RECORD_BYTES
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("fill did not complete")


def raw_run(bootstrap: str, topic: str, total: int, chunk: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = 0
    started = time.perf_counter()
    while count < total:
        count += len(consumer.consume(num_messages=chunk, timeout=1.0))
    elapsed = time.perf_counter() - started
    consumer.close()
    return total / elapsed


async def source_run(bootstrap: str, topic: str, total: int, chunk: int, batch: int) -> float:
    properties = {"bootstrap.servers": bootstrap, "topic": topic, "group.id": f"bench-src-{uuid.uuid4().hex}",
                  "include.metadata": "_partition,_offset", "consume.chunk.records": str(chunk)}
    source = KafkaSource()
    await source.start(SourceStart(ConnectorConfig("kafka", properties), SourcePosition.Initial(),
                                   DeliveryGuarantee.EXACTLY_ONCE))
    event = source.data_ready_notify()
    assert event is not None
    count = 0
    started = time.perf_counter()
    while count < total:
        result = await source.poll_batch(batch)
        if result is None:
            await event.wait()
            continue
        count += result.num_rows
    elapsed = time.perf_counter() - started
    await source.close()
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=10_000, help="num_messages per consume()")
    parser.add_argument("--batch", type=int, default=10_000, help="max_records per poll_batch()")
    args = parser.parse_args()
    stack = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from cluster import devstack

        stack = devstack.DevStack.create(kafka_brokers=1, zookeeper_servers=0)
        stack.start()
        bootstrap = stack.bootstrap
    try:
        topic = f"bench-source-{uuid.uuid4().hex[:8]}"
        fill_started = time.perf_counter()
        fill(bootstrap, topic, args.records)
        fill_s = time.perf_counter() - fill_started
        raw_rates: list[float] = []
        source_rates: list[float] = []
        for _ in range(args.runs):
            raw_rates.append(raw_run(bootstrap, topic, args.records, args.chunk))
            source_rates.append(asyncio.run(source_run(bootstrap, topic, args.records, args.chunk, args.batch)))
        peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({
            "records": args.records,
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "fill_seconds": round(fill_s, 2),
            "runs": args.runs,
            "raw_consume_records_per_s": {"best": round(max(raw_rates)), "median": round(statistics.median(raw_rates))},
            "kafka_source_records_per_s": {"best": round(max(source_rates)), "median": round(statistics.median(source_rates))},
            "ratio_median": round(statistics.median(source_rates) / statistics.median(raw_rates), 3),
            "ratio_best": round(max(source_rates) / max(raw_rates), 3),
            "peak_rss_mb": round(peak_rss_mb, 1),
        }, indent=2))
    finally:
        if stack is not None:
            stack.stop()


if __name__ == "__main__":
    main()
