"""Lake benchmark (prints JSON): landing into Iceberg against landing into the Parquet tree, and the
files a long run leaves with and without `compact`. Embedded `laminar-kafka run` nodes on a local dev
stack (one broker).

    .venv/bin/python bench/bench_lake.py throughput [--records 400000] [--rounds 2]
    .venv/bin/python bench/bench_lake.py files [--minutes 10] [--rate 5000]

- throughput: one pre-filled 8-partition topic of ``--records`` records (100 incompressible bytes);
  per round, one node lands it into a Parquet tree and one into an Iceberg table (fresh pipelines,
  alternating, so both see the same machine); the time from the node's start until the lake holds
  every record (Parquet: the published files' row counts; Iceberg: the current snapshot's
  ``total-records``), then the exactly-once audit of both. ``ratio`` = Iceberg / Parquet records/s.
- files: one node lands an Iceberg table while ``--rate`` records/s are produced for ``--minutes``;
  then the data files of the current snapshot (count, mean size) before `compact`, and after
  `laminar-kafka compact` run while the node still runs, with the audit of the table after both.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.demo import audit_output
from laminar_kafka.devstack.processes import NodeProcess, node_environment
from laminar_kafka.devstack.producers import ContinuousProducer, produce
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

PARTITIONS = 8


def lake_of(output: Path, table_format: TableFormat, pipeline: str) -> LakeTarget:
    iceberg = IcebergSettings(namespace=table_name_of(pipeline)) if table_format is TableFormat.ICEBERG else None
    return LakeTarget(str(output), table_format, pipeline, iceberg)


def landed_rows(lake: LakeTarget, topic: str) -> int:
    """Rows the lake shows readers now (cheap: file footers, or the snapshot summary)."""
    fs, root = open_output(lake.output)
    if lake.table_format is TableFormat.PARQUET:
        total = 0
        for path in list_published(fs, f"{root}/{topic}"):
            with fs.open_input_file(path) as handle:
                total += pq.ParquetFile(handle).metadata.num_rows
        return total
    snapshot = current_snapshot(lake, topic)
    return 0 if snapshot is None else int(snapshot.summary.additional_properties.get("total-records", 0))


def current_snapshot(lake: LakeTarget, topic: str):  # type: ignore[no-untyped-def]
    from laminar_kafka.cluster.lake.iceberg.tables import load_table_or_none, open_catalog

    assert lake.iceberg is not None
    fs, root = open_output(lake.output)
    try:
        table = load_table_or_none(open_catalog(lake.iceberg, fs, root), (lake.iceberg.namespace, lake.table_of(topic)))
    except Exception:  # noqa: BLE001 - the catalog is created by the node's start
        return None
    return None if table is None else table.current_snapshot()


def data_files(lake: LakeTarget, topic: str) -> dict[str, float]:
    """Count and mean size of the current snapshot's data files."""
    snapshot = current_snapshot(lake, topic)
    summary = {} if snapshot is None else snapshot.summary.additional_properties
    count, size = int(summary.get("total-data-files", 0)), int(summary.get("total-files-size", 0))
    return {"data_files": count, "mean_file_bytes": round(size / count) if count else 0, "total_bytes": size}


class Bench:
    def __init__(self, stack: DevStack, base: Path) -> None:
        self.stack = stack
        self.base = base

    def launch(self, name: str, topic: str, table_format: TableFormat) -> NodeProcess:
        return NodeProcess.launch(1, bootstrap=self.stack.bootstrap, topic=topic, output=str(self.base / name),
                                  zk=None, pipeline=name, log_dir=self.base / f"{name}-logs",
                                  extra=["--table-format", table_format.value])

    def land(self, name: str, topic: str, records: int, table_format: TableFormat) -> dict[str, object]:
        lake = lake_of(self.base / name, table_format, name)
        started = time.monotonic()
        node = self.launch(name, topic, table_format)
        try:
            wait_until(lambda: landed_rows(lake, topic) >= records, 900, f"{name} landing every record", interval=0.25)
            elapsed = time.monotonic() - started
        finally:
            node.stop()
        report = audit_output(self.stack.bootstrap, topic, lake.output, lake)
        return {"seconds": round(elapsed, 2), "records_per_s": round(records / elapsed, 1), "exact": report.ok}

    def throughput(self, records: int, rounds: int) -> dict[str, object]:
        topic = f"lake-tp-{int(time.time())}"
        create_topic(self.stack.bootstrap, topic, PARTITIONS)
        produce(self.stack.bootstrap, topic, [os.urandom(100) for _ in range(records)], timeout=300)
        runs: dict[str, list[dict[str, object]]] = {"parquet": [], "iceberg": []}
        for round_number in range(rounds):
            for table_format in (TableFormat.PARQUET, TableFormat.ICEBERG):
                name = f"{table_format.value}-{round_number}"
                runs[table_format.value].append(self.land(name, topic, records, table_format))
        best = {k: max(float(r["records_per_s"]) for r in v) for k, v in runs.items()}  # type: ignore[arg-type]
        return {"records": records, "runs": runs, "best_records_per_s": best,
                "ratio_iceberg_to_parquet": round(best["iceberg"] / best["parquet"], 3)}

    def files(self, minutes: float, rate: int) -> dict[str, object]:
        name = f"files-{int(time.time())}"
        create_topic(self.stack.bootstrap, name, PARTITIONS)
        lake = lake_of(self.base / name, TableFormat.ICEBERG, name)
        producer = ContinuousProducer(self.stack.bootstrap, name, rate, PARTITIONS).start()
        node = self.launch(name, name, TableFormat.ICEBERG)
        try:
            time.sleep(minutes * 60)
            producer.stop()
            wait_until(lambda: landed_rows(lake, name) >= producer.acked, 300, "catching up", interval=0.5)
            before = data_files(lake, name)
            started = time.monotonic()
            compact = subprocess.run([
                sys.executable, "-m", "laminar_kafka.cli.main", "compact", "--output", lake.output, "--pipeline", name,
                "--topic", name, "--expire-after", "0", "--json"],
                capture_output=True, text=True, timeout=900, env=node_environment())
            compact_s = time.monotonic() - started
            if compact.returncode != 0:
                raise RuntimeError(f"compact failed: {compact.stderr.strip()}")
            after = data_files(lake, name)
            report = audit_output(self.stack.bootstrap, name, lake.output, lake)
        finally:
            producer.stop()
            node.stop()
        return {"minutes": minutes, "rate_per_s": rate, "records": producer.acked, "without_compact": before,
                "with_compact": after, "compact_seconds": round(compact_s, 1), "exact_after_compact": report.ok,
                "compact": json.loads(compact.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("throughput", "files"))
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=5000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="laminar-bench-lake-"))
    stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=0, base_dir=base / "servers")
    try:
        bench = Bench(stack, base)
        if args.what == "throughput":
            result = bench.throughput(args.records, args.rounds)
        else:
            result = bench.files(args.minutes, args.rate)
        print(json.dumps(result, indent=2))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
