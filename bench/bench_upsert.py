"""Upsert mode benchmark (prints JSON): copy-on-write commits into a keyed Iceberg table, and reads.

    .venv/bin/python bench/bench_upsert.py [--keys 1000000] [--epochs 3] [--fractions 0.01,0.2]
                                           [--buckets 16]

In process, no servers: a local filesystem and an embedded SQLite catalog under a temporary
directory. Per layout (unpartitioned, and ``bucket[--buckets](id)``) and per fraction of the keys
changed per epoch: a table loaded with ``--keys`` keys (id, name, amount and the metadata columns),
then ``--epochs`` epochs, each one change file with that fraction of the keys drawn at random
(95% updates, 5% deletes) applied by :func:`~laminar_kafka.cluster.lake.iceberg.upsert_commit.commit_upsert`
(the node's commit: reduce, rewrite the files holding a touched key, one catalog commit). Reported:
the median commit time and what it rewrote, then the time to read the whole table back with pyiceberg
(``scan().to_arrow()``) and DuckDB (``iceberg_scan``, fetched as Arrow), each the best of 3, and a
check that both read the same number of rows as the model of the state.
"""
from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.iceberg.partitions import partition_spec_of
from laminar_kafka.cluster.lake.iceberg.tables import iceberg_schema_of, open_catalog
from laminar_kafka.cluster.lake.iceberg.upsert import keyed_arrow_schema, keyed_schema
from laminar_kafka.cluster.lake.iceberg.upsert_commit import commit_upsert, conform
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.settings import IcebergSettings
from tests import duckdb_queries as q

WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def change_rows(ids: np.ndarray, ops: np.ndarray, first_offset: int, version: int) -> pa.Table:
    """Change rows as the source decodes them in upsert mode (a delete's payload is null)."""
    count = len(ids)
    deletes = ops == "d"
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pc.if_else(pa.array(deletes), pa.scalar(None, pa.string()), pa.scalar(f"n{version}")),
        "amount": pa.array(np.where(deletes, np.nan, ids * 0.5 + version)),
        "_op": pa.array(ops, pa.string()),
        "_topic": pa.array(["bench"] * count, pa.string()),
        "_partition": pa.array(np.zeros(count, np.int32)),
        "_offset": pa.array(np.arange(first_offset, first_offset + count, dtype=np.int64)),
        "_timestamp": pa.array(np.full(count, int(WHEN.timestamp() * 1000), np.int64)).cast(pa.timestamp("ms")),
    })


def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def best_of(call: Any, rounds: int = 3) -> tuple[float, Any]:
    runs = [timed(call) for _ in range(rounds)]
    return min(r[0] for r in runs), runs[-1][1]


def run_case(base: Path, keys: int, epochs: int, fraction: float, partition_by: str, seed: int) -> dict[str, Any]:
    root = base / f"{partition_by.replace('[', '_').replace(']', '_').replace('(', '_').replace(')', '')}-{fraction}"
    root.mkdir(parents=True)
    fs = pafs.LocalFileSystem()
    catalog = open_catalog(IcebergSettings(namespace="bench"), fs, str(root))
    catalog.create_namespace_if_not_exists("bench")
    rng = np.random.default_rng(seed)
    all_ids = np.arange(keys, dtype=np.int64)
    initial = change_rows(all_ids, np.full(keys, "c"), 0, 0)
    schema = keyed_schema(iceberg_schema_of(keyed_arrow_schema(initial.schema, ["id"])), ["id"])
    spec = partition_spec_of(PartitionSpec.parse(partition_by), schema)
    table = catalog.create_table(("bench", "t"), schema=schema, partition_spec=spec, location=str(root / "t"))
    load_s, _ = timed(lambda: table.append(conform(initial.drop_columns(["_op"]), table.schema().as_arrow())))
    alive = np.ones(keys, bool)
    offset = keys
    commits = []
    for epoch in range(1, epochs + 1):
        ids = np.sort(rng.choice(all_ids, size=int(keys * fraction), replace=False))
        ops = np.where(rng.random(len(ids)) < 0.05, "d", "u")
        path = root / f"changes-{epoch}.parquet"
        pq.write_table(change_rows(ids, ops, offset, epoch), path)
        offset += len(ids)
        table = catalog.load_table(("bench", "t"))
        seconds, stats = timed(functools.partial(commit_upsert, table, ["id"], [str(path)],
                                                 {"laminar.epoch": str(epoch)}, {"laminar.epoch.bench": str(epoch)}))
        alive[ids[ops == "d"]] = False
        alive[ids[ops == "u"]] = True
        commits.append({"seconds": round(seconds, 3), "keys": stats.keys, "files_read": stats.files_read,
                        "files_rewritten": stats.files_rewritten, "files_added": stats.files_added})
    table = catalog.load_table(("bench", "t"))
    pyiceberg_s, arrow = best_of(lambda: table.scan().to_arrow())
    connection = q.connect(base / "duckdb-extensions", q.ICEBERG)
    q.run(connection, q.METADATA_FILE, metadata=table.metadata_location)
    duckdb_s, duck = best_of(lambda: connection.execute("SELECT * FROM iceberg_scan(getvariable('metadata'))").to_arrow_table())
    expected_rows = int(alive.sum())
    files = sum(1 for _ in table.scan().plan_files())
    return {
        "partition_by": partition_by, "fraction": fraction, "keys": keys, "epochs": epochs,
        "load_s": round(load_s, 3),
        "commit_median_s": round(statistics.median(c["seconds"] for c in commits), 3),
        "commits": commits,
        "data_files": files,
        "read_pyiceberg_s": round(pyiceberg_s, 3), "read_duckdb_s": round(duckdb_s, 3),
        "rows": expected_rows, "exact": arrow.num_rows == expected_rows and duck.num_rows == expected_rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fractions", default="0.01,0.2")
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-upsert-") as directory:
        for partition_by in ("none", f"bucket[{args.buckets}](id)"):
            for fraction in (float(f) for f in args.fractions.split(",")):
                results.append(run_case(Path(directory), args.keys, args.epochs, fraction, partition_by, args.seed))
    print(json.dumps({"benchmark": "upsert", "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
