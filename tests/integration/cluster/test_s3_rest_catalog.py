"""Iceberg on S3 (the session's SeaweedFS, `s3_server`) through a REST catalog.

An embedded node lands a topic with ``--output s3://laminar-test/... --table-format iceberg
--catalog-uri http://...`` and the catalog's properties in the config file's ``[iceberg]`` table; it
is SIGKILLed and restarted; `verify` (the CLI, with the same config file) finds the table exact, and
pyiceberg reads it independently through the catalog. Two catalogs:

- SeaweedFS's own (``credential``, ``warehouse``, ``oauth2-server-uri`` in ``[iceberg]``). What it
  cannot do: hold a table at the location the lake gives it. A table's location must lie in the
  catalog's table bucket, and that bucket's S3 door takes objects only under
  ``<namespace>/<table>/{metadata,data,_<name>}/``, while the lake keeps ``dt=`` directories right under
  ``<output>/<topic>`` and ``_staging/`` beside it. So one test shows a node with the default
  ``table-location=output`` stop at start with one line that names the setting; one pre-creates the
  table (no location: SeaweedFS places it in its table bucket) with just ``_timestamp`` and the day
  partitioning, and the node checks it, evolves its schema on the first commit and adds its data files
  from the plain bucket (a catalog accepts data files anywhere); and three ZooKeeper-mode nodes with
  ``table-location=catalog`` create the table themselves where the catalog places it and commit to it.
- Iceberg's RESTCatalogServer writing its metadata to SeaweedFS's S3 (`rest_catalog_on_s3`): the
  lake's own layout, the node creating its table at ``<output>/<topic>``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.partitions import partition_spec_of
from laminar_kafka.cluster.lake.iceberg.tables import iceberg_schema_of, load_table_or_none
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import LakeTarget, TableFormat, table_name_of
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.topics import create_topic
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.integration.cluster.harness import PARTITIONS, assert_exact, scrape
from tests.integration.cluster.test_cli_commands import cli
from tests.integration.cluster.test_s3_sink import S3Pipeline
from tests.s3_fixtures import TEST_BUCKET, TEST_TABLE_BUCKET

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@dataclass
class CatalogPipeline(S3Pipeline):
    """An S3 pipeline whose Iceberg catalog needs properties (the `[iceberg]` table of ``config``)."""

    iceberg_properties: dict[str, str] = field(default_factory=dict)

    @property
    def lake(self) -> LakeTarget:
        lake = super().lake
        assert lake.iceberg is not None
        return replace(lake, iceberg=replace(lake.iceberg, properties=dict(self.iceberg_properties)))

    @property
    def identifier(self) -> tuple[str, str]:
        return (table_name_of(self.pipeline), table_name_of(self.topic))


def write_config(path: Path, properties: dict[str, str]) -> Path:
    """A node's TOML config file holding only the ``[iceberg]`` table."""
    path.write_text("[iceberg]\n" + "".join(f'"{key}" = "{value}"\n' for key, value in properties.items()))
    return path


def seaweed_catalog(server: SeaweedServer) -> Catalog:
    """pyiceberg's own client of SeaweedFS's catalog (independent of the node's)."""
    return RestCatalog("independent", uri=server.catalog_uri, **server.catalog_properties(),
                       **{"s3.endpoint": server.endpoint, "s3.region": server.region})


def precreate_table(catalog: Catalog, identifier: tuple[str, str]) -> Table:
    """The table as a catalog that places tables itself needs it: created by the catalog (no
    location), with the partition column only; the node's first commit adds the other columns."""
    schema = iceberg_schema_of(pa.schema([pa.field("_timestamp", pa.timestamp("ms"))]))
    catalog.create_namespace_if_not_exists(identifier[0])
    return catalog.create_table(identifier, schema=schema,
                                partition_spec=partition_spec_of(PartitionSpec.parse("day"), schema))


def catalog_pipeline(kafka: KafkaHandle, name: str, base: Path, catalog_uri: str, properties: dict[str, str],
                     zk: str | None = None) -> CatalogPipeline:
    """An Iceberg pipeline landing ``name`` into ``s3://TEST_BUCKET/<name>`` through ``catalog_uri``."""
    create_topic(kafka.bootstrap, name, PARTITIONS)
    pipeline = CatalogPipeline(bootstrap=kafka.bootstrap, zk=zk, topic=name, pipeline=name, base=base,
                               s3_output=f"s3://{TEST_BUCKET}/{name}", iceberg_properties=properties)
    pipeline.table_format, pipeline.catalog_uri = TableFormat.ICEBERG, catalog_uri
    return pipeline


