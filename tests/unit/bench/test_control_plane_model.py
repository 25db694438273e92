"""The control-plane bench's pure parts (``bench/control_plane/model.py``): the synthetic logs, the in-memory
lake's exactness check and the quantiles its figures use."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from control_plane.model import (
    MemoryLake,
    SyntheticLogs,
    cursors_to_array,
    quantile,
    share_of,
)


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_logs_grow_at_the_rate_spread_over_the_partitions() -> None:
    logs = SyntheticLogs(partitions=4, rate=8.0)
    every = np.arange(4, dtype=np.int64)
    assert logs.high_watermarks(every, 0.0).tolist() == [0, 0, 0, 0]
    assert logs.high_watermarks(every, 10.0).tolist() == [20, 20, 20, 20]
    assert int(logs.high_watermarks(every, 100.0).sum()) == 800


def test_a_slow_rate_moves_a_rotating_share_of_the_partitions() -> None:
    logs = SyntheticLogs(partitions=1000, rate=100.0)
    every = np.arange(1000, dtype=np.int64)
    moved = logs.high_watermarks(every, 3.0) - logs.high_watermarks(every, 2.0)
    assert int(moved.sum()) == 100 and set(moved.tolist()) == {0, 1}
    assert (np.diff(logs.high_watermarks(every, 7.5)) >= 0).all()
    assert (logs.high_watermarks(every, -1.0) == 0).all()


def test_contiguous_landings_are_exact() -> None:
    lake = MemoryLake(3)
    lake.land(ints(0, 2), ints(0, 0), ints(5, 7))
    lake.land(ints(0, 1), ints(5, 0), ints(9, 4))
    report = lake.report(ints(9, 4, 7))
    assert report.exact and report.records == 9 + 4 + 7
    assert lake.ends().tolist() == [9, 4, 7]


@pytest.mark.parametrize(("start", "gaps", "duplicates"), [(6, 1, 0), (4, 0, 1)])
def test_a_gap_or_an_overlap_is_not_exact(start: int, gaps: int, duplicates: int) -> None:
    lake = MemoryLake(1)
    lake.land(ints(0), ints(0), ints(5))
    lake.land(ints(0), ints(start), ints(9))
    report = lake.report(ints(9))
    assert (report.gaps, report.duplicates, report.exact) == (gaps, duplicates, False)


def test_records_short_of_the_manifest_are_not_exact() -> None:
    lake = MemoryLake(2)
    lake.land(ints(0), ints(0), ints(5))
    report = lake.report(ints(5, 3))
    assert report.short == 1 and not report.exact
    lake.land(ints(), ints(), ints())  # an epoch that moved nothing lands nothing
    assert lake.report(ints(5, 0)).exact


def test_a_commit_publishes_the_staged_output_of_the_acks_it_counts_a_dead_writers_too() -> None:
    lake = MemoryLake(2)
    lake.stage(1, (1, "a"), ints(0), ints(0), ints(5), "node 1 epoch 1")
    lake.stage(1, (2, "b"), ints(1), ints(0), ints(3), "node 2 epoch 1")  # node 2 then dies
    lake.stage(1, (3, "c"), ints(1), ints(0), ints(9), "a zombie")  # not counted
    lake.publish(1, ((1, "a"), (2, "b")))
    assert lake.ends().tolist() == [5, 3]
    lake.publish(1, ((1, "a"), (2, "b")))  # every other node observing the commit finds nothing left
    assert lake.report(ints(5, 3)).exact


def test_a_commit_no_node_observed_is_published_with_the_next_for_the_writers_it_counts() -> None:
    lake = MemoryLake(1)
    lake.stage(1, (1, "a"), ints(0), ints(0), ints(4))
    lake.stage(1, (9, "z"), ints(0), ints(0), ints(7))  # a boot the next commit does not count
    lake.stage(2, (1, "a"), ints(0), ints(4), ints(6))
    lake.publish(2, ((1, "a"),))
    assert lake.report(ints(6)).exact and lake.records == 6


def test_an_anomaly_names_who_landed_and_who_landed_before() -> None:
    lake = MemoryLake(1)
    lake.land(ints(0), ints(0), ints(5), "node 1 epoch 1")
    lake.land(ints(0), ints(3), ints(9), "node 2 epoch 2")
    assert lake.report(ints(9)).first_anomalies == (
        "node 2 epoch 2: partition 0 start 3 held 5 (landed last by node 1 epoch 1)",)


def test_quantile_share_and_cursor_keys() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([float(v) for v in range(101)], 0.99) == 99.0
    assert share_of(100_000, 100) == 1000 and share_of(5, 0) == 5
    assert cursors_to_array({"t:2": 7, "t:0": 3, "u:1": 9}, "t", 3).tolist() == [3, 0, 7]
