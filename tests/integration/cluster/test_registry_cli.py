"""An Avro topic lands through the CLI into typed columns, against a real schema registry (Apicurio,
Confluent-compatible API): nested records, arrays, logical types, the key decoded, a compatible schema
change, and bad records dead-lettered exactly once."""
from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_producer
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "dev.laminar.cli",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "name", "type": "string"}, {"name": "vip", "type": "boolean"}]}},
        {"name": "items", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "channel", "type": "string", "default": "web"}]}
EPOCH = datetime.datetime(2026, 12, 3, tzinfo=datetime.timezone.utc)


def order(i: int, v2: bool = False) -> dict[str, object]:
    value: dict[str, object] = {
        "id": i, "at": EPOCH + datetime.timedelta(milliseconds=i), "amount": decimal.Decimal(i) / 100,
        "customer": {"name": f"c{i % 5}", "vip": i % 2 == 0}, "items": [f"sku{j}" for j in range(i % 3)],
        "note": None if i % 4 else f"n{i}",
    }
    if v2:
        value["channel"] = "app"
    return value


def produce_orders(bootstrap: str, registry: str, topic: str, ids: range, schema: dict[str, object],
                   extra: list[bytes] = ()) -> None:  # type: ignore[assignment]
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry}), json.dumps(schema),
                                conf={"auto.register.schemas": True})
    keys = StringSerializer()
    producer = make_producer(KafkaClientConfig(bootstrap), {"linger.ms": 5})
    for i in ids:
        producer.produce(topic, key=keys(f"k{i}", None),
                         value=serializer(order(i, "channel" in json.dumps(schema)),
                                          SerializationContext(topic, MessageField.VALUE)),
                         partition=i % 2)
    for raw in extra:
        producer.produce(topic, value=raw, partition=0)
    assert producer.flush(30) == 0


def landed(output: str, subdir: str = "") -> list[pa.Table]:
    root = Path(output) / subdir if subdir else Path(output)
    files = sorted(p for p in root.glob("**/*.parquet")
                   if not subdir and "_rejected" not in p.parts and "_staging" not in p.parts or subdir and "_staging" not in p.parts)
    return [pq.read_table(p) for p in files]


def test_avro_topic_lands_typed_columns_evolves_and_dead_letters_bad_records(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("avro")
    create_topic(kafka.bootstrap, topic, 2)
    produce_orders(kafka.bootstrap, schema_registry, topic, range(0, 400), ORDER_V1,
                   extra=[b"not avro at all", b"\x00\x00\x00\x7f\xffbogus-id"])
    output = str(tmp_path / "out")
    flags = ["--format", "avro", "--schema-registry-url", schema_registry, "--include-key", "true",
             "--key-format", "string", "--on-bad-record", "skip", "--max-error-rate", "0.5",
             "--checkpoint-interval-ms", "300"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="a",
                              log_dir=tmp_path, extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 120).ok, node.log.read_text()[-3000:]
        produce_orders(kafka.bootstrap, schema_registry, topic, range(400, 500), ORDER_V2)  # compatible change
        assert wait_caught_up(kafka.bootstrap, topic, output, 120).ok, node.log.read_text()[-3000:]
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()

    tables = landed(output)
    first = tables[0].schema
    assert first.field("id").type == pa.int64()
    assert first.field("at").type == pa.timestamp("ms", tz="UTC")
    assert first.field("amount").type == pa.decimal128(10, 2)
    customer = first.field("customer").type  # Avro fields outside a null union are required: not nullable
    assert pa.types.is_struct(customer) and [(f.name, f.type, f.nullable) for f in customer] == [
        ("name", pa.string(), False), ("vip", pa.bool_(), False)]
    assert pa.types.is_list(first.field("items").type) and first.field("items").type.value_type == pa.string()
    assert first.field("_key").type == pa.string()
    evolved = [t for t in tables if "channel" in t.schema.names]
    assert evolved, "the compatible schema change started no file with the evolved schema"
    rows = pa.concat_tables([t.select(["id", "_key", "_partition", "_offset"]) for t in tables])
    assert sorted(rows.column("id").to_pylist()) == list(range(500))
    assert set(rows.column("_key").to_pylist()) == {f"k{i}" for i in range(500)}
    sample = next(r for t in tables for r in t.to_pylist() if r["id"] == 7)
    assert sample["amount"] == decimal.Decimal("0.07") and sample["customer"] == {"name": "c2", "vip": False}
    assert sample["at"] == EPOCH + datetime.timedelta(milliseconds=7)

    rejected = pa.concat_tables(landed(output, "_rejected"))
    assert rejected.num_rows == 2 and sorted(rejected.column("value").to_pylist()) == sorted(
        [b"not avro at all", b"\x00\x00\x00\x7f\xffbogus-id"])
    assert all(rejected.column("error").to_pylist())
    verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic, "--json")
    report = json.loads(verify.stdout)
    assert verify.returncode == 0 and report["ok"] and report["rejected"] == 2, verify.stdout + verify.stderr


def test_unreachable_registry_is_one_line_at_start(kafka: KafkaHandle, unique: Callable[[str], str],
                                                   tmp_path: Path) -> None:
    topic = unique("avro-down")
    create_topic(kafka.bootstrap, topic, 1)
    output = tmp_path / "out"
    result = cli("run", "--bootstrap", kafka.bootstrap, "--topic", topic, "--output", str(output),
                 "--format", "avro", "--schema-registry-url", "http://127.0.0.1:9", "--connect-timeout", "3")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "schema registry" in lines[0] and not output.exists()


def test_avro_topic_lands_into_an_iceberg_table_whose_schema_evolves(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
    from laminar_kafka.cluster.lake.parquet.sink import open_output
    from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat

    topic = unique("avro-ice")
    create_topic(kafka.bootstrap, topic, 2)
    produce_orders(kafka.bootstrap, schema_registry, topic, range(0, 300), ORDER_V1)
    output = str(tmp_path / "lake")
    lake = LakeTarget(output, TableFormat.ICEBERG, "a", IcebergSettings(namespace="a"))
    flags = ["--format", "avro", "--schema-registry-url", schema_registry, "--table-format", "iceberg",
             "--checkpoint-interval-ms", "300"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="a",
                              log_dir=tmp_path, extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 120, lake=lake).ok, node.log.read_text()[-3000:]
        produce_orders(kafka.bootstrap, schema_registry, topic, range(300, 400), ORDER_V2)  # compatible change
        assert wait_caught_up(kafka.bootstrap, topic, output, 120, lake=lake).ok, node.log.read_text()[-3000:]
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    fs, root = open_output(output)
    table = load_table_or_none(open_catalog(lake.iceberg, fs, root), ("a", topic.replace("-", "_")))  # type: ignore[arg-type]
    assert table is not None
    names = [f.name for f in table.schema().fields]
    assert {"id", "at", "amount", "customer", "items", "note", "channel"} <= set(names)
    rows = table.scan(selected_fields=("id", "channel", "amount")).to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(400))
    by_id = {r["id"]: r for r in rows.to_pylist()}
    assert by_id[7]["channel"] is None and by_id[350]["channel"] == "app"  # older rows read the new column as null
    assert by_id[7]["amount"] == decimal.Decimal("0.07")
