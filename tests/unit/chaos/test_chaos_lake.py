"""The chaos campaign's lakes without servers (laminar_kafka.chaos.lake): what a node of each lake is
given (flags, working directory, environment), what the harness reads with, the campaign's checks of
a lake and its kinds, and a node set running each node in its own directory (tiny Python processes
stand in for nodes)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from laminar_kafka.chaos.campaign import CampaignConfig
from laminar_kafka.chaos.lake import CHAOS_BUCKET, RunLake, local_lake
from laminar_kafka.chaos.nodes import NodeSet
from laminar_kafka.chaos.plan import KINDS, LAKE_KINDS, kinds_of_lake
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.devstack.objectstore.access import S3Access


def s3_lake(run_dir: Path) -> RunLake:
    """The s3-rest lake of a run as LakeServices.run_lake makes it, with made-up ports."""
    direct = S3Access(41001)
    return RunLake(
        output=f"s3://{CHAOS_BUCKET}/chaos-x-s1", table_format=TableFormat.ICEBERG, pipeline="chaos-x-s1",
        catalog_uri="http://127.0.0.1:41004", node_env=S3Access(41002).env(), nodes_dir=run_dir / "nodes",
        reader_catalog_uri="http://127.0.0.1:41003", reader_access=direct,
        reader_properties={"s3.endpoint": direct.endpoint, "s3.region": direct.region},
    )


def test_local_lake_shares_one_output_and_keeps_an_iceberg_catalog_beside_it(tmp_path: Path) -> None:
    parquet = local_lake(tmp_path, tmp_path / "output", TableFormat.PARQUET, "p")
    assert parquet.local and parquet.node_dir(1) is None and parquet.prepare_node(1) is None
    assert parquet.node_flags(1) == ["--output", str(tmp_path / "output"), "--table-format", "parquet"]
    assert parquet.node_flags(1) == parquet.node_flags(2) and parquet.node_env == {}
    assert parquet.target().iceberg is None and parquet.filesystem()[1] == str(tmp_path / "output")
    assert parquet.other_output(tmp_path) == str(tmp_path / "output-misconfigured")
    iceberg = local_lake(tmp_path, tmp_path / "output", TableFormat.ICEBERG, "chaos-a.b")
    catalog = f"sqlite:///{tmp_path}/catalog/catalog.db"
    assert iceberg.node_flags(3)[-2:] == ["--catalog-uri", catalog] and (tmp_path / "catalog").is_dir()
    settings = iceberg.target().iceberg
    assert settings is not None and settings.catalog_uri == catalog and settings.namespace == "chaos_a_b"


def test_s3_lake_gives_each_node_its_own_directory_and_the_proxied_services(tmp_path: Path) -> None:
    lake = s3_lake(tmp_path)
    assert not lake.local
    flags = lake.node_flags(2)
    assert flags == ["--output", f"s3://{CHAOS_BUCKET}/chaos-x-s1", "--table-format", "iceberg",
                     "--catalog-uri", "http://127.0.0.1:41004", "--state-dir", str(tmp_path / "nodes/node-2/state")]
    assert lake.node_flags(3)[-1] == str(tmp_path / "nodes/node-3/state")
    assert lake.node_env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:41002"  # the object store's proxy
    directory = lake.prepare_node(2)
    assert directory == tmp_path / "nodes" / "node-2" and (directory / "state").is_dir()
    assert lake.other_output(tmp_path) == f"s3://{CHAOS_BUCKET}/chaos-x-s1-misconfigured"


def test_s3_lake_is_read_directly_through_the_catalog(tmp_path: Path) -> None:
    lake = s3_lake(tmp_path)
    target = lake.target()
    assert target.table_format is TableFormat.ICEBERG and target.output == lake.output
    assert target.iceberg is not None and target.iceberg.catalog_uri == "http://127.0.0.1:41003"
    assert target.iceberg.properties["s3.endpoint"] == "http://127.0.0.1:41001"  # not the proxy
    assert target.iceberg.namespace == "chaos_x_s1"
    fs, root = lake.filesystem()
    assert fs.type_name == "s3" and root == f"{CHAOS_BUCKET}/chaos-x-s1"


def test_campaign_config_checks_the_lake_its_format_and_its_kinds() -> None:
    assert CampaignConfig().lake == "local" and CampaignConfig().kinds == KINDS
    s3 = CampaignConfig(lake="s3-rest", table_format=TableFormat.ICEBERG, kinds=kinds_of_lake("s3-rest"))
    assert s3.plan(0).kinds and all(s3.plan(seed).kinds for seed in range(3))
    with pytest.raises(ValueError, match="table_format iceberg"):
        CampaignConfig(lake="s3-rest", kinds=kinds_of_lake("s3-rest"))
    with pytest.raises(ValueError, match="do not apply to the local lake"):
        CampaignConfig(kinds=LAKE_KINDS)
    with pytest.raises(ValueError, match="do not apply to the s3-rest lake"):
        CampaignConfig(lake="s3-rest", table_format=TableFormat.ICEBERG, kinds=("output-full",))
    with pytest.raises(ValueError, match="unknown lake"):
        CampaignConfig(lake="nfs")


def test_the_epoch_interval_reaches_the_plan() -> None:
    fast = CampaignConfig(lake="s3-rest", table_format=TableFormat.ICEBERG, kinds=("store-unreachable",),
                          checkpoint_interval_ms=1000, max_extras=0)
    slow = CampaignConfig(lake="s3-rest", table_format=TableFormat.ICEBERG, kinds=("store-unreachable",),
                          checkpoint_interval_ms=3000, max_extras=0)
    assert all(e.hold_s >= 3.0 for e in fast.plan(0).events)
    assert all(e.hold_s >= 9.0 for e in slow.plan(0).events)


def test_node_set_runs_each_node_in_its_own_directory_with_the_lake_environment(tmp_path: Path) -> None:
    lake = s3_lake(tmp_path)
    script = tmp_path / "node.py"
    script.write_text("import json, os, sys, time\n"
                      "print(json.dumps({'cwd': os.getcwd(), 'endpoint': os.environ.get('AWS_ENDPOINT_URL'),"
                      " 'argv': sys.argv[1:]}), flush=True)\n"
                      "time.sleep(60)\n")
    nodes = NodeSet(lambda node_id: [sys.executable, str(script), *lake.node_flags(node_id)], tmp_path / "logs",
                    node_dir=lake.prepare_node, env=lake.node_env)
    try:
        for _ in range(2):
            nodes.start()
        seen: dict[int, dict[str, object]] = {}
        deadline = time.monotonic() + 20.0
        while len(seen) < 2:
            assert time.monotonic() < deadline, "the nodes did not report"
            for node_id in (1, 2):
                lines = [line for line in (tmp_path / "logs" / f"node-{node_id}.log").read_text().splitlines()
                         if line.startswith("{")]
                if lines:
                    seen[node_id] = json.loads(lines[0])
            time.sleep(0.05)
        for node_id, report in seen.items():
            assert report["cwd"] == str(tmp_path / "nodes" / f"node-{node_id}")
            assert report["endpoint"] == "http://127.0.0.1:41002"
            assert str(tmp_path / "nodes" / f"node-{node_id}" / "state") in report["argv"]  # type: ignore[operator]
    finally:
        nodes.stop_all()
