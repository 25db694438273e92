"""Benchmark: KafkaSource.poll_batch (Arrow batches with _partition, _offset) vs a raw
confluent-kafka ``consume`` loop that only counts messages.

Fills one topic (8 partitions, N x 100-byte records) once (or reuses ``--topic`` if it already
holds exactly N records), then alternates runs of both readers in this process (the order flips
every run; one untimed warm-up run of each first) and prints one JSON object: records/s of each
(median, min, max), the ratio of the medians, and peak RSS.

Fairness: both readers use the *same* librdkafka configuration (the source's
``consumer_config``, so the same prefetch bounds and isolation level) and the same
``num_messages`` per ``consume`` call (``--chunk`` = the source's ``consume-chunk-records``).

Peak RSS is reported per phase (the Linux high-water mark is reset via ``/proc/self/clear_refs``
before each run, so a phase's peak is not inflated by the fill or the other reader) and for the
warm-up runs (read before the first reset; the fill itself runs in a child process). Not a
timed test.

    .venv/bin/python bench/bench_source.py [--bootstrap HOST:PORT] [--topic T] [--records 2000000] [--runs 5]
        [--prop kafka.max.partition.fetch.bytes=262144 ...]

Without ``--bootstrap`` a local single-broker dev stack is started via ``laminar_kafka.devstack.stack.DevStack``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition

from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source import (
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    SourcePosition,
    SourceStart,
)
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.read.positions import watermarks

PARTITIONS = 8
RECORD_BYTES = 100
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def fill(bootstrap: str, topic: str, records: int, value: Callable[[int], bytes] | None = None) -> None:
    """Create ``topic`` and write ``records`` values round-robin over its partitions (``value(i)``;
    default: ``RECORD_BYTES`` bytes of ``x``)."""
    create_topic(bootstrap, topic, PARTITIONS, 60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
         "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000}
    )
    payload = b"x" * RECORD_BYTES
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload if value is None else value(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("fill did not complete")


def topic_records(bootstrap: str, topic: str) -> int | None:
    """Records held by ``topic`` (high minus low watermark summed), ``None`` if it does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-probe-{uuid.uuid4().hex}"})
    try:
        info = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if info is None or info.error is not None:
            return None
        bounds = watermarks(consumer, [(topic, partition) for partition in info.partitions], 10.0)
        return sum(high - low for low, high in bounds.values())
    finally:
        consumer.close()


def source_properties(bootstrap: str, topic: str, chunk: int, extra: dict[str, str]) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "topic": topic, "group.id": f"bench-src-{uuid.uuid4().hex}",
            "include-metadata": "_partition,_offset", "consume-chunk-records": str(chunk), **extra}


def raw_run(bootstrap: str, topic: str, total: int, chunk: int, extra: dict[str, str]) -> float:
    """Counts messages of a consumer configured exactly like the source's."""
    config = KafkaSourceConfig.from_properties(source_properties(bootstrap, topic, chunk, extra))
    consumer = Consumer(config.consumer_config(guaranteed=True))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = 0
    started = time.perf_counter()
    while count < total:
        messages = consumer.consume(num_messages=chunk, timeout=1.0)
        count += len(messages)
    elapsed = time.perf_counter() - started
    consumer.close()
    if count != total:
        raise RuntimeError(f"raw consumer read {count} records, expected {total}")
    return total / elapsed


async def source_run(
    bootstrap: str, topic: str, total: int, chunk: int, batch: int, extra: dict[str, str]
) -> float:
    source = KafkaSource()
    await source.start(SourceStart(ConnectorConfig("kafka", source_properties(bootstrap, topic, chunk, extra)),
                                   SourcePosition.Initial(), DeliveryGuarantee.EXACTLY_ONCE))
    event = source.data_ready_notify()
    assert event is not None
    count = 0
    started = time.perf_counter()
    while count < total:
        result = await source.poll_batch(batch)
        if result is None:
            await event.wait()
            continue
        count += result.records.num_rows
    elapsed = time.perf_counter() - started
    cursor = sum(source.checkpoint().partitions().values())
    await source.close()
    if count != total or cursor != total:
        raise RuntimeError(f"source read {count} records to cursor sum {cursor}, expected {total}")
    return total / elapsed


