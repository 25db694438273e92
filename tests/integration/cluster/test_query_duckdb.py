"""Querying the lake as users do: DuckDB, with its extensions from PyPI and nothing downloaded.

Every query is a template of :mod:`tests.duckdb_queries`, the statements docs/lake.md shows. Each
test lands a topic through real nodes on the session's Kafka (and ZooKeeper, a REST catalog,
SeaweedFS), proves the lake exact with the harness's audit, then reads it with DuckDB and compares
with the topic itself (read from Kafka, ``read_committed``) and, for Iceberg, with pyiceberg's read:

- the Parquet tree, local and on S3 (``httpfs``): ``read_parquet('<output>/<topic>/**/*.parquet',
  hive_partitioning = true)`` is exactly the published files; DuckDB does not skip ``_`` directories,
  so a glob over the whole output also lists ``_staging/`` (files being written, or of epochs not
  committed) and ``_rejected/``;
- Iceberg through Iceberg's REST catalog (``ATTACH ... TYPE iceberg``) and through the table's current
  metadata file (``iceberg_scan``), after a node restart and several snapshots; the embedded SQLite
  catalog (the metadata file read from it with the ``sqlite`` extension); SeaweedFS's catalog with
  OAuth over S3. After ``compact``, the table's tree is no longer its rows (old and rewritten files
  side by side): read an Iceberg table through Iceberg.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests import duckdb_queries as q
from tests import support
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact, make_pipeline
from tests.integration.cluster.test_cli_commands import cli
from tests.integration.cluster.test_dead_letter import FLAGS as BAD_RECORD_FLAGS
from tests.integration.cluster.test_dead_letter import ChunkProducer
from tests.integration.cluster.test_s3_rest_catalog import (
    catalog_pipeline,
    land_across_a_kill_and_audit,
    precreate_table,
    seaweed_catalog,
    write_config,
)
from tests.integration.cluster.test_s3_sink import S3Pipeline
from tests.s3_fixtures import TEST_BUCKET

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def duck(tmp_path: Path, extensions: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    """:func:`tests.duckdb_queries.connect` with an empty extension directory of the test's own."""
    directory = tmp_path / "duckdb-extensions"
    directory.mkdir(exist_ok=True)
    return q.connect(directory, extensions)


def topic_records(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes | None]:
    """Every record of ``topic`` (``read_committed``), by (partition, offset)."""
    return {(partition, offset): value for partition, records in support.read_all(bootstrap, topic).items()
            for offset, value in records}


def by_key(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(row["_partition"], row["_offset"]) for row in rows]


def iceberg_rows(table: Table) -> list[dict[str, Any]]:
    """pyiceberg's read of the table's current snapshot, ordered as the queries order."""
    return table.scan().to_arrow().sort_by([("_partition", "ascending"), ("_offset", "ascending")]).to_pylist()


# --- nothing is downloaded -----------------------------------------------------------------------------


@contextlib.contextmanager
def recording_repository() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server standing in for DuckDB's extension repository: it answers 404 to every
    request and records the paths asked for. Yields (its URL, the paths)."""
    requested: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server hook
            requested.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # the hook's signature
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_missing_extension_fails_instead_of_downloading(tmp_path: Path) -> None:
    connection = duck(tmp_path, ())
    settings = connection.execute("SELECT current_setting('autoinstall_known_extensions'), "
                                  "current_setting('autoload_known_extensions'), "
                                  "current_setting('lock_configuration')").fetchall()
    assert settings == [(False, False, True)]
    with pytest.raises(duckdb.InvalidInputException, match="configuration has been locked"):
        connection.execute("SET autoinstall_known_extensions = true")

    scan = "SELECT * FROM iceberg_scan('/nowhere/metadata/v1.metadata.json')"
    remote = "SELECT * FROM read_parquet('s3://nowhere/x.parquet')"
    with recording_repository() as (repository, requested):
        repositories = {"autoinstall_extension_repository": repository, "custom_extension_repository": repository}
        refusing = duckdb.connect(config={**q.NO_DOWNLOAD, "extension_directory": str(tmp_path / "a"), **repositories})
        for query, extension in ((scan, "iceberg"), (remote, "httpfs")):
            with pytest.raises(duckdb.Error, match=extension):
                refusing.execute(query)
        assert requested == []
        # the control: DuckDB's defaults (auto-install on) ask the repository for the extension
        defaults = duckdb.connect(config={"extension_directory": str(tmp_path / "b"), **repositories})
        with pytest.raises(duckdb.Error, match="Failed to download extension"):
            defaults.execute(scan)
        assert len(requested) == 1 and requested[0].startswith(f"/v{duckdb.__version__}/")
        assert requested[0].endswith("/iceberg.duckdb_extension.gz")
    assert not any((tmp_path / "a").rglob("*.duckdb_extension*"))


# --- the Parquet tree ------------------------------------------------------------------------------------


def relative(output: str, files: list[str]) -> list[str]:
    """DuckDB's glob answers, relative to the output."""
    assert all(file.startswith(f"{output}/") for file in files), files
    return [file[len(output) + 1:] for file in files]


