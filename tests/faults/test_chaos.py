"""A short chaos campaign on real processes (laminar_kafka.chaos.campaign): two seeds that between them SIGKILL a
node mid-epoch, pause a zombie past its session timeout, make a node leave and another join, create
a topic that matches the nodes' pattern, cut a node from ZooKeeper only (network namespace), and two
state faults: the pipeline's ZooKeeper subtree deleted (the nodes reconcile with the
lake) and a node started with a pipeline-defining setting changed (exit 2 in one line). Then one
seed of the deployment shape (``--lake s3-rest``: each node in its own directory, Iceberg on
SeaweedFS S3 through Iceberg's REST catalog) with every lake kind: the object store restarted and
unreachable, the catalog restarted, unreachable and slow. And one seed of the CDC pipeline
(``--pipeline cdc``) with its four kinds, audited against the final state of every key.
Every run must end exact (0 missing, 0 duplicated, every acknowledged record landed) and caught up.

Nothing here is skipped: a missing JVM, ZooKeeper/Kafka artifact or network-namespace support makes
the run fail with its reason, and so the test.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from laminar_kafka.chaos.campaign import CampaignConfig, run_campaign
from laminar_kafka.chaos.cdc.report import format_cdc_table
from laminar_kafka.chaos.kinds import CDC_KINDS
from laminar_kafka.chaos.plan import ALL_KINDS, KINDS, LAKE_KINDS
from laminar_kafka.chaos.report import format_table, summarize
from laminar_kafka.cli.main import main
from laminar_kafka.cluster.lake.settings import TableFormat

pytestmark = [pytest.mark.faults, pytest.mark.timeout(420)]

CI_KINDS = ("node-kill", "zombie", "leave", "join", "new-topic", "net-zk", "zk-subtree-lost", "misconfigured-node")
#: the state kinds among them (at least one: issue 21)
CI_STATE_KINDS = ("zk-subtree-lost", "misconfigured-node")


def test_short_campaign_is_exact(tmp_path: Path) -> None:
    config = CampaignConfig(seeds=2, seed_start=0, duration_s=8.0, kinds=CI_KINDS, kinds_per_run=4, max_extras=0,
                            rate=300, workdir=tmp_path / "chaos")
    assert {e.kind for s in range(2) for e in config.plan(s).events} == set(CI_KINDS)
    started = time.monotonic()
    results, base = run_campaign(config, say=print)
    elapsed = time.monotonic() - started
    rows = summarize(results, KINDS)
    table = format_table(rows, config.recovery_timeout_s)
    print(table)
    problems = [
        f"seed {r.seed} ({', '.join(r.kinds)}): error={r.error} missing={r.missing} duplicated={r.duplicated} "
        f"unexpected={r.unexpected} acked_lost={r.acked_lost} caught_up={r.caught_up} workdir={r.workdir}\n  "
        + "\n  ".join(r.evidence)
        for r in results if not r.ok
    ]
    assert not problems, "\n".join(problems) + "\n" + table
    assert [r.seed for r in results] == [0, 1]
    by_kind = {row.kind: row for row in rows}
    for kind in CI_KINDS:
        assert kind in by_kind and by_kind[kind].faults >= 1, table
        assert by_kind[kind].missing == 0 and by_kind[kind].duplicated == 0
        assert f"\n{kind} " in table
        assert by_kind[kind].unrecovered == 0 and by_kind[kind].worst_recovery_s is not None
    assert by_kind["all"].records > 0 and by_kind["all"].records == sum(r.records for r in results)
    assert all(r.acked == r.records for r in results), "the producer's acknowledged count is what the topic holds"
    assert all(r.workdir is None for r in results), "a passing run's directory is removed"
    exits = [e for r in results for e in r.node_exits if e["while"] == "running"]
    assert all(e["explained"] == "zk-subtree-lost" for e in exits), f"unexplained node exits: {exits}"
    print(f"campaign took {elapsed:.0f}s")


def test_short_campaign_on_the_deployment_shape_is_exact(tmp_path: Path) -> None:
    """One seed with the five lake kinds, each node in its own directory, the audit reading the
    table through the REST catalog (about two minutes)."""
    config = CampaignConfig(seeds=1, seed_start=0, duration_s=8.0, kinds=LAKE_KINDS, kinds_per_run=len(LAKE_KINDS),
                            max_extras=0, rate=300, workdir=tmp_path / "chaos", lake="s3-rest",
                            table_format=TableFormat.ICEBERG)
    assert {e.kind for e in config.plan(0).events} == set(LAKE_KINDS)
    started = time.monotonic()
    results, base = run_campaign(config, say=print)
    rows = summarize(results, ALL_KINDS)
    table = format_table(rows, config.recovery_timeout_s)
    print(table)
    [result] = results
    assert result.ok, (f"error={result.error} missing={result.missing} duplicated={result.duplicated} "
                       f"acked_lost={result.acked_lost} caught_up={result.caught_up} workdir={result.workdir}\n  "
                       + "\n  ".join(result.evidence) + "\n" + table)
    by_kind = {row.kind: row for row in rows}
    for kind in LAKE_KINDS:
        assert by_kind[kind].faults >= 1 and by_kind[kind].unrecovered == 0, table
        assert by_kind[kind].worst_recovery_s is not None
    assert result.records > 0 and result.acked == result.records
    details = {f.kind: f.details for f in result.faults}
    assert details["store-restart"]["signal"] in ("SIGKILL", "SIGTERM")
    assert details["catalog-unreachable"]["mode"] in ("blackhole", "reset")
    assert result.node_exits == [], f"the nodes ride out the lake's faults: {result.node_exits}"
    assert result.workdir is None, "a passing run's directory is removed"
    print(f"campaign took {time.monotonic() - started:.0f}s")


def test_short_cdc_campaign_is_exact(tmp_path: Path) -> None:
    """One seed of the CDC pipeline (``--pipeline cdc``) with its four kinds: the committer of an
    epoch killed while it commits, compaction while the nodes upsert, hot keys, a hot partition whose
    owner leaves; every Iceberg table must be exactly the final state of every key, read with
    pyiceberg and DuckDB (about two minutes)."""
    config = CampaignConfig(seeds=1, seed_start=0, duration_s=8.0, kinds=CDC_KINDS, kinds_per_run=len(CDC_KINDS),
                            max_extras=0, rate=300, workdir=tmp_path / "chaos", pipeline="cdc",
                            table_format=TableFormat.ICEBERG)
    assert {e.kind for e in config.plan(0).events} == set(CDC_KINDS)
    started = time.monotonic()
    results, base = run_campaign(config, say=print)
    table = format_cdc_table(results, ALL_KINDS, config.recovery_timeout_s)
    print(table)
    [result] = results
    assert result.ok, (f"error={result.error} missing={result.missing} undeleted={result.undeleted} "
                       f"stale={result.stale} duplicated={result.duplicated} acked_lost={result.acked_lost} "
                       f"caught_up={result.caught_up} workdir={result.workdir}\n  " + "\n  ".join(result.evidence)
                       + "\n" + table)
    assert result.records > result.keys > 0 and result.acked == result.records
    for fault in result.faults:
        assert fault.error is None and fault.recovery_s is not None, fault
    details = {f.kind: f.details for f in result.faults}
    assert int(str(details["kill-committer"]["epoch"])) > 0 and details["kill-committer"]["committer"] is not None
    assert details["compact-during-upserts"]["passes"]
    assert result.workdir is None, "a passing run's directory is removed"
    print(f"campaign took {time.monotonic() - started:.0f}s")


def test_cli_rejects_unknown_kinds_and_bad_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chaos", "--seeds", "1", "--kinds", "zombi"]) == 2
    assert "did you mean 'zombie'" in capsys.readouterr().err
    assert main(["chaos", "--seeds", "0"]) == 2
    assert main(["chaos", "--seeds", "1", "--kinds", "store-restart"]) == 2
    assert "needs --lake s3-rest" in capsys.readouterr().err
    assert main(["chaos", "--seeds", "1", "--lake", "s3-rest", "--table-format", "parquet"]) == 2
    assert "--table-format iceberg" in capsys.readouterr().err
