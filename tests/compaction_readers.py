"""Readers of a topic's Parquet tree racing a compaction, for the compaction tests: what they saw wrong.

Three threads read ``<output>/<topic>`` until stopped:

- ``default``: ``pyarrow.dataset.dataset(<topic dir>, partitioning="hive")`` with its own discovery
  (default ignore prefixes). Never a row twice; its discovery lists a directory name by name, so
  when an exchange lands inside it, it can come up short (the inputs dropped, the output not
  listed). A short read is a problem unless a leaf directory changed (inode, ctime) during the
  discovery: such reads are counted as ``torn``.
- ``snapshot``: the same dataset over the files :func:`published_files` lists (one handle per
  directory, hive partitioning from the topic directory). Never a row twice, never fewer rows.
- ``lister``: ``os.listdir`` of each directory (one readdir), in a tight loop: an epoch is never both
  in a compacted file and another file, epochs never vanish, a directory never vanishes.

A read that opens a file an exchange replaced after its listing fails with FileNotFoundError and
is counted (``lost``), then done again.
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

from laminar_kafka.cluster.lake.parquet.compaction_plan import epochs_of
from laminar_kafka.cluster.lake.parquet.listing import published_files

__all__ = ["Readers"]


class Readers:
    def __init__(self, output: str, topic: str) -> None:
        self.base = Path(output, topic)
        self.stop = threading.Event()
        self.problems: list[str] = []
        self.reads: Counter[str] = Counter()
        self.sink_files: set[str] = set()
        self.threads = [threading.Thread(target=self._default, daemon=True),
                        threading.Thread(target=self._snapshot, daemon=True),
                        threading.Thread(target=self._lister, daemon=True)]

    def __enter__(self) -> Readers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def summary(self) -> str:
        return ", ".join(f"{name} {count}" for name, count in sorted(self.reads.items()))

    def _leaves(self) -> dict[str, tuple[int, int]]:
        """(inode, ctime) of every directory under the topic's (``_`` ones skipped)."""
        found = {}
        pending = [str(self.base)]
        while pending:
            path = pending.pop()
            try:
                info = os.stat(path)
                found[path] = (info.st_ino, info.st_ctime_ns)
                pending += [e.path for e in os.scandir(path) if e.is_dir() and not e.name.startswith(("_", "."))]
            except FileNotFoundError:
                continue
        return found

    def _check(self, reader: str, keys: np.ndarray, floor: int, torn: bool) -> int:
        if np.unique(keys).size != keys.size:
            self.problems.append(f"{reader}: {keys.size - np.unique(keys).size} row(s) seen twice")
        if keys.size < floor:
            if torn:
                self.reads[f"{reader} torn"] += 1
                return floor
            self.problems.append(f"{reader}: {keys.size} rows after {floor}")
        self.reads[reader] += 1
        return max(floor, int(keys.size))

    @staticmethod
    def _keys(table: object) -> np.ndarray:
        return table["_partition"].to_numpy().astype(np.int64) * 10**12 + table["_offset"].to_numpy()  # type: ignore[index]

    def _default(self) -> None:
        floor = 0
        while not self.stop.is_set():
            if not self.base.exists():
                time.sleep(0.05)
                continue
            before = self._leaves()
            try:
                dataset = ds.dataset(self.base, format="parquet", partitioning="hive")
                torn = self._leaves() != before
                table = dataset.to_table(columns=["_partition", "_offset"])
            except FileNotFoundError:
                self.reads["default lost"] += 1
                continue
            self.sink_files.update(os.path.basename(f) for f in dataset.files if os.path.basename(f).startswith("epoch-"))
            floor = self._check("default", self._keys(table), floor, torn)

    def _snapshot(self) -> None:
        floor = 0
        while not self.stop.is_set():
            files = published_files(str(self.base))
            if not files:
                time.sleep(0.05)
                continue
            try:
                dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(self.base))
                table = dataset.to_table(columns=["_partition", "_offset"])
            except FileNotFoundError:
                self.reads["snapshot lost"] += 1
                continue
            floor = self._check("snapshot", self._keys(table), floor, torn=False)

    def _lister(self) -> None:
        covered: dict[str, set[int]] = {}
        while not self.stop.is_set():
            directories = set(covered)
            if self.base.exists():
                directories |= {p for p in self._leaves() if p != str(self.base)}
            for directory in sorted(directories):
                try:
                    names = os.listdir(directory)
                except FileNotFoundError:
                    self.problems.append(f"{directory} vanished")
                    continue
                ranges = [r for r in (epochs_of(n) for n in names) if r is not None]
                compacted = [e for r in ranges if r.compact_id for e in range(r.first, r.last + 1)]
                alone = {r.first for r in ranges if not r.compact_id}
                if len(compacted) != len(set(compacted)) or alone & set(compacted):
                    self.problems.append(f"{directory}: an epoch in a compacted file and another: {sorted(names)}")
                now = alone | set(compacted)
                if not covered.get(directory, set()) <= now:
                    self.problems.append(f"{directory}: epochs {sorted(covered[directory] - now)[:5]} vanished")
                covered[directory] = now
                self.reads["listings"] += 1
            time.sleep(0.001)