def globbed(connection: duckdb.DuckDBPyConnection, template: str, **values: str) -> list[str]:
    return [row[0] for row in q.run(connection, template, **values)]


@pytest.fixture
def zookeeper_pipeline(kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str],
                       tmp_path: Path) -> Iterator[Pipeline]:
    """A ZooKeeper-mode pipeline on a fresh 8-partition topic; every node is stopped afterwards."""
    landing = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("duck-tree"), tmp_path)
    try:
        yield landing
    finally:
        landing.stop_all()


def test_read_parquet_over_the_tree_is_exactly_the_topic(zookeeper_pipeline: Pipeline, tmp_path: Path) -> None:
    """Two ZooKeeper nodes land JSON records (every 37th bad, skipped to ``_rejected/``); the topic's
    glob reads exactly the topic's good records, the published files and nothing else, while a glob
    over the whole output lists staged and rejected files too."""
    pipeline, connection = zookeeper_pipeline, duck(tmp_path, q.PARQUET_TREE)
    output, topic = pipeline.output, pipeline.topic
    for node_id in (1, 2):
        pipeline.launch(node_id, *BAD_RECORD_FLAGS)
    pipeline.wait_spread(2, timeout=90)
    producer = ChunkProducer(pipeline.bootstrap, topic, gap=1.0)  # 12 chunks of 400, about 12 s
    producer.start()
    seen: dict[str, list[str]] = {}

    def staged_and_rejected_listed() -> bool:
        """The root glob lists a staged file and a published rejected one; the topic's glob never a `_` path."""
        in_topic = relative(output, globbed(connection, q.TOPIC_GLOB, output=output, topic=topic))
        assert all(path.startswith(f"{topic}/") and "/_" not in path for path in in_topic), in_topic
        outside = [path for path in relative(output, globbed(connection, q.ROOT_GLOB, output=output))
                   if not path.startswith(f"{topic}/")]
        for kind in ("_staging/", "_rejected/"):
            seen.setdefault(kind, []).extend(path for path in outside if path.startswith(kind))
        return bool(seen["_staging/"]) and bool(seen["_rejected/"])

    pipeline.wait_until(staged_and_rejected_listed, 60, "a staged and a rejected file listed by the root glob")
    assert producer.is_alive(), "production ended before the staged file was seen"
    producer.join(60)
    assert not producer.is_alive() and producer.error is None, producer.error
    report = pipeline.finish()
    assert_exact(report, pipeline)
    for node in pipeline.nodes.values():
        node.terminate()
    assert all(node.wait(60) == 0 for node in pipeline.nodes.values()), pipeline.tail_logs()

    records = topic_records(pipeline.bootstrap, topic)
    good, bad = {}, {}
    for key, value in records.items():
        try:
            decoded = json.loads(value or b"")
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("id"), int):
            good[key] = (decoded["id"], decoded["name"])
        else:
            bad[key] = value
    assert len(good) == report.rows > 0 and len(bad) == report.rejected > 0

    assert q.run(connection, q.TREE_COUNT, output=output, topic=topic) == [(len(good), len(good))]
    rows = q.rows_as_dicts(connection, q.TREE_ROWS, output=output, topic=topic)
    assert by_key(rows) == sorted(good)
    assert [(row["id"], row["name"]) for row in rows] == [good[key] for key in sorted(good)]
    assert {row["_topic"] for row in rows} == {topic}
    assert {type(row["dt"]).__name__ for row in rows} == {"date"}  # the dt= directories, typed by hive_partitioning
    assert all(row["dt"] == row["_timestamp"].date() for row in rows)  # UTC days
    rejected = q.run(connection, q.REJECTED_ROWS, output=output)
    assert [(p, o, value) for p, o, value, _error in rejected] == [(*key, bad[key]) for key in sorted(bad)]
    assert all(error for *_, error in rejected)

    # the topic's glob lists exactly the lake's published files; the root glob also the `_` directories
    fs, root = open_output(output)
    topic_files = globbed(connection, q.TOPIC_GLOB, output=output, topic=topic)
    assert topic_files == list_published(fs, root) and len(topic_files) > 2
    outside = [path for path in relative(output, globbed(connection, q.ROOT_GLOB, output=output))
               if not path.startswith(f"{topic}/")]
    assert outside and all(path.startswith("_") for path in outside), outside
    assert [path for path in outside if path.startswith("_rejected/")]


