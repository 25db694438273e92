"""The exactness check of a chaos run (:func:`audit_run`) and the first evidence of a violation.

:func:`audit_run` audits every topic of the run against Kafka (0 missing, 0 duplicated, nothing
unexpected or out of order), reading the lake as its users do: a Parquet tree, or each Iceberg
table's current snapshot through the run's catalog (for the ``s3-rest`` lake, the REST catalog and
SeaweedFS reached directly); plus the producer's own view: every acknowledged offset is in the lake,
no aborted one is. :func:`describe` names, per failing partition, the first missing / duplicated / unexpected offsets and
the published files around them; a file's name says which epoch, node and boot wrote it
(``epoch-E.node-N.boot-B.seq-S.parquet``), which is where to start reading the node logs.
"""
from __future__ import annotations

import posixpath
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.chaos.lake import RunLake
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.report import RunResult
from laminar_kafka.cluster.lake.parquet.sink import list_published
from laminar_kafka.cluster.ops.verify import VerifyReport
from laminar_kafka.coordinator.codec import format_partition_key

__all__ = ["audit_run", "log_evidence", "describe"]

#: how long the audit waits for records still missing to show (a publish a node finishes late)
MISSING_GRACE_S = 30.0


def audit_run(result: RunResult, partitions: Mapping[str, int], producer: ChaosProducer, lake: RunLake,
              bootstrap: str) -> None:
    """The exactly-once audit of every topic (``partitions``: topic -> partition count) plus the
    producer's view; fills ``result`` (counts, evidence, ``audited``). Raises when the lake or Kafka
    cannot be read (a run error, not a verdict)."""
    from laminar_kafka.cluster.ops.verify import audit, read_topic
    from laminar_kafka.cluster.ops.verify_lake import read_lake_output

    fs, root = lake.filesystem()
    target = lake.target()
    result.records = result.missing = result.duplicated = result.unexpected = result.order_violations = 0
    result.acked_lost = result.aborted_in_output = 0
    deadline = time.monotonic() + MISSING_GRACE_S
    for topic in sorted(partitions):
        expected, highs, lows = read_topic(bootstrap, topic, 120.0)
        while True:
            scan = read_lake_output(target, fs, root, topic)
            report = audit(topic, expected, highs, scan, lows)
            if report.missing == 0 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        result.records += sum(p.expected for p in report.partitions)
        result.missing += report.missing
        result.duplicated += report.duplicated
        result.unexpected += sum(p.unexpected for p in report.partitions)
        result.order_violations += len(report.order_violations)
        for partition, present in ((p, np.unique(scan.offsets.get(p, np.empty(0, np.int64))))
                                   for p in range(partitions[topic])):
            acked = np.asarray(producer.acked.get(format_partition_key(topic, partition), []), dtype=np.int64)
            lost = acked[~np.isin(acked, present)]
            if lost.size:
                result.acked_lost += int(lost.size)
                result.evidence.append(f"{topic}:{partition}: {lost.size} acknowledged record(s) not in the output, "
                                       f"first offsets {lost[:5].tolist()}")
            aborted = np.asarray(producer.aborted.get(format_partition_key(topic, partition), []), dtype=np.int64)
            leaked = aborted[np.isin(aborted, present)]
            if leaked.size:
                result.aborted_in_output += int(leaked.size)
                result.evidence.append(f"{topic}:{partition}: {leaked.size} aborted record(s) in the output, "
                                       f"first offsets {leaked[:5].tolist()}")
        if not report.ok:
            result.evidence += describe(fs, root, topic, report)
    result.audited = True


def _file_offsets(fs: pafs.FileSystem, root: str, topic: str, partition: int) -> list[tuple[str, np.ndarray]]:
    """(file name, offsets of ``topic:partition`` in it) for every published file that holds some."""
    found = []
    for path in list_published(fs, root):
        with fs.open_input_file(path) as handle:
            table = pq.ParquetFile(handle).read(columns=["_topic", "_partition", "_offset"])
        table = table.filter(pc.and_(pc.equal(table["_topic"], topic), pc.equal(table["_partition"], partition)))
        if table.num_rows:
            found.append((posixpath.basename(path), table["_offset"].to_numpy().astype(np.int64)))
    return found


def _holders(files: list[tuple[str, np.ndarray]], offset: int) -> list[str]:
    return [name for name, offsets in files if bool(np.any(offsets == offset))]


def _span(files: list[tuple[str, np.ndarray]]) -> str:
    return "; ".join(f"{name} [{int(o.min())}..{int(o.max())}]" for name, o in files[:12])


def describe(fs: pafs.FileSystem, root: str, topic: str, report: VerifyReport, limit: int = 4) -> list[str]:
    """Human-readable evidence lines for the partitions of ``report`` that are not OK (at most ``limit``)."""
    lines: list[str] = []
    for audit in [p for p in report.partitions if not p.ok][:limit]:
        key = f"{topic}:{audit.partition}"
        files = sorted(_file_offsets(fs, root, topic, audit.partition), key=lambda f: int(f[1].min()))
        if audit.missing:
            first = audit.first_missing[0]
            before = [n for n, o in files if bool(np.any(o == first - 1))]
            after_offsets = [int(o[o > first].min()) for _, o in files if bool(np.any(o > first))]
            after = min(after_offsets) if after_offsets else None
            lines.append(
                f"{key}: {audit.missing} missing, first {list(audit.first_missing)}; offset {first - 1} is in "
                f"{before or 'no file'}; next present offset {after} is in "
                f"{_holders(files, after) if after is not None else 'no file'}")
        if audit.duplicated:
            every = np.concatenate([o for _, o in files]) if files else np.empty(0, np.int64)
            unique, counts = np.unique(every, return_counts=True)
            twice = unique[counts > 1]
            lines.append(f"{key}: {audit.duplicated} duplicated, first {twice[:5].tolist()}; offset {int(twice[0])} "
                         f"is in {_holders(files, int(twice[0]))}" if twice.size else f"{key}: duplicated")
        if audit.unexpected:
            lines.append(f"{key}: {audit.unexpected} unexpected offset(s) (not readable read_committed: aborted "
                         f"or never written)")
        lines.append(f"{key}: files {_span(files)}")
    for violation in report.order_violations[:3]:
        lines.append(f"{topic}: order violation {violation}")
    return lines


def log_evidence(log_dir: Path, exits: list[dict[str, object]], limit: int = 6) -> list[str]:
    """The first error lines of the node logs and the nodes' unexpected exits (for a failed run)."""
    lines = [f"node {e['node']} exited with code {e['code']} while {e['while']} at +{e['at_s']}s: {e['last_line']}"
             for e in exits[:3]]
    for log in sorted(log_dir.glob("node-*.log")):
        try:
            text = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        errors = [line for line in text if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]
        lines += [f"{log.name}: {line[:300]}" for line in errors[:2]]
    return lines[:limit]
