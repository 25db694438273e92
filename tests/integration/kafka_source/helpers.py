"""Helpers for KafkaSource integration tests: start a source, poll it until a condition holds."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import pyarrow as pa
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from laminar_kafka.kafka_source import (
    CheckpointAttempt,
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    SourceBatch,
    SourceCheckpoint,
    SourcePosition,
    SourceStart,
)


def props(bootstrap: str, topic: str, group: str, **extra: str) -> dict[str, str]:
    base = {
        "bootstrap.servers": bootstrap,
        "topic": topic,
        "group.id": group,
        "include-metadata": "_partition,_offset",
    }
    base.update({k.replace("_", "-"): v for k, v in extra.items()})  # keyword names of dashed settings
    return base


async def start_source(
    properties: Mapping[str, str],
    checkpoint: SourceCheckpoint | None = None,
    delivery: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE,
    epoch: int = 1,
) -> KafkaSource:
    config = ConnectorConfig("kafka", dict(properties))
    position = (
        SourcePosition.Initial()
        if checkpoint is None
        else SourcePosition.Resume(CheckpointAttempt(epoch, epoch), checkpoint)
    )
    source = KafkaSource()
    await source.start(SourceStart(config, position, delivery))
    return source


async def poll_until(
    source: KafkaSource,
    done: Callable[[list[SourceBatch]], bool],
    *,
    max_records: int = 10_000,
    timeout: float = 30.0,
) -> list[SourceBatch]:
    """Poll (waiting on the data-ready event, never on a timer) until ``done(batches)``."""
    batches: list[SourceBatch] = []
    event = source.data_ready_notify()
    assert event is not None
    deadline = time.monotonic() + timeout
    while not done(batches):
        if time.monotonic() > deadline:
            rows = sum(b.num_rows for b in batches)
            raise TimeoutError(f"condition not met after {timeout}s ({rows} rows in {len(batches)} batches)")
        batch = await source.poll_batch(max_records)
        if batch is not None:
            assert batch.num_rows <= max_records
            batches.append(batch)
            continue
        try:
            await asyncio.wait_for(event.wait(), timeout=0.5)
        except asyncio.TimeoutError:
            pass
    return batches


def row_count(n: int) -> Callable[[list[SourceBatch]], bool]:
    return lambda batches: sum(b.num_rows for b in batches) >= n


def rows(batches: list[SourceBatch]) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of every emitted row, in emission order."""
    if not batches:
        return []
    table = pa.Table.from_batches([b.records for b in batches])
    values = table.column("value").to_pylist() if "value" in table.column_names else [None] * table.num_rows
    return list(zip(table.column("_partition").to_pylist(), table.column("_offset").to_pylist(), values, strict=True))


def offsets_by_partition(emitted: list[tuple[int, int, bytes | None]]) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for partition, offset, _ in emitted:
        result.setdefault(partition, []).append(offset)
    return result


def assert_batch_cursors(batches: list[SourceBatch], topic: str) -> None:
    """Each batch's checkpoint is at least last emitted + 1 for its partitions, and never regresses."""
    previous: dict[str, int] = {}
    for batch in batches:
        offsets = batch.checkpoint.offsets
        for key, value in previous.items():
            assert offsets.get(key, -1) >= value, f"cursor of {key} moved backwards"
        partitions = batch.records.column("_partition").to_pylist()
        last = dict(zip(partitions, batch.records.column("_offset").to_pylist(), strict=True))
        for partition, offset in last.items():
            assert offsets[f"{topic}:{partition}"] >= offset + 1
        previous = dict(offsets)


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """Move the partition's low watermark to ``offset`` (as retention would)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(timeout=30)


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(30)
    return producer