def land_across_a_kill_and_audit(pipeline: CatalogPipeline, catalog: Catalog, config: Path) -> Table:
    """One embedded node lands the topic, is SIGKILLed after three epochs and restarted; the table is
    exact (the harness's audit, then `laminar-kafka verify` with the node's config file) and pyiceberg
    reads every expected row once through ``catalog``, a client of its own. Returns the table."""
    name, catalog_uri = pipeline.topic, pipeline.catalog_uri
    assert catalog_uri is not None

    def committed() -> int:
        table = load_table_or_none(catalog, pipeline.identifier)
        return 0 if table is None else committed_epoch(table, name)

    flags = ("--state-dir", str(pipeline.base / "state"), "--config", str(config))
    node = pipeline.launch(1, *flags)
    pipeline.produce(rate=1500)
    pipeline.wait_until(lambda: committed() >= 3, 90, "three epochs committed through the REST catalog")
    node.kill()
    node = pipeline.launch(1, *flags)
    before = committed()
    pipeline.wait_until(lambda: committed() > before + 2, 90, "epochs committed after the restart")
    report = pipeline.finish()
    assert_exact(report, pipeline)
    node.terminate()
    assert node.wait(60) == 0, node.log_text()[-3000:]
    assert "Traceback" not in node.log_text()

    verify = cli("verify", "--output", pipeline.output, "--bootstrap", pipeline.bootstrap, "--topic", name,
                 "--config", str(config), "--table-format", "iceberg", "--pipeline", name,
                 "--catalog-uri", catalog_uri, "--json")
    assert verify.returncode == 0, verify.stderr
    audit = json.loads(verify.stdout)
    assert audit["ok"] and audit["missing"] == 0 and audit["duplicated"] == 0, verify.stdout

    table = catalog.load_table(pipeline.identifier)
    rows = table.scan(selected_fields=("_partition", "_offset")).to_arrow()
    expected = sum(p.expected for p in report.partitions)
    assert rows.num_rows == expected
    keys = pc.add(pc.multiply(rows.column("_partition").cast(pa.int64()), 1 << 40), rows.column("_offset"))
    assert len(pc.unique(keys)) == expected
    assert all(task.file.file_path.startswith(f"{pipeline.output}/{name}/dt=") for task in table.scan().plan_files())
    assert {f.name for f in table.schema().fields} >= {"_topic", "_partition", "_offset", "_timestamp"}
    return table