def test_read_parquet_over_the_tree_on_s3(s3_server: SeaweedServer, kafka: KafkaHandle,
                                          unique: Callable[[str], str], tmp_path: Path) -> None:
    """An embedded node lands the topic on SeaweedFS; DuckDB (``httpfs``, an S3 secret) reads the
    topic's glob and finds exactly the topic."""
    name = unique("duck-s3")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    output = f"s3://{TEST_BUCKET}/{name}"
    pipeline = S3Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path,
                          s3_output=output)
    fs, root = open_output(output)
    try:
        node = pipeline.launch(1, "--state-dir", str(tmp_path / "state"))
        pipeline.produce(rate=1500)
        pipeline.wait_until(lambda: len(list_published(fs, root)) >= 4, 90, "files published on S3")
        report = pipeline.finish()
        assert_exact(report, pipeline)
        node.terminate()
        assert node.wait(60) == 0, node.log_text()[-3000:]
    finally:
        pipeline.stop_all()

    connection = duck(tmp_path, q.ON_S3)
    access = s3_server.access
    q.run(connection, q.S3_SECRET, key_id=access.access_key_id, secret=access.secret_access_key,
          region=access.region, endpoint=f"127.0.0.1:{access.port}")
    records = topic_records(kafka.bootstrap, name)
    assert q.run(connection, q.TREE_COUNT, output=output, topic=name) == [(len(records), len(records))]
    assert len(records) == report.rows > 0
    rows = q.rows_as_dicts(connection, q.TREE_ROWS, output=output, topic=name)
    assert by_key(rows) == sorted(records)
    assert [row["value"] for row in rows] == [records[key] for key in sorted(records)]
    assert globbed(connection, q.TOPIC_GLOB, output=output, topic=name) == [
        f"s3://{path}" for path in list_published(fs, root)]


# --- Iceberg ---------------------------------------------------------------------------------------------


def assert_snapshots_and_time_travel(connection: duckdb.DuckDBPyConnection, table: Table, minimum: int) -> None:
    """With ``metadata`` set: DuckDB lists pyiceberg's snapshots, at least ``minimum``, and reads at
    each of them the rows pyiceberg reads there (each snapshot adding rows, up to the table's)."""
    snapshots = [row[0] for row in q.run(connection, q.SNAPSHOTS)]
    assert snapshots == [snapshot.snapshot_id for snapshot in table.snapshots()] and len(snapshots) >= minimum
    counts = [table.scan(snapshot_id=snapshot, selected_fields=("_offset",)).to_arrow().num_rows
              for snapshot in snapshots]
    assert [q.run(connection, q.SCAN_AT_SNAPSHOT, snapshot_id=snapshot)[0][0] for snapshot in snapshots] == counts
    assert counts == sorted(counts) and counts[-1] == table.scan().to_arrow().num_rows
    assert len(set(counts)) >= minimum


