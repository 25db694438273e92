"""The handoff bench's delivery rate (``bench/bench_handoff.py``): phase-free for batched emissions,
and still falling when a drain slows or stops the partitions it keeps."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from bench_handoff import delivery_rate, kept_emissions

WAIT = 0.25


def batches(first: float, period: float, count: int, records: int) -> list[tuple[float, int]]:
    """``count`` emissions of ``records`` every ``period`` from ``first``."""
    return [(first + i * period, records) for i in range(count)]


@pytest.mark.parametrize("phase", [0.0, 0.01, 0.1, 0.2, 0.25, 0.253])
def test_the_rate_of_steady_batches_does_not_depend_on_their_phase(phase: float) -> None:
    # 760 records every 254 ms (the batch wait plus a round trip) = 2,992 records/s
    emissions = batches(phase - 2.0, 0.254, 20, 760)
    # within 1%: a span can end up to a round trip short of its last batch
    assert delivery_rate(emissions, 0.0, 1.5, WAIT) == pytest.approx(760 / 0.254, rel=0.01)
    # the plain count in the window is 5 or 6 batches depending on the phase: what the rate replaces
    assert sum(n for at, n in emissions if 0.0 <= at < 1.5) in (5 * 760, 6 * 760)


def test_an_early_partial_fetch_keeps_the_rate() -> None:
    # a fetch answered 150 ms after the one before with 150 ms of records, then steady again
    emissions = [*batches(-2.0, 0.25, 6, 750), (-0.6, 450), *batches(-0.35, 0.25, 10, 750)]
    assert delivery_rate(emissions, -1.5, 0.0, WAIT) == pytest.approx(3000)


def test_fewer_records_a_fetch_lower_the_rate() -> None:
    emissions = [*batches(-2.0, 0.25, 8, 750), *batches(0.0, 0.25, 8, 375)]
    before = delivery_rate(emissions, -1.5, 0.0, WAIT)
    during = delivery_rate(emissions, 0.0, 1.5, WAIT)
    assert during / before == pytest.approx(0.5, rel=0.05)


def test_a_stall_to_the_end_of_the_window_lowers_the_rate() -> None:
    # steady until 0.5 s into the window, then nothing until after it
    emissions = [*batches(-2.0, 0.25, 11, 750), *batches(2.0, 0.25, 4, 750)]
    during = delivery_rate(emissions, 0.0, 1.5, WAIT)
    # anchored at the emission at 0: two more emissions, over 1.25 s (up to a batch wait before the end)
    assert during == pytest.approx(2 * 750 / 1.25)
    assert during / delivery_rate(emissions, -1.5, 0.0, WAIT) < 0.7


def test_a_window_without_emissions_delivers_nothing() -> None:
    assert delivery_rate(batches(-2.0, 0.25, 4, 750), 0.0, 1.5, WAIT) == 0.0
    assert delivery_rate([], 0.0, 1.5, WAIT) == 0.0


def test_kept_emissions_count_the_kept_rows_of_each_emission() -> None:
    rows = [(1, 0, 0.5), (2, 0, 0.5), (1, 1, 0.5), (3, 0, 0.75), (2, 1, 1.0)]
    assert kept_emissions(rows, {1, 2}) == [(0.5, 3), (1.0, 1)]
