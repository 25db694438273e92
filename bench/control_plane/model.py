"""The control-plane bench's pure parts: the synthetic logs, the in-memory lake and its exactness, quantiles.

No I/O here: the simulated nodes (:mod:`control_plane.node`) and the driver (``bench/bench_control_plane.py``)
hold the servers; these are unit-tested in ``tests/unit/bench/test_control_plane_model.py``.
"""
from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Offsets = npt.NDArray[np.int64]
Indexes = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SyntheticLogs:
    """``partitions`` logs appended to at ``rate`` records/s in total, spread evenly: partition ``p``'s
    high watermark at ``t`` seconds is ``floor(t * rate / partitions + p / partitions)``, so the records
    of one interval land on a rotating share of the partitions when ``rate * interval < partitions`` (a
    cursor that does not move is left out of an ack, as a real node leaves out an idle partition)."""

    partitions: int
    rate: float

    def high_watermarks(self, indexes: Indexes, seconds: float) -> Offsets:
        """The high watermark of each partition in ``indexes`` at ``seconds`` after the start."""
        per_partition = self.rate / self.partitions
        phase = indexes.astype(np.float64) / self.partitions
        return np.floor(max(seconds, 0.0) * per_partition + phase).astype(np.int64)


@dataclass(frozen=True)
class LakeReport:
    """What the lake holds against the logs: ``exact`` when every partition's landed ranges are
    contiguous from offset 0 (no gap, no overlap) and end at ``expected`` (the final manifest's cursors)."""

    records: int
    gaps: int
    duplicates: int
    short: int
    #: the first anomalous landings, each "<label>: partition p start s held h" (where exactness broke)
    first_anomalies: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.gaps == 0 and self.duplicates == 0 and self.short == 0


class MemoryLake:
    """The in-memory lake of ``partitions`` partitions: ranges ``[start, end)`` land per epoch (a node
    publishing its staged output once its epoch committed). Each landing is checked against the end
    of what the partition holds: a start above it is a gap (records lost), below it a duplicate.
    Thread-safe (every simulated node lands into one lake). The first :data:`ANOMALIES_KEPT` anomalous
    landings are kept with the ``label`` their caller gave (who landed, which epoch, when)."""

    ANOMALIES_KEPT = 20

    def __init__(self, partitions: int) -> None:
        self._ends: Offsets = np.zeros(partitions, dtype=np.int64)
        self._lock = threading.Lock()
        self.records = 0
        self.gaps = 0
        self.duplicates = 0
        self.anomalies: list[str] = []
        self._labels: list[str] = ["nothing"]  # who landed each partition's last range (for anomalies)
        self._landed_by = np.zeros(partitions, dtype=np.int64)
        self._staged: dict[int, dict[tuple[int, str], tuple[Indexes, Offsets, Offsets, str]]] = {}

    def stage(self, epoch: int, writer: tuple[int, str], indexes: Indexes, starts: Offsets, ends: Offsets,
              label: str = "") -> None:
        """Make ``writer``'s (node id, boot id) output of ``epoch`` durable and unpublished, as a node's
        staged files are before it acks (staging again replaces it: an ack retried)."""
        with self._lock:
            self._staged.setdefault(epoch, {})[writer] = (indexes, starts, ends, label)

    def publish(self, epoch: int, acked_by: Collection[tuple[int, str]]) -> None:
        """``epoch`` committed: publish the staged output of the writers it counted and drop the rest.
        Whichever node observes the commit first publishes every counted writer's output, a killed
        one's too, as the lake's recovery of a committed epoch does for a node that died between its
        ack and its publish; the others' calls find nothing left. What is left of earlier epochs (a
        commit no node observed: a coalesced watch) is published for the writers ``epoch`` counts
        (epochs commit in order and wait for every live owner: a boot counted now was counted then)."""
        with self._lock:
            for staged_epoch in sorted(e for e in self._staged if e <= epoch):
                writers = self._staged.pop(staged_epoch)
                for writer, (indexes, starts, ends, label) in sorted(writers.items()):
                    if writer in acked_by:
                        self._land(indexes, starts, ends, label)

    def land(self, indexes: Indexes, starts: Offsets, ends: Offsets, label: str = "") -> None:
        """Publish the ranges ``[starts[i], ends[i])`` of partitions ``indexes`` (one epoch of one node)."""
        with self._lock:
            self._land(indexes, starts, ends, label)

    def _land(self, indexes: Indexes, starts: Offsets, ends: Offsets, label: str) -> None:
        if len(indexes):
            held = self._ends[indexes]
            self.gaps += int(np.count_nonzero(starts > held))
            self.duplicates += int(np.count_nonzero(starts < held))
            for i in np.flatnonzero(starts != held)[:max(self.ANOMALIES_KEPT - len(self.anomalies), 0)].tolist():
                before = self._labels[self._landed_by[indexes[i]]]
                self.anomalies.append(f"{label}: partition {indexes[i]} start {starts[i]} held {held[i]}"
                                      f" (landed last by {before})")
            self._labels.append(label)
            self._landed_by[indexes] = len(self._labels) - 1
            self._ends[indexes] = np.maximum(held, ends)
            self.records += int((ends - starts).sum())

    def ends(self) -> Offsets:
        with self._lock:
            return self._ends.copy()

    def report(self, expected: Offsets) -> LakeReport:
        """Compare with ``expected`` (each partition's committed cursor: what must have landed)."""
        with self._lock:
            short = int(np.count_nonzero(self._ends != expected))
            return LakeReport(self.records, self.gaps, self.duplicates, short, tuple(self.anomalies))


def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def share_of(partitions: int, nodes: int) -> int:
    """A node's even share of ``partitions`` over ``nodes`` (rounded down)."""
    return partitions // max(nodes, 1)


def cursor_key(topic: str, partition: int) -> str:
    """The manifest's key of one partition (``topic:partition``)."""
    return f"{topic}:{partition}"


def cursors_to_array(cursors: Mapping[str, int], topic: str, partitions: int) -> Offsets:
    """A manifest's cursors of ``topic`` as an array by partition (0: absent, the start)."""
    out: Offsets = np.zeros(partitions, dtype=np.int64)
    prefix = f"{topic}:"
    for key, offset in cursors.items():
        if key.startswith(prefix):
            out[int(key[len(prefix):])] = offset
    return out
