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
