"""The sink's writer memory under a fan-out (prints JSON): RSS of one in-process :class:`ParquetSink`
fed synthetic decoded batches, against its ``writer-memory-bytes`` cap. No Kafka, local filesystem.

    .venv/bin/python bench/bench_writer_memory.py [--duration 600] [--cap 67108864] [--rate 20000]

Batches of ``--batch-records`` rows from ``--partitions`` Kafka partitions arrive at ``--rate``
records/s (paced by the clock; ``achieved_rate`` says whether the machine kept up), each row with a
``customer_id`` that ``bucket[--buckets](customer_id)`` spreads over as many directories, and an
incompressible ``payload`` of ``--record-bytes``. Every ``--seal-interval`` seconds the sink seals an
epoch (as a barrier does) and the sealed files are deleted (the bench keeps no output). RSS is
sampled every ``--sample-interval`` seconds: ``baseline_rss`` before the first write (the
interpreter, pyarrow and the payload pool), then its max, final value and slope (least squares
over the samples after the first minute, MiB a minute), beside the bytes the sink accounted
(``writer_memory``) and Arrow's allocations. ``--cap 0`` runs without a bound.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from laminar_kafka.cluster.lake.parquet.sink import ParquetSink
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec

MIB = 1024 * 1024
POOL_BYTES = 32 * MIB


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Batches:
    """Synthetic decoded batches: offsets counted per partition, payloads sliced from a random pool
    (a fresh slice each batch, zero-copy)."""

    def __init__(self, rows: int, partitions: int, record_bytes: int, seed: int = 7) -> None:
        self.rows, self.partitions, self.record_bytes = rows, partitions, record_bytes
        self.rng = np.random.default_rng(seed)
        self.pool = pa.py_buffer(self.rng.integers(0, 256, POOL_BYTES, dtype=np.uint8).tobytes())
        self.offsets = np.zeros(partitions, np.int64)
        self.topic = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["orders"]))
        self.value_offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int32) * record_bytes).tobytes())

    def next(self) -> pa.RecordBatch:
        rows = self.rows
        partition = self.rng.integers(0, self.partitions, rows).astype(np.int32)
        order = np.argsort(partition, kind="stable")
        counts = np.bincount(partition, minlength=self.partitions)
        starts = self.offsets.copy()
        self.offsets += counts
        # each row's offset: its partition's next offset, in arrival order within the partition
        rank = np.arange(rows) - np.repeat(np.cumsum(counts) - counts, counts)
        offset = np.empty(rows, np.int64)
        offset[order] = starts[partition[order]] + rank
        start = int(self.rng.integers(0, POOL_BYTES - rows * self.record_bytes))
        payload = pa.Array.from_buffers(pa.binary(), rows, [None, self.value_offsets,
                                                            self.pool.slice(start, rows * self.record_bytes)])
        now = int(time.time() * 1000)
        return pa.record_batch({
            "_topic": self.topic,
            "_partition": pa.array(partition),
            "_offset": pa.array(offset),
            "_timestamp": pa.array(np.full(rows, now, np.int64), pa.timestamp("ms")),
            "customer_id": pa.array(self.rng.integers(0, 1_000_000, rows, dtype=np.int64)),
            "payload": payload,
        })


def slope_mib_per_minute(samples: list[tuple[float, int]], skip_s: float) -> float:
    """Least-squares slope of RSS over the samples after ``skip_s`` seconds, MiB a minute."""
    points = [(t, r) for t, r in samples if t >= skip_s]
    if len(points) < 2:
        return 0.0
    t = np.array([p[0] for p in points]) / 60.0
    r = np.array([p[1] for p in points]) / MIB
    return float(np.polyfit(t, r, 1)[0])


def run(args: argparse.Namespace) -> dict[str, object]:
    out = Path(tempfile.mkdtemp(prefix="bench-writer-memory-", dir=args.dir))
    sink = ParquetSink(str(out), node_id=1, boot_id="bench", row_group_rows=args.row_group_rows,
                       partitioning=PartitionSpec.parse(f"bucket[{args.buckets}](customer_id)"),
                       writer_memory_bytes=args.cap)
    batches = Batches(args.batch_records, args.partitions, args.record_bytes)
    batches.next()  # warm: numpy, pyarrow
    baseline = rss()
    samples: list[tuple[float, int]] = []
    accounted: list[int] = []
    allocated: list[int] = []
    started = time.monotonic()
    last_seal = last_sample = started
    written = epochs = files = 0
    try:
        while (now := time.monotonic()) - started < args.duration:
            due = started + written / args.rate
            if now < due:
                time.sleep(due - now)
            sink.write(batches.next())
            written += args.batch_records
            accounted.append(sink.writer_memory)
            now = time.monotonic()
            if now - last_seal >= args.seal_interval:
                epochs += 1
                sealed = sink.seal(epochs)
                files += len(sealed)
                for path in sealed:
                    (out / path).unlink()
                last_seal = now
            if now - last_sample >= args.sample_interval:
                samples.append((now - started, rss()))
                allocated.append(pa.total_allocated_bytes())
                last_sample = now
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)
    rss_values = [r for _, r in samples]
    return {
        "config": {k: v for k, v in vars(args).items() if k != "dir"},
        "cap_mib": round(args.cap / MIB, 1), "baseline_rss_mib": round(baseline / MIB, 1),
        "rss_max_mib": round(max(rss_values) / MIB, 1), "rss_final_mib": round(rss_values[-1] / MIB, 1),
        "rss_max_over_baseline_mib": round((max(rss_values) - baseline) / MIB, 1),
        "rss_slope_mib_per_minute": round(slope_mib_per_minute(samples, 60.0), 3),
        "writer_memory_max_mib": round(max(accounted) / MIB, 1),
        "arrow_allocated_max_mib": round(max(allocated) / MIB, 1),
        "achieved_rate": round(written / elapsed), "records": written, "epochs": epochs, "files": files,
        "files_per_epoch": round(files / max(epochs, 1), 1),
        "early_flushes": sink.early_flushes, "early_closes": sink.early_closes,
        "files_closed_early_max_open": sink.files_closed_early,
        "rss_samples_mib": [[round(t), round(r / MIB, 1)] for t, r in samples[:: max(1, len(samples) // 40)]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--cap", type=int, default=64 * MIB, help="writer-memory-bytes (default 64 MiB; 0: none)")
    parser.add_argument("--rate", type=int, default=20_000, help="records a second (default 20000)")
    parser.add_argument("--partitions", type=int, default=1000, help="Kafka partitions (default 1000)")
    parser.add_argument("--buckets", type=int, default=64, help="bucket[N](customer_id) (default 64)")
    parser.add_argument("--record-bytes", type=int, default=1000, help="payload bytes a record (default 1000)")
    parser.add_argument("--batch-records", type=int, default=2000, help="records a batch (default 2000)")
    parser.add_argument("--row-group-rows", type=int, default=65536, help="row-group-rows (default 65536)")
    parser.add_argument("--seal-interval", type=float, default=10.0, help="seconds between seals (default 10)")
    parser.add_argument("--sample-interval", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--dir", default=None, help="where the staged files go (default: a temp directory)")
    print(json.dumps(run(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
