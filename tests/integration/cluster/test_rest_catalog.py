"""Iceberg output through a real REST catalog (`rest_catalog`: Iceberg's own REST catalog server):
pyiceberg's RestCatalog creates, fills and reads a table whose files are on the local disk, and
`run --table-format iceberg --catalog-uri <uri>` lands a topic that `verify` proves exact."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import support
from tests.conftest import KafkaHandle
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_pyiceberg_round_trip_with_local_files(rest_catalog: str, unique: Callable[[str], str],
                                               tmp_path: Path) -> None:
    namespace = table_name_of(unique("rest_ns"))
    catalog = RestCatalog("test", uri=rest_catalog)
    catalog.create_namespace(namespace)
    assert (namespace,) in catalog.list_namespaces()

    location = tmp_path / "events"
    rows = pa.table({"key": pa.array([1, 2, 3], pa.int64()), "value": pa.array(["a", "b", "c"])})
    data_file = location / "data" / "part-0.parquet"
    data_file.parent.mkdir(parents=True)
    pq.write_table(rows, data_file)

    table = catalog.create_table((namespace, "events"), schema=rows.schema, location=str(location))
    table.add_files([str(data_file)])

    loaded = catalog.load_table((namespace, "events"))
    assert loaded.scan().to_arrow().sort_by("key").equals(rows)
    assert [task.file.file_path for task in loaded.scan().plan_files()] == [str(data_file)]
    # the server wrote the metadata beside our data file, on the local disk
    assert Path(loaded.metadata_location.removeprefix("file:")).parent == location / "metadata"
    assert list((location / "metadata").glob("*.metadata.json"))
    assert not list(location.rglob("*.crc"))


def test_run_and_verify_through_the_rest_catalog(kafka: KafkaHandle, rest_catalog: str,
                                                 unique: Callable[[str], str], tmp_path: Path) -> None:
    topic = unique("rest.cli")
    pipeline = unique("rest-p")
    namespace = table_name_of(pipeline)
    create_topic(kafka.bootstrap, topic, 3)
    support.produce(kafka.bootstrap, topic, [b"v%d" % i for i in range(2000)])
    output = str(tmp_path / "lake")
    lake = LakeTarget(output, TableFormat.ICEBERG, pipeline,
                      IcebergSettings(namespace=namespace, catalog_uri=rest_catalog))
    lake_flags = ["--table-format", "iceberg", "--catalog-uri", rest_catalog]
    node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline=pipeline,
                              log_dir=tmp_path, extra=["--checkpoint-interval-ms", "300", *lake_flags])
    try:
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()

    table = RestCatalog("test", uri=rest_catalog).load_table((namespace, table_name_of(topic)))
    assert committed_epoch(table, pipeline) >= 1
    assert str(table.location()).rstrip("/").endswith(f"lake/{topic}")
    assert list((tmp_path / "lake" / topic / "metadata").glob("*.metadata.json"))
    assert not (tmp_path / "lake" / "_catalog").exists()  # the REST catalog, not the embedded one

    verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", topic,
                 "--pipeline", pipeline, *lake_flags, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] and sum(p["expected"] for p in report["partitions"]) == 2000
    assert report["files"] == int(table.current_snapshot().summary.additional_properties["total-data-files"])


def test_a_restarted_catalog_takes_concurrent_commits_and_reads_the_latest(tmp_path: Path) -> None:
    """Iceberg's REST catalog server started again on its SQLite file (the chaos campaign's
    catalog-restart): three clients commit to one table concurrently, every commit lands (a lost race
    is retried) and any client then reads the latest metadata. With a pool of JDBC connections the
    restarted server left a read open on one of them: commits through the others failed with
    "database is locked" (500) for minutes, and reads through it were stale (laminar_kafka.devstack.jvm.rest_catalog)."""
    import threading

    from pyiceberg.exceptions import CommitFailedException

    from laminar_kafka.devstack.jvm.rest_catalog import new_rest_catalog

    server = new_rest_catalog(tmp_path)
    server.start(timeout=120.0)
    identifier = ("restart_ns", "counters")
    try:
        first = RestCatalog("first", uri=server.uri)
        first.create_namespace(identifier[0])
        first.create_table(identifier, schema=pa.schema([pa.field("n", pa.int64())]),
                           location=str(tmp_path / "counters"), properties={"commit.retry.num-retries": "0"})
        server.server.kill()
        server.start(timeout=120.0)
        per_client, errors, landed = 6, [], []

        def commit_from(client: int) -> None:
            catalog, reader = RestCatalog(f"c{client}", uri=server.uri), RestCatalog(f"r{client}", uri=server.uri)
            try:
                for index in range(per_client):
                    key = f"c{client}.{index}"
                    for _ in range(50):
                        try:
                            with catalog.load_table(identifier).transaction() as transaction:
                                transaction.set_properties({key: "1"})
                            break
                        except CommitFailedException:
                            continue  # another client committed first: load again
                    else:
                        raise AssertionError(f"{key} lost 50 races")
                    landed.append(key)
                    assert key in reader.load_table(identifier).properties, f"{key} committed, then read stale"
            except Exception as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(f"client {client}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=commit_from, args=(client,)) for client in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        properties = RestCatalog("after", uri=server.uri).load_table(identifier).properties
        assert len(landed) == 3 * per_client and all(key in properties for key in landed)
    finally:
        server.stop()
