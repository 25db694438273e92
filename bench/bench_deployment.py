"""Deployment benchmark (prints JSON): the lake on a real object store through a shared REST catalog.

    .venv/bin/python bench/bench_deployment.py landing [--records 300000] [--rounds 2]
    .venv/bin/python bench/bench_deployment.py committers [--seconds 90] [--rate 3000] [--nodes 3]

Servers on loopback: one Kafka broker and one ZooKeeper (the dev stack), SeaweedFS (S3), and
Apache Iceberg's REST catalog server writing its metadata to SeaweedFS (the lake's own table layout).

- landing: one pre-filled 8-partition topic of ``--records`` records (100 incompressible bytes); per
  round, an embedded node lands it into (a) a Parquet tree on the local disk, (b) a Parquet tree on
  SeaweedFS's S3, (c) Iceberg on SeaweedFS's S3 through the REST catalog (fresh pipelines, in turn, so
  all see the same machine); the time from the node's start until the lake shows every record, then
  the exactly-once audit of each. Ratios are against (a), best round of each.
- committers: ``--nodes`` ZooKeeper-mode nodes land one Iceberg table on SeaweedFS through the REST
  catalog while ``--rate`` records/s are produced for ``--seconds``; every node publishes every epoch,
  one commit lands per epoch. From the nodes' /metrics: the commit latency p50/p99 (interpolated in the
  ``laminar_lake_commit_seconds`` buckets, as Prometheus's ``histogram_quantile`` does), and per landed
  epoch the commits lost to a concurrent committer (conflicts, each retried) and the no-op visits
  (an epoch found committed by another node); then the audit.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_lake import PARTITIONS, landed_rows

from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog
from laminar_kafka.cluster.lake.parquet.sink import open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.demo import audit_output
from laminar_kafka.devstack.jvm.rest_catalog import RestCatalogServer, new_rest_catalog
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer, start_seaweed_server
from laminar_kafka.devstack.processes import NodeProcess, free_port
from laminar_kafka.devstack.producers import ContinuousProducer, produce
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

BUCKET = "laminar-bench"
TARGETS = ("parquet-local", "parquet-s3", "iceberg-s3-rest")


def histogram_quantile(quantile: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative ``(upper bound, count)`` buckets (the last
    one +Inf): linear interpolation inside the bucket the rank falls in. None without observations."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    rank = quantile * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_bound, lower_count = bound, count
    return lower_bound


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def commit_buckets(texts: list[str]) -> list[tuple[float, float]]:
    """The nodes' ``laminar_lake_commit_seconds`` buckets, summed over nodes."""
    summed: dict[float, float] = {}
    for text in texts:
        for bound, count in re.findall(r'^laminar_lake_commit_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} ([0-9.e+]+)$',
                                       text, re.MULTILINE):
            key = float("inf") if bound == "+Inf" else float(bound)
            summed[key] = summed.get(key, 0.0) + float(count)
    return sorted(summed.items())


