"""Routing to many tables on real servers: three ZooKeeper-mode nodes land one topic, routed by a
field (`--table-template ev_{field:region}`), into 50 Iceberg tables made on first use; each table
holds exactly the records of its region, none twice, none lost, and the records that cannot be
routed (no region, a region that makes no table name, a table table-allowed refuses) land in
`_rejected/` with their reason. `verify --table-template` sums the tables per partition."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kazoo.client import KazooClient

from laminar_kafka.cluster.lake.iceberg.records import pipeline_tables
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published, open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.demo import wait_caught_up
from laminar_kafka.devstack.producers import produce
from tests.integration.cluster.harness import Pipeline
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TABLES = 50
TOTAL = 5000
TEMPLATE = "ev_{field:region}"
FLAGS = ("--format", "json", "--json-schema", "id:int64,region:string", "--on-bad-record", "skip",
         "--max-error-rate", "0.5", "--partition-by", "none", "--checkpoint-interval-ms", "1000",
         "--table-template", TEMPLATE, "--table-allowed", "ev_r[0-9]+")


def record(index: int) -> dict[str, object]:
    """Region r0..r49, except a few: no region, a region that names no table, a table not allowed."""
    if index % 500 == 7:
        return {"id": index}
    if index % 500 == 9:
        return {"id": index, "region": "x/y"}
    if index % 500 == 11:
        return {"id": index, "region": "q1"}
    return {"id": index, "region": f"r{index % TABLES}"}


def test_one_topic_routed_into_50_tables_by_three_nodes(iceberg_pipeline: Pipeline) -> None:
    p = iceberg_pipeline
    records = [record(i) for i in range(TOTAL)]
    produce(p.bootstrap, p.topic, [json.dumps(r).encode() for r in records])
    for node_id in (1, 2, 3):
        p.launch(node_id, *FLAGS)
    namespace = table_name_of(p.pipeline)
    iceberg = IcebergSettings(namespace=namespace, routed=True)
    lake = LakeTarget(p.output, TableFormat.ICEBERG, p.pipeline, iceberg)
    report = wait_caught_up(p.bootstrap, p.topic, p.output, 90, lake=lake)
    assert report.ok and report.missing == 0 and report.duplicated == 0, f"{report.table()}\n{p.tail_logs()}"
    bad = [r for r in records if r.get("region") not in {f"r{i}" for i in range(TABLES)}]
    assert report.rejected == len(bad) and report.rows == TOTAL - len(bad)

    fs, root = open_output(p.output)
    catalog = open_catalog(iceberg, fs, root)
    tables = pipeline_tables(catalog, namespace, p.pipeline)
    assert sorted(name for _, name in tables) == sorted(f"ev_r{i}" for i in range(TABLES))
    for region in range(TABLES):
        table = load_table_or_none(catalog, (namespace, f"ev_r{region}"))
        assert table is not None
        rows = table.scan(selected_fields=("id", "region")).to_arrow()
        assert sorted(rows["id"].to_pylist()) == [r["id"] for r in records if r.get("region") == f"r{region}"]
        assert set(rows["region"].to_pylist()) == {f"r{region}"}

    rejected = pa.concat_tables([pq.read_table(path) for path in list_published(fs, f"{root}/{REJECTED_DIR}")])
    where = zip(rejected["_partition"].to_pylist(), rejected["_offset"].to_pylist(), strict=True)
    errors = dict(zip(where, rejected["error"].to_pylist(), strict=True))
    assert len(errors) == len(bad)
    reasons = set(errors.values())
    assert "table-template: table ev_q1 is not allowed by table-allowed ev_r[0-9]+" in reasons
    assert any("'ev_x/y' is not a table name" in reason for reason in reasons)
    assert any("region" in reason and "table-template" not in reason for reason in reasons)  # the source's

    verify = cli("verify", "--output", p.output, "--bootstrap", p.bootstrap, "--topic", p.topic, "--table-format",
                 "iceberg", "--pipeline", p.pipeline, "--table-template", TEMPLATE, "--json")
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["ok"]
    for node in p.nodes.values():
        node.terminate()
    for node in p.nodes.values():
        assert node.wait(30) == 0, node.log_text()[-2000:]

    # the control state lost: a node resumes from the routed tables' whole records, exactly
    zk = KazooClient(str(p.zk))
    zk.start(timeout=15)
    try:
        zk.delete(f"/laminar/{p.pipeline}", recursive=True)
    finally:
        zk.stop()
        zk.close()
    produce(p.bootstrap, p.topic, [json.dumps({"id": TOTAL + i, "region": f"r{i % TABLES}"}).encode()
                                   for i in range(1000)])
    node = p.launch(1, *FLAGS)
    report = wait_caught_up(p.bootstrap, p.topic, p.output, 60, lake=lake)
    assert report.ok and report.rows == TOTAL + 1000 - len(bad), f"{report.table()}\n{p.tail_logs()}"
    assert f"no control state for pipeline '{p.pipeline}': resuming from the lake at epoch " in node.log_text()
