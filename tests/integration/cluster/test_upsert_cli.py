"""Upsert mode through the CLI on real Kafka: a keyed JSON topic, and a Debezium topic, with creates,
updates, deletes and tombstones land in a keyed Iceberg table; the node is SIGKILLed while it applies
the changes and started again; the table reads back (pyiceberg and DuckDB) as exactly the final state
of every key, and the audit of a keyed table agrees; the change files went with their epochs. A key
with changes in two partitions within one epoch stops the node in one line, again after a restart."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyiceberg.table import Table

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat
from laminar_kafka.cluster.ops.verify_upsert import compare_state, read_changes, source_decode, table_state
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until
from tests import duckdb_queries as q
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEYS = 2000
SCHEMA = "id:int64,name:string,version:int64"


class KeyedProducer:
    """Produces a key's changes and models each key's final row. ``json``: the row as the value, the
    id as a scalar record key, a tombstone deletes. ``debezium-json``: Debezium's envelope (``op`` c,
    u, d with ``before`` and ``after``), the key as ``{"id": ...}``, a delete followed by its tombstone."""

    def __init__(self, bootstrap: str, topic: str, record_format: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.debezium = record_format == "debezium-json"
        self.state: dict[int, tuple[str, int]] = {}
        self.count = 0

    def _send(self, key: int, value: dict[str, object] | None) -> None:
        record_key = json.dumps({"id": key}) if self.debezium else str(key)
        self.producer.produce(self.topic, key=record_key.encode(), value=None if value is None else json.dumps(value).encode())
        self.count += 1

    def _row(self, key: int) -> dict[str, object] | None:
        if key not in self.state:
            return None
        name, version = self.state[key]
        return {"id": key, "name": name, "version": version}

    def upsert(self, key: int, version: int) -> None:
        before = self._row(key)
        self.state[key] = (f"k{key}-v{version}", version)
        after = self._row(key)
        self._send(key, {"before": before, "after": after, "op": "u" if before else "c"} if self.debezium else after)

    def delete(self, key: int) -> None:
        if self.debezium:
            self._send(key, {"before": self._row(key), "after": None, "op": "d"})
        self._send(key, None)  # a tombstone
        self.state.pop(key, None)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def produce_changes(producer: KeyedProducer, versions: range, pause_s: float) -> None:
    """Each version changes a quarter of the keys: an update, or every third version a tombstone for
    keys divisible by 10 (the next version of such a key creates it again); ``pause_s`` between versions."""
    for version in versions:
        for key in range(version % 4, KEYS, 4):
            if key % 10 == 0 and version % 3 == 0:
                producer.delete(key)
            else:
                producer.upsert(key, version)
        producer.flush()
        time.sleep(pause_s)  # a paced producer (not a wait for an event): the changes span many epochs


def table_of(output: str, name: str) -> Table | None:
    fs, root = open_output(output)
    return load_table_or_none(open_catalog(IcebergSettings(namespace="u"), fs, root), ("u", name))


def epoch_of(output: str, name: str) -> int:
    table = table_of(output, name)
    return committed_epoch(table, "u") if table is not None else 0


@pytest.mark.parametrize("record_format", ["json", "debezium-json"])
def test_changes_with_deletes_and_a_sigkill_land_the_final_state(
        kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path, record_format: str) -> None:
    topic = unique("upsert")
    create_topic(kafka.bootstrap, topic, 3)
    output = str(tmp_path / "lake")
    lake = LakeTarget(output, TableFormat.ICEBERG, "u", IcebergSettings(namespace="u", upsert_keys=("id",)))
    name = topic.replace(".", "_").replace("-", "_")
    producer = KeyedProducer(kafka.bootstrap, topic, record_format)
    for key in range(KEYS):
        producer.upsert(key, 0)
    producer.flush()
    flags = ["--format", record_format, "--json-schema", SCHEMA, "--upsert-keys", "id", "--table-format", "iceberg",
             "--checkpoint-interval-ms", "300"]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="u",
                              log_dir=tmp_path, extra=flags)
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok, node.log_text()[-3000:]
        table = table_of(output, name)
        assert table is not None and table.schema().identifier_field_names() == {"id"}
        first_epoch = committed_epoch(table, "u")
        # updates, deletes and re-creates produced over a few seconds; SIGKILL once the node committed an
        # epoch of them (the production goes on meanwhile), then a restart
        changing = threading.Thread(target=produce_changes, args=(producer, range(1, 41), 0.1))
        changing.start()
        try:
            wait_until(lambda: epoch_of(output, name) > first_epoch, 30, "an epoch of changes")
            node.kill()
        finally:
            changing.join()
        for key in range(0, KEYS, 50):  # these keys end deleted
            producer.delete(key)
        producer.flush()
        node.start()
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok, node.log_text()[-3000:]
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()

    expected = {key: name_version for key, name_version in producer.state.items()}
    assert len(expected) < KEYS  # some keys end deleted
    table = table_of(output, name)
    assert table is not None
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == len(expected)
    assert {r["id"]: (r["name"], r["version"]) for r in rows} == expected
    assert "_op" not in table.schema().column_names
    # the change files went with their epochs (a SIGKILL between a commit and its deletes may leave one epoch's)
    left = [p for p in (Path(output) / topic).rglob("*.parquet") if p.relative_to(Path(output) / topic).parts[0] != "data"]
    assert len({re.search(r"epoch-\d+", p.name).group() for p in left}) <= 1, left  # type: ignore[union-attr]

    connection = q.connect(tmp_path / "duckdb-extensions", q.ICEBERG)
    q.run(connection, q.METADATA_FILE, metadata=table.metadata_location)
    duck = q.rows_as_dicts(connection, q.SCAN_ROWS)
    assert len(duck) == len(expected)
    assert {r["id"]: (r["name"], r["version"]) for r in duck} == expected

    settings = settings_from({"bootstrap": kafka.bootstrap, "topic": topic, "output": output, "format": record_format,
                              "json-schema": SCHEMA, "upsert-keys": "id", "table-format": "iceberg"}, {}, {})
    changes = read_changes(kafka.bootstrap, topic, source_decode(settings.source_config()))
    assert changes.num_rows == producer.count
    audit = compare_state(topic, changes, table_state(table, ["id"]), ["id"])
    assert audit.ok and audit.keys == len(expected), audit.line()
    verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic, "--table-format",
                 "iceberg", "--pipeline", "u", "--format", record_format, "--json")
    assert verify.returncode == 0, verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] and report["keys"] == len(expected) and report["rows"] == len(expected), report


def test_a_key_in_two_partitions_within_one_epoch_stops_the_node_in_one_line_again_after_a_restart(
        kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("upsert-split")
    create_topic(kafka.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for partition in (0, 1):  # key 7 in both partitions: a producer that does not partition by key
        for version in range(3):
            row = {"id": 7, "name": f"p{partition}-v{version}", "version": version}
            producer.produce(topic, key=b"7", value=json.dumps(row).encode(), partition=partition)
    assert producer.flush(30) == 0
    output = str(tmp_path / "lake")
    flags = ["--format", "json", "--json-schema", SCHEMA, "--upsert-keys", "id", "--table-format", "iceberg",
             "--checkpoint-interval-ms", "2000"]  # the first epoch holds every record produced before the start
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline="u",
                              log_dir=tmp_path, extra=flags)
    refusal = re.compile(r"key id=7 has changes in Kafka partitions 0 and 1 within one epoch: ")
    try:
        lines = []
        for run in range(2):  # the refused epoch is durable: started again, the node stops the same way
            if run:
                node.start()
            assert node.wait(40) != 0
            log = node.log_text()
            assert "Traceback" not in log, log[-3000:]
            # the stop is one error line each time (a restart also warns of it while it reconciles)
            lines = [line for line in log.splitlines() if line.startswith("error: ") and refusal.search(line)]
            assert len(lines) == run + 1, log[-3000:]
        assert lines[0] == lines[1]
    finally:
        node.stop()
    assert epoch_of(output, topic.replace(".", "_").replace("-", "_")) == 0  # nothing of the epoch is visible
