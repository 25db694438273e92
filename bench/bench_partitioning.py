"""What ``partition-by`` costs the sink: :func:`split_by_partition` over one batch, per spec.

Run ``python bench/bench_partitioning.py [--rows N] [--repeat R]``; prints one JSON object: per
spec, the directories a batch splits into, the median seconds per batch and the rows per second
(one run, the specs compared within it; not a timed test). The batch holds ``_topic``,
``_timestamp`` (one hour of arrival times), ``customer_id`` (int64, 10,000 customers), ``region``
(8 strings) and ``event_time`` (a week of event times), about 100-byte records.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.partitioning import split_by_partition

SPECS = (
    "none",
    "day",
    "hour",
    "region",
    "bucket[16](customer_id)",
    "truncate[3](region)",
    "day(event_time)",
    "day(event_time),bucket[16](customer_id)",
)


def batch_of(rows: int, seed: int = 7) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    start = np.datetime64("2026-12-05T10:00:00", "ms").astype(np.int64)
    regions = pa.array([f"region-{i}" for i in range(8)])
    return pa.record_batch({
        "_topic": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["orders"])),
        "_partition": pa.array(rng.integers(0, 8, rows, dtype=np.int32)),
        "_offset": pa.array(np.arange(rows, dtype=np.int64)),
        "_timestamp": pa.array(start + np.sort(rng.integers(0, 3_600_000, rows)), pa.timestamp("ms")),
        "customer_id": pa.array(rng.integers(0, 10_000, rows, dtype=np.int64)),
        "region": regions.take(pa.array(rng.integers(0, 8, rows))),
        "event_time": pa.array(start + rng.integers(-7 * 86_400_000, 0, rows), pa.timestamp("ms")),
        "payload": pa.array([b"x" * 40] * rows, pa.binary()),
    })


def measure(batch: pa.RecordBatch, text: str, repeat: int) -> dict[str, object]:
    spec = PartitionSpec.parse(text)
    split_by_partition(batch, spec)  # warm: imports, caches
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        parts = split_by_partition(batch, spec)
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    return {"spec": text, "directories": len(parts), "seconds_per_batch": round(median, 6),
            "rows_per_second": round(batch.num_rows / median)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65_536, help="rows per batch (default 65536)")
    parser.add_argument("--repeat", type=int, default=21, help="timed splits per spec (default 21)")
    args = parser.parse_args()
    batch = batch_of(args.rows)
    print(json.dumps({"rows": args.rows, "results": [measure(batch, text, args.repeat) for text in SPECS]}, indent=2))


if __name__ == "__main__":
    main()