def test_iceberg_through_the_rest_catalog_after_a_restart(kafka: KafkaHandle, zookeeper: ZooKeeperHandle,
                                                          rest_catalog: str, unique: Callable[[str], str],
                                                          tmp_path: Path) -> None:
    """Two ZooKeeper nodes land into an Iceberg table through Iceberg's REST catalog (files on the
    local disk), one is SIGKILLed and restarted; DuckDB attached to the catalog, and ``iceberg_scan``
    of the table's metadata file, read exactly pyiceberg's rows and the topic's values. After
    ``compact`` the table still reads exact, and ``read_parquet`` over the table's tree fails."""
    pipeline = make_pipeline(kafka.bootstrap, zookeeper.hosts, unique("duck-ice"), tmp_path)
    pipeline.table_format, pipeline.catalog_uri = TableFormat.ICEBERG, rest_catalog
    catalog = RestCatalog("independent", uri=rest_catalog)
    namespace, table_name = table_name_of(pipeline.pipeline), table_name_of(pipeline.topic)

    def committed() -> int:
        table = load_table_or_none(catalog, (namespace, table_name))
        return 0 if table is None else committed_epoch(table, pipeline.pipeline)

    try:
        for node_id in (1, 2):
            pipeline.launch(node_id)
        pipeline.produce(rate=1000)
        pipeline.wait_spread(2, timeout=90)
        pipeline.wait_until(lambda: committed() >= 3, 90, "three epochs committed")
        pipeline.nodes[1].kill()
        pipeline.launch(1)
        before = committed()
        pipeline.wait_until(lambda: committed() > before + 2, 90, "epochs committed after the restart")
        report = pipeline.finish()
        assert_exact(report, pipeline)
        for node in pipeline.nodes.values():
            node.terminate()
        assert all(node.wait(60) == 0 for node in pipeline.nodes.values()), pipeline.tail_logs()
    finally:
        pipeline.stop_all()

    table = catalog.load_table((namespace, table_name))
    expected = iceberg_rows(table)
    records = topic_records(kafka.bootstrap, pipeline.topic)
    assert len(expected) == len(records) == report.rows > 0

    connection = duck(tmp_path, q.ICEBERG)
    q.run(connection, q.ATTACH_REST, warehouse="", catalog_uri=rest_catalog)
    names = {"namespace": namespace, "table": table_name}
    assert q.run(connection, q.TABLE_COUNT, **names) == [(len(records), len(records))]
    rows = q.rows_as_dicts(connection, q.TABLE_ROWS, **names)
    assert rows == expected
    assert by_key(rows) == sorted(records)
    assert [row["value"] for row in rows] == [records[key] for key in sorted(records)]

    q.run(connection, q.METADATA_FILE, metadata=table.metadata_location)
    assert q.run(connection, q.SCAN_COUNT) == [(len(records), len(records))]
    assert q.rows_as_dicts(connection, q.SCAN_ROWS) == expected
    assert_snapshots_and_time_travel(connection, table, 5)  # five epochs at least, two after the restart

    compact = cli("compact", "--output", pipeline.output, "--pipeline", pipeline.pipeline, "--topic", pipeline.topic,
                  "--table-format", "iceberg", "--catalog-uri", rest_catalog, "--expire-after", "3600", "--json")
    assert compact.returncode == 0, compact.stderr
    compacted = catalog.load_table((namespace, table_name))
    assert compacted.current_snapshot().snapshot_id != table.current_snapshot().snapshot_id
    connection = duck(tmp_path, q.ICEBERG)
    q.run(connection, q.ATTACH_REST, warehouse="", catalog_uri=rest_catalog)
    assert q.rows_as_dicts(connection, q.TABLE_ROWS, **names) == expected
    # the tree now holds the rewritten files under <table>/data/ beside the originals
    with pytest.raises(duckdb.BinderException, match="Hive partition mismatch"):
        q.run(connection, q.TREE_COUNT, output=pipeline.output, topic=pipeline.topic)