def test_node_lands_iceberg_on_s3_through_seaweedfs_catalog_exactly_once(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    properties = s3_server.catalog_properties()
    pipeline = catalog_pipeline(kafka, unique("sw-cat"), tmp_path, s3_server.catalog_uri, properties)
    catalog = seaweed_catalog(s3_server)
    created = precreate_table(catalog, pipeline.identifier)
    assert created.location().startswith(f"s3://{TEST_TABLE_BUCKET}/")
    try:
        table = land_across_a_kill_and_audit(pipeline, catalog, write_config(tmp_path / "node.toml", properties))
        assert table.location() == created.location()  # the catalog's place; the data files in the plain bucket
    finally:
        pipeline.stop_all()


def test_node_lands_iceberg_at_its_own_s3_location_through_icebergs_rest_catalog(
    s3_server: SeaweedServer, rest_catalog_on_s3: str, kafka: KafkaHandle, unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The lake's own layout (the node creates the table at ``<output>/<topic>``) through a REST
    catalog over SeaweedFS's S3: Iceberg's RESTCatalogServer writing its metadata with S3FileIO."""
    pipeline = catalog_pipeline(kafka, unique("jvm-cat"), tmp_path, rest_catalog_on_s3, {})
    catalog = RestCatalog("independent", uri=rest_catalog_on_s3,
                          **{"s3.endpoint": s3_server.endpoint, "s3.region": s3_server.region})
    try:
        table = land_across_a_kill_and_audit(pipeline, catalog, write_config(tmp_path / "node.toml", {}))
        assert table.location() == f"{pipeline.output}/{pipeline.topic}"
        assert table.metadata_location.startswith(f"{pipeline.output}/{pipeline.topic}/metadata/")
        fs, root = s3_server.access.filesystem(), f"{TEST_BUCKET}/{pipeline.topic}/{pipeline.topic}/metadata"
        assert fs.get_file_info(root).type == pafs.FileType.Directory  # written to SeaweedFS by the JVM
    finally:
        pipeline.stop_all()


def test_a_table_the_lake_would_place_is_refused_by_seaweedfs_catalog_in_one_line(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    name = unique("sw-own")
    create_topic(kafka.bootstrap, name, 1)
    config = write_config(tmp_path / "node.toml", s3_server.catalog_properties())
    result = cli("run", "--bootstrap", kafka.bootstrap, "--topic", name, "--pipeline", name,
                 "--output", f"s3://{TEST_BUCKET}/{name}", "--state-dir", str(tmp_path / "state"),
                 "--table-format", "iceberg", "--catalog-uri", s3_server.catalog_uri, "--config", str(config))
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]  # after the node's log lines
    assert error.startswith("error: iceberg catalog check failed"), result.stderr
    assert f"table location must be within bucket {TEST_TABLE_BUCKET}" in error and "Traceback" not in result.stderr
    assert error.endswith("(a catalog that places its tables itself: set table-location=catalog)")


def node_metric(metrics_port: int, name: str) -> int:
    """The per-node sample ``name`` (a counter with ``_total``, or a histogram's ``_count``) of the
    node whose metrics are on ``metrics_port``."""
    found = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", scrape(metrics_port), re.MULTILINE)
    assert found is not None, f"no {name}"
    return int(float(found.group(1)))


def lake_commits(metrics_port: int) -> int:
    return node_metric(metrics_port, "laminar_lake_commits_total")


def test_three_zookeeper_nodes_commit_each_epoch_once_through_seaweedfs_catalog(
    s3_server: SeaweedServer, kafka: KafkaHandle, zookeeper: ZooKeeperHandle, unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Three nodes start together on a pipeline whose table does not exist: with ``table-location
    catalog`` they create it where SeaweedFS's catalog places it (one creation wins). Every node
    tries every epoch's commit into the one table; the catalog's conditional commits (409 on a stale
    base) and the table property let exactly one land per epoch, and the nodes count the rest."""
    name = unique("sw-zk")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    output = f"s3://{TEST_BUCKET}/{name}"
    config = write_config(tmp_path / "node.toml", s3_server.catalog_properties())
    pipeline = CatalogPipeline(bootstrap=kafka.bootstrap, zk=zookeeper.hosts, topic=name, pipeline=name,
                               base=tmp_path, s3_output=output, iceberg_properties=s3_server.catalog_properties())
    pipeline.table_format, pipeline.catalog_uri = TableFormat.ICEBERG, s3_server.catalog_uri
    catalog = seaweed_catalog(s3_server)
    metrics = {node_id: free_port() for node_id in (1, 2, 3)}
    try:
        for node_id, port in metrics.items():  # no table yet: the nodes create it where the catalog places it
            pipeline.launch(node_id, "--config", str(config), "--metrics-port", str(port), "--table-location", "catalog")
        pipeline.produce(rate=1500)
        pipeline.wait_spread(3, timeout=90)
        pipeline.wait_until(lambda: committed_epoch(catalog.load_table(pipeline.identifier), name) >= 8, 120,
                            "eight epochs committed by three nodes")
        assert_exact(pipeline.finish(), pipeline)
        table = catalog.load_table(pipeline.identifier)
        assert table.location().startswith(f"s3://{TEST_TABLE_BUCKET}/")  # the catalog's place
        assert all(task.file.file_path.startswith(f"{output}/{name}/dt=") for task in table.scan().plan_files())
        epochs = [s.summary.get("laminar.epoch") for s in table.snapshots() if s.summary is not None]
        landed = [int(epoch) for epoch in epochs if epoch]
        assert len(landed) == len(set(landed)) > 0  # each epoch's files in exactly one snapshot
        assert landed == sorted(landed)  # in epoch order
        # each landed epoch counted once, by the node that made it (a node counts after its publish returns)
        pipeline.wait_until(lambda: sum(lake_commits(port) for port in metrics.values()) == len(landed), 10,
                            f"the nodes' laminar_lake_commits adding up to the {len(landed)} epoch snapshots")
        timed = sum(node_metric(port, "laminar_lake_commit_seconds_count") for port in metrics.values())
        no_ops = sum(node_metric(port, "laminar_lake_commits_found_done_total") for port in metrics.values())
        assert timed == len(landed)  # every commit measured
        assert no_ops > 0  # the other nodes found epochs committed (each node publishes every epoch)
        for node in pipeline.nodes.values():
            node.terminate()
        assert all(node.wait(60) == 0 for node in pipeline.nodes.values()), pipeline.tail_logs()
    finally:
        pipeline.stop_all()
