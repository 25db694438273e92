"""Iceberg schema evolution through the CLI with a real schema registry (Apicurio): Avro and JSON
Schema versions mixed in the epochs of one running node evolve the table per Iceberg's rules
(widened types, a new optional column), every row reads back with its values through pyiceberg and
DuckDB, the files of an epoch are at most one per schema version per directory, and an incompatible
version stops the node in one line naming the column and both types, with nothing committed."""
from __future__ import annotations

import decimal
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.table import Table

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source.clients import KafkaClientConfig, make_producer
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.duckdb_queries import ICEBERG, connect
from tests.integration.cluster.harness import make_pipeline
from tests.integration.cluster.test_registry_formats_cli import produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

D = decimal.Decimal
BIG = 2**40  # the ids of v2 records: a long, not an int


def avro(fields: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "dev.laminar.evolution", "fields": fields})


def decimal_type(precision: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": 2}


AVRO_V1 = avro([{"name": "id", "type": "int"}, {"name": "amount", "type": "float"},
                {"name": "price", "type": decimal_type(5)}])
AVRO_V2 = avro([{"name": "id", "type": "long"}, {"name": "amount", "type": "double"},
                {"name": "price", "type": decimal_type(9)}, {"name": "note", "type": ["null", "string"], "default": None}])
AVRO_V3 = avro([{"name": "id", "type": "string"}, {"name": "amount", "type": "double"},
                {"name": "price", "type": decimal_type(9)}])


def avro_row(i: int, version: int) -> dict[str, Any]:
    """A record of ``version`` whose values only that version (or a wider one) can hold."""
    if version == 1:
        return {"id": i, "amount": i + 0.5, "price": D(i) / 100}
    if version == 2:
        return {"id": BIG + i, "amount": 1e300 + i, "price": D(1_000_000 + i) + D("0.25"), "note": f"n{i}"}
    return {"id": f"s{i}", "amount": 1.0, "price": D("1.00")}


def avro_values(registry: str, topic: str, schema: str, version: int, ids: Iterable[int]) -> list[tuple[int, bytes]]:
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry}), schema, conf={"auto.register.schemas": True})
    context = SerializationContext(topic, MessageField.VALUE)
    return [(i, serializer(avro_row(i, version), context)) for i in ids]


def produce_avro(bootstrap: str, registry: str, topic: str, schema: str, version: int, ids: Iterable[int]) -> None:
    produce(bootstrap, topic, avro_values(registry, topic, schema, version, ids))


def json_schema(properties: dict[str, Any]) -> str:
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                       "required": ["id"], "properties": properties})


JSON_V1 = json_schema({"id": {"type": "integer"}, "amount": {"type": "number"}, "qty": {"type": "integer"},
                       "note": {"type": "string"}})
# v2 drops note (its rows read it as null) and adds channel
JSON_V2 = json_schema({"id": {"type": "integer"}, "amount": {"type": "number"}, "qty": {"type": "integer"},
                       "channel": {"type": ["string", "null"]}})
# v3 makes qty a number: long -> double is not an Iceberg promotion
JSON_V3 = json_schema({"id": {"type": "integer"}, "amount": {"type": "number"}, "qty": {"type": "number"}})


def json_row(i: int, version: int) -> dict[str, Any]:
    if version == 1:
        return {"id": i, "amount": i / 4, "qty": BIG + i, "note": f"n{i}"}
    if version == 2:
        return {"id": i, "amount": i / 4, "qty": i, "channel": "app"}
    return {"id": i, "amount": 1.0, "qty": 0.5}


def produce_json(bootstrap: str, registry: str, topic: str, schema: str, version: int, ids: Iterable[int]) -> None:
    serializer = JSONSerializer(schema, SchemaRegistryClient({"url": registry}), conf={"auto.register.schemas": True})
    context = SerializationContext(topic, MessageField.VALUE)
    produce(bootstrap, topic, [(i, serializer(json_row(i, version), context)) for i in ids])


class Pipeline:
    """One node landing ``topic`` into an Iceberg table through the CLI, and that table."""

    def __init__(self, kafka: KafkaHandle, registry: str, topic: str, fmt: str, tmp_path: Path) -> None:
        self.kafka, self.topic = kafka, topic
        self.output = str(tmp_path / "lake")
        self.lake = LakeTarget(self.output, TableFormat.ICEBERG, "a", IcebergSettings(namespace="a"))
        flags = ["--format", fmt, "--schema-registry-url", registry, "--table-format", "iceberg",
                 "--checkpoint-interval-ms", "500"]
        self.node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=self.output, zk=None,
                                       pipeline="a", log_dir=tmp_path, extra=flags)

    def caught_up(self) -> None:
        report = wait_caught_up(self.kafka.bootstrap, self.topic, self.output, 60, lake=self.lake)
        assert report.ok, self.node.log.read_text()[-3000:]

    def table(self) -> Table:
        fs, root = open_output(self.output)
        table = load_table_or_none(open_catalog(self.lake.iceberg, fs, root),  # type: ignore[arg-type]
                                   ("a", self.topic.replace("-", "_")))
        assert table is not None
        return table

    def stops_in_one_line(self, pattern: str) -> str:
        """The node exits on its own with a non-zero code; the one log line matching ``pattern``."""
        code = self.node.wait(60)
        log = self.node.log.read_text(errors="replace")
        assert code != 0, log[-3000:]
        lines = [line for line in log.splitlines() if re.search(pattern, line)]
        assert lines, log[-3000:]
        assert len({line[line.index("iceberg table"):] for line in lines}) == 1, lines  # one message, however shown
        return lines[-1]


