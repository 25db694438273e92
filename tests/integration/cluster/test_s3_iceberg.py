"""An Iceberg table on S3 (the session's SeaweedFS), through the CLI: an embedded node lands a
topic with `--output s3://... --table-format iceberg` (data and table metadata on S3 through
pyarrow.fs and pyiceberg's FileIO; the catalog in a local SQLite file), is SIGKILLed and restarted,
and the table is exact; `verify` reads it from S3."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from laminar_kafka.devstack.topics import create_topic
from tests.conftest import KafkaHandle
from tests.integration.cluster.harness import PARTITIONS, assert_exact
from tests.integration.cluster.test_cli_commands import cli
from tests.integration.cluster.test_s3_sink import S3Pipeline
from tests.s3_fixtures import TEST_BUCKET

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_iceberg_table_on_s3_is_exact_across_a_kill(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    name = unique("s3-ice")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    output = f"s3://{TEST_BUCKET}/{name}"
    catalog_uri = f"sqlite:///{tmp_path}/catalog.db"
    pipeline = S3Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path,
                          s3_output=output)
    pipeline.table_format, pipeline.catalog_uri = TableFormat.ICEBERG, catalog_uri
    lake = pipeline.lake
    assert lake.iceberg is not None
    fs, root = open_output(output)

    def committed() -> int:
        table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(name)))
        return 0 if table is None else committed_epoch(table, name)

    state = ("--state-dir", str(tmp_path / "state"))
    try:
        node = pipeline.launch(1, *state)
        pipeline.produce(rate=1500)
        pipeline.wait_until(lambda: committed() >= 3, 90, "three epochs in the Iceberg table on S3")
        node.kill()
        node = pipeline.launch(1, *state)
        before = committed()
        pipeline.wait_until(lambda: committed() > before + 2, 90, "epochs committed after the restart")
        assert_exact(pipeline.finish(), pipeline)
        table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(name)))
        assert table is not None and table.location().startswith(f"s3://{TEST_BUCKET}/{name}/")
        assert all(t.file.file_path.startswith(f"s3://{TEST_BUCKET}/{name}/{name}/dt=")
                   for t in table.scan().plan_files())
        verify = cli("verify", "--output", output, "--bootstrap", kafka.bootstrap, "--topic", name,
                     "--table-format", "iceberg", "--pipeline", name, "--catalog-uri", catalog_uri, "--json")
        assert verify.returncode == 0, verify.stderr
        assert json.loads(verify.stdout)["ok"]
        node.terminate()
        assert node.wait(60) == 0, node.log_text()[-3000:]
    finally:
        pipeline.stop_all()


def test_iceberg_on_s3_without_a_catalog_uri_is_one_line(s3_server: SeaweedServer, tmp_path: Path) -> None:
    result = cli("run", "--bootstrap", "127.0.0.1:9", "--topic", "t", "--output", f"s3://{TEST_BUCKET}/x",
                 "--state-dir", str(tmp_path), "--table-format", "iceberg")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: table-format=iceberg with a remote output needs catalog-uri (sqlite:///<local path> or an "
        "http(s):// REST catalog)"]