def _hwm_mb() -> float | None:
    """This process's resident-set high-water mark (VmHWM) in MB, or ``None`` off Linux."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def measured(run: Callable[[], float], peaks: list[float]) -> float:
    """``run()``'s rate; appends the phase's peak RSS (MB) to ``peaks`` when it can be isolated."""
    reset = _reset_hwm()
    rate = run()
    peak = _hwm_mb()
    if reset and peak is not None:
        peaks.append(peak)
    return rate


def summary(rates: list[float]) -> dict[str, int]:
    return {"median": round(statistics.median(rates)), "min": round(min(rates)), "max": round(max(rates))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic", help="reuse this topic if it holds exactly --records records")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=10_000,
                        help="num_messages per consume() on both sides (the source's consume-chunk-records)")
    parser.add_argument("--batch", type=int, default=10_000, help="max_records per poll_batch()")
    parser.add_argument("--prop", action="append", default=[], metavar="KEY=VALUE",
                        help="extra source property (kafka.* ones configure both readers' client)")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.prop)
    stack = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from laminar_kafka.devstack.stack import DevStack

        stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=0)
        bootstrap = stack.bootstrap
    try:
        topic = args.topic or f"bench-source-{uuid.uuid4().hex[:8]}"
        fill_s: float | None = None
        held = topic_records(bootstrap, topic)
        if held is None:
            # The fill runs in a child process: a producer's 2M-record queue leaves allocator
            # arenas behind that would otherwise count in the readers' peak RSS.
            fill_started = time.perf_counter()
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                pool.apply(fill, (bootstrap, topic, args.records))
            fill_s = round(time.perf_counter() - fill_started, 2)
        elif held != args.records:
            raise SystemExit(f"topic {topic} holds {held} records, not {args.records}")

        def raw() -> float:
            return raw_run(bootstrap, topic, args.records, args.chunk, extra)

        def source() -> float:
            return asyncio.run(source_run(bootstrap, topic, args.records, args.chunk, args.batch, extra))

        raw(), source()  # warm-up: broker page cache, imports, allocator arenas
        setup_peak = _hwm_mb()  # before any reset: fill (if any) and the warm-up runs
        raw_rates: list[float] = []
        source_rates: list[float] = []
        raw_peaks: list[float] = []
        source_peaks: list[float] = []
        for index in range(args.runs):
            if index % 2 == 0:
                raw_rates.append(measured(raw, raw_peaks))
                source_rates.append(measured(source, source_peaks))
            else:
                source_rates.append(measured(source, source_peaks))
                raw_rates.append(measured(raw, raw_peaks))
        print(json.dumps({
            "records": args.records,
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "topic": topic,
            "fill_seconds": fill_s,
            "runs": args.runs,
            "chunk": args.chunk,
            "batch": args.batch,
            "props": extra,
            "raw_consume_records_per_s": summary(raw_rates),
            "kafka_source_records_per_s": summary(source_rates),
            "ratio_median": round(statistics.median(source_rates) / statistics.median(raw_rates), 3),
            "ratio_per_pair": [round(s / r, 3) for s, r in zip(source_rates, raw_rates, strict=True)],
            "peak_rss_mb": {
                "raw_phase_max": round(max(raw_peaks), 1) if raw_peaks else None,
                "source_phase_max": round(max(source_peaks), 1) if source_peaks else None,
                # clear_refs also resets ru_maxrss, so the setup peak is read before the first reset
                "fill_and_warmup": round(setup_peak if setup_peak is not None else
                                         resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            },
        }, indent=2))
    finally:
        if stack is not None:
            stack.stop()


if __name__ == "__main__":
    main()
