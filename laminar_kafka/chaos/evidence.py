"""First evidence of an exactly-once violation in a published output (for the chaos report).

:func:`describe` names, per failing partition, the first missing / duplicated / unexpected offsets and
the published files around them; a file's name says which epoch, node and boot wrote it
(``epoch-E.node-N.boot-B.seq-S.parquet``), which is where to start reading the node logs.
"""
from __future__ import annotations

import posixpath

import numpy as np
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.sink import list_published
from laminar_kafka.cluster.ops.verify import VerifyReport

__all__ = ["describe"]


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
