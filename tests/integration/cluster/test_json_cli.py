"""`laminar-kafka run --format json` through the CLI: a pinned inferred schema or --json-schema, typed
columns, exact output; logs as JSON lines."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def records(start: int, count: int) -> list[bytes]:
    return [json.dumps({"id": i, "price": i / 4, "user": {"name": f"u{i % 7}", "tags": ["a", "b"][: i % 3]},
                        "ok": i % 2 == 0}).encode() for i in range(start, start + count)]


def landed(output: str) -> pa.Table:
    files = sorted(str(p) for p in Path(output).glob("**/epoch-*.parquet") if not {"_rejected", "_staging"} & set(p.parts))
    return ds.dataset(files, format="parquet").to_table()


def test_json_without_a_schema_infers_once_pins_and_lands_typed_columns(
    kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path
) -> None:
    topic = unique("json")
    create_topic(kafka.bootstrap, topic, 2)
    support.produce(kafka.bootstrap, topic, records(0, 1000))
    output = str(tmp_path / "out")
    flags = ["--format", "json", "--checkpoint-interval-ms", "300", "--log-format", "json"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="j",
                              log_dir=tmp_path, extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 90).ok
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()
    pinned = json.loads((Path(output) / "_coordinator" / "settings.json").read_text())["json.schema"]
    assert pinned.startswith("id:int64,price:double,user:struct<name: string, tags: list<item: string>>"), pinned
    table = landed(output)
    assert table.schema.field("id").type == pa.int64() and pa.types.is_struct(table.schema.field("user").type)
    assert sorted(table.column("id").to_pylist()) == list(range(1000))
    log_lines = [line for line in node.log.read_text().splitlines() if line.strip()]
    assert log_lines and all(json.loads(line)["level"] for line in log_lines)  # --log-format json: one object each
    assert any("pinned" in json.loads(line)["message"] for line in log_lines)

    # a restart reads the pinned schema (it samples nothing): records with a new field keep the pinned columns
    support.produce(kafka.bootstrap, topic, [json.dumps({"id": 5000 + i, "extra": "x"}).encode() for i in range(10)])
    again = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="j",
                               log_dir=tmp_path / "again", extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 90).ok
        again.terminate()
        assert again.wait(30) == 0
    finally:
        again.stop()
    table = landed(output)
    assert "extra" not in table.schema.names and table.num_rows == 1010
    assert "inferred" not in again.log.read_text()


def test_json_schema_flag_with_nested_types(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("jsonflag")
    create_topic(kafka.bootstrap, topic, 1)
    support.produce(kafka.bootstrap, topic, records(0, 300))
    output = str(tmp_path / "out")
    schema = "id:int64,user:struct<name: string, tags: list<item: string>>,ok:bool"
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="f",
                              log_dir=tmp_path, extra=["--format", "json", "--json-schema", schema,
                                                       "--checkpoint-interval-ms", "300"])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 90).ok
    finally:
        node.stop()
    table = landed(output)
    assert table.schema.names[:3] == ["id", "user", "ok"] and "price" not in table.schema.names
    assert table.column("user").combine_chunks().field("tags").type == pa.list_(pa.string())
    verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr
