"""The pure arithmetic of ``bench_connect.py`` (no I/O): a process's CPU and memory from the text of
``/proc/<pid>/stat`` and ``/proc/<pid>/status``, percentiles, and the exactly-once audit of the
(partition, offset) pairs a table holds against the offsets a topic holds."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Audit", "audit_coordinates", "breakdown_delta", "cpu_seconds", "metric_means", "percentile", "status_kib"]


def cpu_seconds(stat_text: str, ticks_per_second: int) -> float:
    """User + system CPU seconds of a process from the text of its ``/proc/<pid>/stat`` (fields 14
    and 15, counted after the command name, which may hold spaces and parentheses)."""
    fields = stat_text[stat_text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime is field 14, stime field 15
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def status_kib(status_text: str, name: str) -> int:
    """The value in KiB of line ``name`` (``VmRSS``, ``VmHWM``...) of a ``/proc/<pid>/status`` text;
    raises KeyError when it has no such line."""
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return int(value.split()[0])
    raise KeyError(name)


def percentile(values: Sequence[float], quantile: float) -> float | None:
    """The ``quantile`` (0..1) of ``values`` by the nearest-rank method (the smallest value with at
    least that share of values at or below it); None for no values."""
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile {quantile} not in [0, 1]")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(quantile * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Audit:
    """A table's rows against a topic's records: ``missing`` records of the topic with no row,
    ``duplicated`` rows beyond the first for a record, ``foreign`` rows for no record of the topic."""

    expected: int
    rows: int
    missing: int
    duplicated: int
    foreign: int

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.foreign == 0


def audit_coordinates(landed: Iterable[tuple[int, int]], ends: Mapping[int, int]) -> Audit:
    """Audit the (partition, offset) of every row against a topic whose partition ``p`` holds offsets
    ``0 .. ends[p] - 1`` (a topic without transactions or deletions)."""
    counts = Counter(landed)
    ours = {coordinates: n for coordinates, n in counts.items() if 0 <= coordinates[1] < ends.get(coordinates[0], 0)}
    expected = sum(ends.values())
    foreign = sum(counts.values()) - sum(ours.values())
    duplicated = sum(n - 1 for n in ours.values())
    return Audit(expected=expected, rows=sum(counts.values()), missing=expected - len(ours), duplicated=duplicated,
                 foreign=foreign)


def metric_means(text: str, families: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per histogram family of ``families``, its ``count`` and ``mean`` (seconds) summed over the
    series of a Prometheus text export ``text`` (families absent: count 0, mean None left out)."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        base = name.split("{", 1)[0]
        for family in families:
            if base == f"{family}_sum":
                sums[family] = sums.get(family, 0.0) + float(value.split()[0])
            elif base == f"{family}_count":
                counts[family] = counts.get(family, 0.0) + float(value.split()[0])
    return {family: {"count": counts.get(family, 0.0), "mean": sums.get(family, 0.0) / counts[family]}
            for family in families if counts.get(family)}


def breakdown_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, object]:
    """The observations between two :func:`node_breakdown` reads: count and mean per family."""
    out: dict[str, object] = {}
    for family, now in after.items():
        then = before.get(family, {"count": 0.0, "mean": 0.0})
        count = now["count"] - then["count"]
        if count > 0:
            mean = (now["mean"] * now["count"] - then["mean"] * then["count"]) / count
            out[family.removeprefix("laminar_")] = {"count": int(count), "mean_s": round(mean, 3)}
    return out