class Deployment:
    """The servers of one benchmark run and the pipelines it launches on them."""

    def __init__(self, base: Path, stack: DevStack, store: SeaweedServer, catalog: RestCatalogServer) -> None:
        self.base, self.stack, self.store, self.catalog = base, stack, store, catalog

    def lake(self, target: str, name: str) -> LakeTarget:
        if target == "parquet-local":
            return LakeTarget(str(self.base / name), TableFormat.PARQUET, name, None)
        output = f"s3://{BUCKET}/{name}"
        if target == "parquet-s3":
            return LakeTarget(output, TableFormat.PARQUET, name, None)
        iceberg = IcebergSettings(namespace=table_name_of(name), catalog_uri=self.catalog.uri,
                                  properties={"s3.endpoint": self.store.endpoint, "s3.region": self.store.region})
        return LakeTarget(output, TableFormat.ICEBERG, name, iceberg)

    def launch(self, lake: LakeTarget, topic: str, node_id: int, *, zk: bool, extra: list[str]) -> NodeProcess:
        flags = ["--table-format", lake.table_format.value, *extra]
        if lake.iceberg is not None:
            flags += ["--catalog-uri", str(lake.iceberg.catalog_uri)]
        if not zk:  # embedded mode keeps its manifests in a local state directory
            flags += ["--state-dir", str(self.base / f"{lake.pipeline}-state-{node_id}")]
        return NodeProcess.launch(node_id, bootstrap=self.stack.bootstrap, topic=topic, output=lake.output,
                                  zk=self.stack.zk_hosts if zk else None, pipeline=lake.pipeline,
                                  log_dir=self.base / f"{lake.pipeline}-logs", extra=flags)

    def land(self, target: str, name: str, topic: str, records: int) -> dict[str, object]:
        lake = self.lake(target, name)
        started = time.monotonic()
        node = self.launch(lake, topic, 1, zk=False, extra=[])
        try:
            wait_until(lambda: landed_rows(lake, topic) >= records, 900, f"{name} landing every record", interval=0.25)
            elapsed = time.monotonic() - started
        finally:
            node.stop()
        report = audit_output(self.stack.bootstrap, topic, lake.output, lake)
        return {"seconds": round(elapsed, 2), "records_per_s": round(records / elapsed, 1), "exact": report.ok}

    def landing(self, records: int, rounds: int) -> dict[str, object]:
        topic = f"deploy-land-{int(time.time())}"
        create_topic(self.stack.bootstrap, topic, PARTITIONS)
        produce(self.stack.bootstrap, topic, [os.urandom(100) for _ in range(records)], timeout=300)
        runs: dict[str, list[dict[str, object]]] = {target: [] for target in TARGETS}
        for round_number in range(rounds):
            for target in TARGETS:
                runs[target].append(self.land(target, f"{target}-{round_number}-{topic}", topic, records))
        best = {target: max(float(str(run["records_per_s"])) for run in done) for target, done in runs.items()}
        return {"records": records, "runs": runs, "best_records_per_s": best,
                "ratio_to_parquet_local": {t: round(best[t] / best["parquet-local"], 3) for t in TARGETS}}

    def committers(self, seconds: float, rate: int, nodes: int) -> dict[str, object]:
        name = f"deploy-commit-{int(time.time())}"
        create_topic(self.stack.bootstrap, name, PARTITIONS)
        lake = self.lake("iceberg-s3-rest", name)
        assert lake.iceberg is not None
        ports = {node_id: free_port() for node_id in range(1, nodes + 1)}
        launched = [self.launch(lake, name, node_id, zk=True, extra=["--metrics-port", str(port)])
                    for node_id, port in ports.items()]
        producer = ContinuousProducer(self.stack.bootstrap, name, rate, PARTITIONS).start()
        try:
            time.sleep(seconds)  # the measured window: the figures are the counters, not this sleep
            producer.stop()
            wait_until(lambda: landed_rows(lake, name) >= producer.acked, 300, "catching up", interval=0.5)
            texts = [scrape(port) for port in ports.values()]
        finally:
            producer.stop()
            for node in launched:
                node.stop()
        fs, root = open_output(lake.output)
        table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(name)))
        assert table is not None
        landed = [s for s in table.snapshots() if s.summary is not None and "laminar.epoch" in s.summary.additional_properties]
        buckets = commit_buckets(texts)
        conflicts = sum(sample(text, "laminar_lake_commit_conflicts_total") for text in texts)
        no_ops = sum(sample(text, "laminar_lake_commits_found_done_total") for text in texts)
        commits = sum(sample(text, "laminar_lake_commits_total") for text in texts)
        report = audit_output(self.stack.bootstrap, name, lake.output, lake)
        p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
        return {
            "nodes": nodes, "seconds": seconds, "rate_per_s": rate, "records": producer.acked,
            "epochs_landed": len(landed), "table_epoch": committed_epoch(table, name), "commits": int(commits),
            "commit_seconds_p50": None if p50 is None else round(p50, 3),
            "commit_seconds_p99": None if p99 is None else round(p99, 3),
            "conflicts": int(conflicts), "conflicts_per_epoch": round(conflicts / max(len(landed), 1), 3),
            "no_op_visits": int(no_ops), "no_op_visits_per_epoch": round(no_ops / max(len(landed), 1), 3),
            "exact": report.ok, "missing": report.missing, "duplicated": report.duplicated,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("landing", "committers"))
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--rate", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="laminar-bench-deploy-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=1, base_dir=base / "servers")
    store = start_seaweed_server(base / "seaweedfs", buckets=[BUCKET])
    catalog = new_rest_catalog(base, s3=store.access)
    saved = dict(os.environ)
    os.environ.update(store.env())  # the nodes (children) and this process find S3 through AWS_*
    try:
        catalog.start(timeout=180.0)
        deployment = Deployment(base, stack, store, catalog)
        if args.what == "landing":
            result = deployment.landing(args.records, args.rounds)
        else:
            result = deployment.committers(args.seconds, args.rate, args.nodes)
        print(json.dumps(result, indent=2))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        catalog.stop()
        store.stop()
        stack.stop()


if __name__ == "__main__":
    main()
