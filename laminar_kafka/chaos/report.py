"""Results of the chaos campaign and their table (pure: no I/O).

A :class:`RunResult` is one seed's run; a :class:`FaultResult` one injected fault with its recovery
time. :func:`summarize` folds runs into one :class:`KindRow` per fault kind (a run with several kinds
counts in each of their rows) and :func:`format_table` prints them.

Recovery time of a fault (``recovery_s``): from the moment the fault hit (the kill, the SIGSTOP, the
cut, the remount...) until every partition that existed then has a durable cursor (in the latest
committed manifest) at or past the high watermark it had just before the injection, and every
partition the fault created (topic growth) has its first record durable. For a node cut from Kafka
only, the high watermarks are taken just before the heal instead (what the node had fetched before
the cut still becomes durable during it; what was written during the cut shows the stall). Faults
with a hold (a zombie, a cut, a server down, a read-only output) count from the injection, so their
recovery includes the part of the hold during which the pipeline could not make progress.
``None``: not within the run's recovery timeout.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

__all__ = ["FaultResult", "KindRow", "RunResult", "campaign_json", "format_table", "summarize"]


@dataclass
class FaultResult:
    """One injected fault. Times are seconds since the start of the run's fault phase."""

    kind: str
    target: str
    planned_at_s: float
    params: dict[str, object] = field(default_factory=dict)
    injected_at_s: float | None = None
    healed_at_s: float | None = None
    recovery_s: float | None = None
    details: dict[str, object] = field(default_factory=dict)
    error: str | None = None


@dataclass
class RunResult:
    """One seed's run. ``exact``: the audit of every topic found nothing missing, duplicated,
    unexpected or out of order (nor, for a CDC pipeline, a key undeleted or stale), and no
    acknowledged record is absent from the output. ``ok``: exact,
    caught up, and no error."""

    seed: int
    kinds: tuple[str, ...]
    faults: list[FaultResult] = field(default_factory=list)
    topics: tuple[str, ...] = ()
    records: int = 0
    acked: int = 0
    missing: int = 0
    duplicated: int = 0
    unexpected: int = 0
    order_violations: int = 0
    acked_lost: int = 0
    aborted_in_output: int = 0
    #: the CDC pipeline's audit (laminar_kafka.chaos.cdc.audit): keys live in the final state, keys
    #: present that their last change deletes, keys showing another change than their last
    keys: int = 0
    undeleted: int = 0
    stale: int = 0
    audited: bool = False
    caught_up: bool = False
    catch_up_s: float | None = None
    elapsed_s: float = 0.0
    error: str | None = None
    workdir: str | None = None
    node_exits: list[dict[str, object]] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    producer: dict[str, object] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return (self.audited and self.missing == 0 and self.duplicated == 0 and self.unexpected == 0
                and self.order_violations == 0 and self.acked_lost == 0 and self.aborted_in_output == 0
                and self.undeleted == 0 and self.stale == 0)

    @property
    def ok(self) -> bool:
        return self.exact and self.caught_up and self.error is None

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["kinds"] = list(self.kinds)
        data["topics"] = list(self.topics)
        data["exact"] = self.exact
        data["ok"] = self.ok
        return data


@dataclass(frozen=True)
class KindRow:
    """The table row of one fault kind (``kind == "all"``: every run once)."""

    kind: str
    runs: int
    faults: int
    records: int
    missing: int
    duplicated: int
    failed: int
    worst_recovery_s: float | None
    unrecovered: int


def _row(kind: str, runs: Sequence[RunResult], faults: Sequence[FaultResult]) -> KindRow:
    recoveries = [f.recovery_s for f in faults if f.recovery_s is not None]
    return KindRow(
        kind=kind,
        runs=len(runs),
        faults=len(faults),
        records=sum(r.records for r in runs),
        missing=sum(r.missing for r in runs),
        duplicated=sum(r.duplicated for r in runs),
        failed=sum(1 for r in runs if not r.ok),
        worst_recovery_s=max(recoveries) if recoveries else None,
        unrecovered=sum(1 for f in faults if f.injected_at_s is not None and f.recovery_s is None),
    )


def summarize(runs: Iterable[RunResult], kinds_order: Sequence[str] = ()) -> list[KindRow]:
    """One row per kind that some run drew (in ``kinds_order``, then by name), then an ``all`` row."""
    runs = list(runs)
    drawn = {k for r in runs for k in r.kinds}
    order = [k for k in kinds_order if k in drawn] + sorted(drawn - set(kinds_order))
    rows = [_row(kind, [r for r in runs if kind in r.kinds], [f for r in runs for f in r.faults if f.kind == kind])
            for kind in order]
    rows.append(_row("all", runs, [f for r in runs for f in r.faults]))
    return rows


def _recovery_text(row: KindRow, timeout_s: float | None) -> str:
    if row.unrecovered:
        bound = f">{timeout_s:.0f}" if timeout_s else "never"
        return f"{bound} ({row.unrecovered}x)"
    return "-" if row.worst_recovery_s is None else f"{row.worst_recovery_s:.1f}"


def format_table(rows: Sequence[KindRow], recovery_timeout_s: float | None = None) -> str:
    """The per-kind table: runs, faults, records, missing, duplicated, failed runs, worst recovery."""
    width = max([16, *(len(row.kind) for row in rows)])
    header = f"{'kind':<{width}} {'runs':>4} {'faults':>6} {'records':>9} {'missing':>7} {'duplicated':>10} " \
             f"{'failed':>6}  {'worst recovery s':<16}"
    lines = [header, "-" * len(header)]
    for row in rows:
        if row.kind == "all":
            lines.append("-" * len(header))
        lines.append(f"{row.kind:<{width}} {row.runs:>4} {row.faults:>6} {row.records:>9} {row.missing:>7} "
                     f"{row.duplicated:>10} {row.failed:>6}  {_recovery_text(row, recovery_timeout_s):<16}".rstrip())
    return "\n".join(lines)


def campaign_json(runs: Sequence[RunResult], rows: Sequence[KindRow], elapsed_s: float) -> dict[str, object]:
    return {
        "ok": all(r.ok for r in runs) and bool(runs),
        "seeds": [r.seed for r in runs],
        "elapsed_s": round(elapsed_s, 1),
        "kinds": {row.kind: asdict(row) for row in rows},
        "runs": [r.to_json() for r in runs],
    }
