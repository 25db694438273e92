"""The CDC campaign's table (pure: no I/O): per fault kind, the change events produced, the keys
live at the end, and what the CDC audit counts (:mod:`laminar_kafka.chaos.cdc.audit`): keys
missing, undeleted, stale, duplicated; failed runs and the worst recovery, as the append
campaign's table (:func:`laminar_kafka.chaos.report.format_table`) counts them."""
from __future__ import annotations

from collections.abc import Sequence

from laminar_kafka.chaos.report import RunResult, summarize

__all__ = ["format_cdc_table"]


def format_cdc_table(runs: Sequence[RunResult], kinds_order: Sequence[str] = (),
                     recovery_timeout_s: float | None = None) -> str:
    """One line per kind some run drew (a run with several kinds counts in each), then ``all``."""
    rows = summarize(runs, kinds_order)
    width = max([16, *(len(row.kind) for row in rows)])
    header = (f"{'kind':<{width}} {'runs':>4} {'faults':>6} {'changes':>8} {'keys':>6} {'missing':>7} "
              f"{'undeleted':>9} {'stale':>5} {'duplicated':>10} {'failed':>6}  worst recovery s")
    lines = [header, "-" * len(header)]
    for row in rows:
        chosen = [r for r in runs if row.kind == "all" or row.kind in r.kinds]
        if row.kind == "all":
            lines.append("-" * len(header))
        if row.unrecovered:
            recovery = f"{f'>{recovery_timeout_s:.0f}' if recovery_timeout_s else 'never'} ({row.unrecovered}x)"
        else:
            recovery = "-" if row.worst_recovery_s is None else f"{row.worst_recovery_s:.1f}"
        lines.append(f"{row.kind:<{width}} {row.runs:>4} {row.faults:>6} {sum(r.records for r in chosen):>8} "
                     f"{sum(r.keys for r in chosen):>6} {sum(r.missing for r in chosen):>7} "
                     f"{sum(r.undeleted for r in chosen):>9} {sum(r.stale for r in chosen):>5} "
                     f"{sum(r.duplicated for r in chosen):>10} {row.failed:>6}  {recovery}")
    return "\n".join(lines)