def read_back(table: Table, columns: list[str], tmp_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every row's ``columns`` as pyiceberg and as DuckDB read them, both sorted by ``_offset``, ``_partition``."""
    order = ["_partition", "_offset"]
    by_pyiceberg = table.scan(selected_fields=tuple(order + columns)).to_arrow().sort_by(
        [(name, "ascending") for name in order]).to_pylist()
    (tmp_path / "duckdb").mkdir(exist_ok=True)
    with connect(tmp_path / "duckdb", ICEBERG) as connection:
        selected = ", ".join(order + columns)
        cursor = connection.execute(f"SELECT {selected} FROM iceberg_scan('{table.metadata_location}') "
                                    "ORDER BY _partition, _offset")
        by_duckdb = [dict(zip(order + columns, row, strict=True)) for row in cursor.fetchall()]
    return by_pyiceberg, by_duckdb


def files_per_version_and_directory(table: Table) -> dict[tuple[str, str], list[str]]:
    """The table's data files by (epoch, directory), each as its Arrow schema's text; checks that no
    node staged two files of one schema version in one epoch and directory."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    seen: set[tuple[str, str, str, str]] = set()
    for task in table.scan().plan_files():
        path = task.file.file_path
        name = re.search(r"epoch-(\d+)\.node-(\d+)\.", path)
        assert name is not None, path
        epoch, node, directory = name.group(1), name.group(2), path.rpartition("/")[0]
        schema = pq.read_schema(path).remove_metadata().to_string()
        assert (epoch, node, directory, schema) not in seen, f"node {node} wrote two files of one schema in {path}"
        seen.add((epoch, node, directory, schema))
        groups[(epoch, directory)].append(schema)
    return groups


def test_avro_versions_widen_an_iceberg_table_and_an_incompatible_one_stops_the_node(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("avro-evolve")
    create_topic(kafka.bootstrap, topic, 2)
    produce_avro(kafka.bootstrap, schema_registry, topic, AVRO_V1, 1, range(0, 100))
    pipeline = Pipeline(kafka, schema_registry, topic, "avro", tmp_path)
    try:
        pipeline.caught_up()
        assert str(pipeline.table().schema().find_field("id").field_type) == "int"
        # v2 records, then more v1 records (a producer not upgraded yet): one or more mixed epochs
        produce_avro(kafka.bootstrap, schema_registry, topic, AVRO_V2, 2, range(100, 200))
        produce_avro(kafka.bootstrap, schema_registry, topic, AVRO_V1, 1, range(200, 300))
        pipeline.caught_up()
        table = pipeline.table()
        fields = [table.schema().find_field(name) for name in ("id", "amount", "price", "note")]
        assert [(f.name, str(f.field_type), f.required) for f in fields] == [
            ("id", "long", True), ("amount", "double", True), ("price", "decimal(9, 2)", True),
            ("note", "string", False)]
        by_pyiceberg, by_duckdb = read_back(table, ["id", "amount", "price", "note"], tmp_path)
        versions = {i: 2 if 100 <= i < 200 else 1 for i in range(300)}
        expected = {r["id"]: {**r, "note": r.get("note")} for r in (avro_row(i, v) for i, v in versions.items())}
        for rows in (by_pyiceberg, by_duckdb):
            assert {r["id"]: {k: r[k] for k in ("id", "amount", "price", "note")} for r in rows} == expected
            assert len(rows) == 300
        files_per_version_and_directory(table)
        epoch, snapshots = committed_epoch(table, "a"), len(table.snapshots())

        # v3 changes id to a string: the registry takes it (compatibility NONE), the lake may not
        client = SchemaRegistryClient({"url": schema_registry})
        client.set_compatibility(subject_name=f"{topic}-value", level="NONE")
        produce_avro(kafka.bootstrap, schema_registry, topic, AVRO_V3, 3, range(300, 310))
        line = pipeline.stops_in_one_line(r"cannot take file")
        assert re.search(r"iceberg table a\.\S+ cannot take file \S+: column id is long in the table but "
                         r"string in the file$", line), line
        pipeline.node.start()  # the refused epoch is durable: started again, the node stops the same way
        assert pipeline.stops_in_one_line(r"cannot take file") == line
    finally:
        pipeline.node.stop()
    table = pipeline.table()
    assert committed_epoch(table, "a") == epoch and len(table.snapshots()) == snapshots  # nothing committed
    assert str(table.schema().find_field("id").field_type) == "long"


def test_json_schema_versions_evolve_an_iceberg_table_and_integer_to_number_stops_the_node(
    kafka: KafkaHandle, schema_registry: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("json-evolve")
    create_topic(kafka.bootstrap, topic, 2)
    produce_json(kafka.bootstrap, schema_registry, topic, JSON_V1, 1, range(0, 100))
    pipeline = Pipeline(kafka, schema_registry, topic, "json-schema", tmp_path)
    try:
        pipeline.caught_up()
        produce_json(kafka.bootstrap, schema_registry, topic, JSON_V2, 2, range(100, 200))
        produce_json(kafka.bootstrap, schema_registry, topic, JSON_V1, 1, range(200, 300))
        pipeline.caught_up()
        table = pipeline.table()
        fields = [table.schema().find_field(name) for name in ("id", "amount", "qty", "note", "channel")]
        assert [(f.name, str(f.field_type)) for f in fields] == [
            ("id", "long"), ("amount", "double"), ("qty", "long"), ("note", "string"), ("channel", "string")]
        by_pyiceberg, by_duckdb = read_back(table, ["id", "amount", "qty", "note", "channel"], tmp_path)
        expected = {i: {"id": i, "note": None, "channel": None, **json_row(i, 2 if 100 <= i < 200 else 1)}
                    for i in range(300)}
        for i in range(200, 300):  # v1 records read once v2 is known follow v2, which has no note (docs/lake.md)
            expected[i]["note"] = None
        for rows in (by_pyiceberg, by_duckdb):
            assert {r["id"]: {k: r[k] for k in ("id", "amount", "qty", "note", "channel")} for r in rows} == expected
            assert len(rows) == 300
        files_per_version_and_directory(table)
        epoch, snapshots = committed_epoch(table, "a"), len(table.snapshots())

        SchemaRegistryClient({"url": schema_registry}).set_compatibility(subject_name=f"{topic}-value", level="NONE")
        produce_json(kafka.bootstrap, schema_registry, topic, JSON_V3, 3, range(300, 310))
        line = pipeline.stops_in_one_line(r"cannot take file")
        assert re.search(r"column qty is long in the table but double in the file$", line), line
    finally:
        pipeline.node.stop()
    table = pipeline.table()
    assert committed_epoch(table, "a") == epoch and len(table.snapshots()) == snapshots


def test_two_nodes_decoding_two_versions_commit_both_in_one_epoch_under_one_evolution(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, schema_registry: str, unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """A node's decoder reads every record of a batch with the newest writer version it has seen, so
    the files of one node change version once; two nodes, one fed v1 records and the other v2, stage
    files of both versions in the same epochs: each such epoch is one commit that creates or widens
    the table and adds every file, one file per version and directory."""
    pipeline = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("avro-mixed"), tmp_path)
    flags = ("--format", "avro", "--schema-registry-url", schema_registry)
    pipeline.table_format = TableFormat.ICEBERG
    try:
        pipeline.launch(1, *flags)
        pipeline.launch(2, *flags)
        pipeline.wait_spread(2)
        owned = {n.node_id: sorted(int(p.rpartition(":")[2]) for p in n.partitions)
                 for n in pipeline.status().nodes if n.live}
        versions: dict[int, int] = {}

        def mixed_epochs() -> list[str]:
            groups = files_per_version_and_directory(iceberg_table(pipeline.lake, pipeline.topic))
            return [epoch for (epoch, _), schemas in groups.items() if len(set(schemas)) > 1]

        for round_ in range(5):  # until an epoch holds both versions: each round is one chance
            ids = range(round_ * 40, round_ * 40 + 40)
            v1 = avro_values(schema_registry, pipeline.topic, AVRO_V1, 1, ids[:20])
            v2 = avro_values(schema_registry, pipeline.topic, AVRO_V2, 2, ids[20:])
            produce_to(kafka.bootstrap, pipeline.topic, [(owned[1][i % len(owned[1])], v) for i, v in v1]
                       + [(owned[2][i % len(owned[2])], v) for i, v in v2])
            versions.update({i: 1 for i, _ in v1} | {i: 2 for i, _ in v2})
            assert pipeline.finish(60).ok, pipeline.tail_logs()
            if mixed_epochs():
                break
        assert mixed_epochs(), "no epoch held files of both versions in 5 rounds"
        table = iceberg_table(pipeline.lake, pipeline.topic)
        assert [str(table.schema().find_field(name).field_type) for name in ("id", "amount", "price")] == [
            "long", "double", "decimal(9, 2)"]
        expected = {r["id"]: {**r, "note": r.get("note")} for r in (avro_row(i, v) for i, v in versions.items())}
        for rows in read_back(table, ["id", "amount", "price", "note"], tmp_path):
            assert {r["id"]: {k: r[k] for k in ("id", "amount", "price", "note")} for r in rows} == expected
            assert len(rows) == len(versions)
    finally:
        pipeline.stop_all()


def iceberg_table(lake: LakeTarget, topic: str) -> Table:
    fs, root = open_output(lake.output)
    assert lake.iceberg is not None
    table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(topic)))
    assert table is not None
    return table


def produce_to(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> None:
    """``(partition, value)`` pairs, in one flush."""
    producer = make_producer(KafkaClientConfig(bootstrap), {"linger.ms": 5})
    for partition, value in values:
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0
