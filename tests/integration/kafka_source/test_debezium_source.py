"""format=debezium-json on a real Kafka: a Debezium-shaped topic (snapshot, creates, updates, deletes
and their tombstones, both JsonConverter wrappers, a truncate) read through the source into batches
of changes: the row schema inferred from the topic, every record a row with its _op and key or a
rejected record with its reason."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from laminar_kafka.kafka_source import ConnectorConfig, DeliveryGuarantee, KafkaSource, SourcePosition, SourceStart
from laminar_kafka.kafka_source.config.choices import OP_COLUMN
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA
from tests import support
from tests.integration.kafka_source.helpers import poll_until, props

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

KEYS = 40


def change(op: str, key: int, before: dict[str, Any] | None, after: dict[str, Any] | None, *, wrapped: bool) -> bytes:
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000,
               "source": {"connector": "postgresql", "db": "shop", "table": "customers", "lsn": key}}
    if wrapped:  # JsonConverter with schemas.enable=true: the schema beside the payload
        schema = {"type": "struct", "name": "shop.customers.Envelope", "fields": [
            {"type": "struct", "optional": True, "field": "before", "fields": [
                {"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"},
                {"type": "double", "optional": True, "field": "balance"}]},
            {"type": "string", "optional": False, "field": "op"}]}
        return json.dumps({"schema": schema, "payload": payload}).encode()
    return json.dumps(payload).encode()


def debezium_topic() -> tuple[list[tuple[bytes, bytes | None]], dict[int, tuple[str, str | None]]]:
    """The (key, value) records of a table's history and each key's last change (op, name)."""
    records: list[tuple[bytes, bytes | None]] = []
    last: dict[int, tuple[str, str | None]] = {}
    for i in range(KEYS):
        key = json.dumps({"id": i}).encode()
        row = {"id": i, "name": f"c{i}", "balance": i * 1.5}
        records.append((key, change("r", i, None, row, wrapped=i % 2 == 0)))
        last[i] = ("r", row["name"])
        if i % 3 == 0:
            updated = {**row, "name": f"c{i}-v2"}
            records.append((key, change("u", i, row, updated, wrapped=i % 2 == 1)))
            last[i] = ("u", updated["name"])
        if i % 5 == 0:
            records.append((key, change("d", i, row, None, wrapped=False)))
            records.append((key, None))  # Debezium's tombstone after the delete
            last[i] = ("d", None)
    records.append((b"{}", change("t", -1, None, None, wrapped=False)))  # a truncate: bad, with its reason
    return records, last


async def test_a_debezium_topic_reads_as_changes_with_op_and_key(kafka, unique: Callable[[str], str]) -> None:
    topic = unique("src-debezium")
    support.create_topic(kafka.bootstrap, topic, 2)
    records, last = debezium_topic()
    producer = support.producer(kafka.bootstrap)
    for key, value in records:  # a key's changes in one partition, as Debezium's partitioner keeps them
        producer.produce(topic, value=value, key=key, partition=json.loads(key).get("id", 0) % 2)
    assert producer.flush(30) == 0

    properties = props(kafka.bootstrap, topic, unique("g"), format="debezium-json", upsert_keys="id",
                       on_bad_record="skip")
    source = KafkaSource()
    await source.discover_schema(properties)  # the rows' schema, inferred from after and before
    assert source.schema().names == ["id", "name", "balance", OP_COLUMN, "_partition", "_offset"]
    assert source.schema().field("balance").type == pa.float64()
    start = SourceStart(ConnectorConfig("kafka", properties), SourcePosition.Initial(), DeliveryGuarantee.EXACTLY_ONCE)
    await source.start(start)
    try:
        batches = await poll_until(
            source, lambda got: sum(b.num_rows + (b.rejected.num_rows if b.rejected else 0) for b in got) >= len(records))
    finally:
        await source.close()

    table = pa.Table.from_batches([b.records for b in batches])
    assert table.num_rows == len(records) - 1
    assert set(table.column(OP_COLUMN).to_pylist()) == {"r", "u", "d"}
    assert table.filter(pa.compute.equal(table.column(OP_COLUMN), "d")).column("name").null_count == 2 * len(
        [i for i in range(KEYS) if i % 5 == 0])  # a delete and its tombstone: payload null, keyed
    final: dict[int, tuple[str, str | None]] = {}
    for row in sorted(table.to_pylist(), key=lambda r: (r["_partition"], r["_offset"])):
        final[row["id"]] = (row[OP_COLUMN], row["name"])
    assert final == last
    rejected = pa.Table.from_batches([b.rejected for b in batches if b.rejected is not None], schema=REJECTED_SCHEMA)
    assert rejected.column("error").to_pylist() == [
        "debezium: op 't' (truncate) is not supported: it names no key to delete"]