def test_iceberg_of_the_embedded_sqlite_catalog(kafka: KafkaHandle, unique: Callable[[str], str],
                                                tmp_path: Path) -> None:
    """The CLI's default catalog: DuckDB finds the table's current metadata file in
    ``<output>/_catalog/catalog.db`` and ``iceberg_scan`` reads exactly pyiceberg's rows, after a
    SIGKILL and a restart of the node."""
    topic, pipeline = unique("duck.sql"), unique("duck-sql")
    create_topic(kafka.bootstrap, topic, 3)
    output = str(tmp_path / "lake")
    lake = LakeTarget(output, TableFormat.ICEBERG, pipeline, IcebergSettings(namespace=table_name_of(pipeline)))

    def landed_node(values: list[bytes]) -> NodeProcess:
        node = NodeProcess.launch(1, bootstrap=kafka.bootstrap, topic=topic, output=output, zk=None, pipeline=pipeline,
                                  log_dir=tmp_path,
                                  extra=["--checkpoint-interval-ms", "300", "--table-format", "iceberg"])
        support.produce(kafka.bootstrap, topic, values)
        assert wait_caught_up(kafka.bootstrap, topic, output, 60, lake=lake).ok, node.log_text()[-3000:]
        return node

    node = landed_node([b"v%d" % i for i in range(1500)])
    try:
        node.kill()
        node = landed_node([b"w%d" % i for i in range(1500)])
        node.terminate()
        assert node.wait(30) == 0
    finally:
        node.stop()

    fs, root = open_output(output)
    namespace, table_name = table_name_of(pipeline), table_name_of(topic)
    table = open_catalog(IcebergSettings(namespace=namespace), fs, root).load_table((namespace, table_name))
    expected = iceberg_rows(table)
    records = topic_records(kafka.bootstrap, topic)
    assert len(expected) == len(records) == 3000

    connection = duck(tmp_path, q.ICEBERG_SQLITE_CATALOG)
    with pytest.raises(duckdb.Error, match="version-hint"):  # the table's directory alone: no version hint
        connection.execute(f"SELECT count(*) FROM iceberg_scan('{output}/{topic}')")
    q.run(connection, q.ATTACH_SQLITE_CATALOG, output=output)
    q.run(connection, q.METADATA_FROM_SQLITE_CATALOG, namespace=namespace, table=table_name)
    assert connection.execute("SELECT getvariable('metadata')").fetchall() == [(table.metadata_location,)]
    assert q.run(connection, q.SCAN_COUNT) == [(3000, 3000)]
    rows = q.rows_as_dicts(connection, q.SCAN_ROWS)
    assert rows == expected
    assert [row["value"] for row in rows] == [records[key] for key in sorted(records)]
    assert_snapshots_and_time_travel(connection, table, 2)  # a batch before the SIGKILL, one after


def test_iceberg_on_s3_through_seaweedfs_catalog(s3_server: SeaweedServer, kafka: KafkaHandle,
                                                 unique: Callable[[str], str], tmp_path: Path) -> None:
    """The deployment's shape: the table in SeaweedFS's catalog (OAuth client credentials), its data
    files in a plain bucket; a node lands it across a SIGKILL (test_s3_rest_catalog's scenario) and
    DuckDB, attached to the catalog with an S3 secret, reads exactly pyiceberg's rows."""
    properties = s3_server.catalog_properties()
    pipeline = catalog_pipeline(kafka, unique("duck-sw"), tmp_path, s3_server.catalog_uri, properties)
    catalog = seaweed_catalog(s3_server)
    precreate_table(catalog, pipeline.identifier)
    try:
        table = land_across_a_kill_and_audit(pipeline, catalog, write_config(tmp_path / "node.toml", properties))
    finally:
        pipeline.stop_all()
    expected = iceberg_rows(table)
    records = topic_records(kafka.bootstrap, pipeline.topic)
    assert len(expected) == len(records) > 0

    connection = duck(tmp_path, q.ICEBERG)
    access = s3_server.access
    q.run(connection, q.S3_SECRET, key_id=access.access_key_id, secret=access.secret_access_key,
          region=access.region, endpoint=f"127.0.0.1:{access.port}")
    q.run(connection, q.CATALOG_SECRET, key_id=access.access_key_id, secret=access.secret_access_key,
          catalog_uri=s3_server.catalog_uri)
    q.run(connection, q.ATTACH_REST_OAUTH, warehouse=s3_server.table_bucket, catalog_uri=s3_server.catalog_uri)
    namespace, table_name = pipeline.identifier
    assert q.run(connection, q.TABLE_COUNT, namespace=namespace, table=table_name) == [(len(records), len(records))]
    rows = q.rows_as_dicts(connection, q.TABLE_ROWS, namespace=namespace, table=table_name)
    assert rows == expected
    assert [row["value"] for row in rows] == [records[key] for key in sorted(records)]
    q.run(connection, q.METADATA_FILE, metadata=table.metadata_location)
    assert_snapshots_and_time_travel(connection, table, 5)  # three epochs before the SIGKILL, two after

