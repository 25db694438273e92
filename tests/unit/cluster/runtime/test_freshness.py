"""Freshness: when a node asks for an epoch (pure), the tracker of rows not visible yet, and the
visibility histogram observed in bulk."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from laminar_kafka.cluster.metrics import NodeMetrics, bucket_counts
from laminar_kafka.cluster.runtime.measures import (
    FreshnessTracker,
    VisibleAfter,
    ask_in,
    epoch_due,
    oldest_by_partition,
)
from laminar_kafka.cluster.runtime.state import FreshnessPolicy

POLICY = FreshnessPolicy(target_s=2.0, target_bytes=1_000)


def batch(topics: list[str], partitions: list[int], stamps: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "_topic": pa.array(topics).dictionary_encode(),
        "_partition": pa.array(partitions, pa.int32()),
        "_timestamp": pa.array(stamps, pa.timestamp("ms")),
    })


def test_nothing_pending_never_asks_whatever_the_bytes() -> None:
    assert ask_in(POLICY, 100.0, None, 0.5) is None
    assert not epoch_due(POLICY, 100.0, None, 10**9, 0.5)


def test_a_row_asks_once_waiting_longer_would_miss_the_target_given_the_measured_time() -> None:
    # appended at 100 s, an ask takes 0.5 s to be visible: ask by 101.5 s to be visible by 102 s
    assert ask_in(POLICY, 100.2, 100.0, 0.5) == pytest.approx(1.3)
    assert not epoch_due(POLICY, 101.4, 100.0, 0, 0.5)
    assert epoch_due(POLICY, 101.5, 100.0, 0, 0.5)
    assert epoch_due(POLICY, 100.0, 100.0, 0, 3.0)  # slower than the target: as soon as a row is there


def test_a_burst_asks_when_its_staged_bytes_reach_the_target_file_size() -> None:
    assert not epoch_due(POLICY, 100.0, 100.0, 999, 0.5)
    assert epoch_due(POLICY, 100.0, 100.0, 1_000, 0.5)
    assert not epoch_due(FreshnessPolicy(2.0), 100.0, 100.0, 10**12, 0.5)  # no byte target


@given(now=st.floats(0, 1e6), oldest=st.floats(0, 1e6), visible_after=st.floats(0, 100),
       target=st.floats(0.001, 100), staged=st.integers(0, 10**6))
def test_an_ask_due_means_no_later_ask_meets_the_target_and_else_there_is_time(
    now: float, oldest: float, visible_after: float, target: float, staged: int,
) -> None:
    policy = FreshnessPolicy(target, target_bytes=1_000)
    wait = ask_in(policy, now, oldest, visible_after)
    assert wait is not None and wait >= 0
    due = epoch_due(policy, now, oldest, staged, visible_after)
    if not due:  # waiting still meets the target, and only bytes below the target
        assert now + visible_after < oldest + target + 1e-6 and staged < 1_000
        assert now + wait + visible_after == pytest.approx(oldest + target, abs=1e-6)
    elif staged < 1_000:
        assert now + visible_after >= oldest + target - 1e-6


def test_visible_after_is_the_slowest_recent_measure_or_the_initial_guess() -> None:
    measured = VisibleAfter(0.25, window=3)
    assert measured.estimate() == 0.25
    for seconds in (0.4, 1.2, 0.3, 0.2):
        measured.add(seconds)
    assert measured.estimate() == 1.2  # 0.4 left the window, 1.2 is the slowest of the last three
    measured.add(0.1)
    assert measured.estimate() == 0.3


def test_oldest_by_partition_takes_each_partitions_minimum_and_skips_null_timestamps() -> None:
    records = batch(["a", "b", "a", "a", "b"], [0, 0, 1, 0, 0], [5_000, 7_000, None, 4_000, 9_000])
    oldest, stamps = oldest_by_partition(records)
    assert oldest == {("a", 0): 4_000, ("b", 0): 7_000}
    assert sorted(stamps.tolist()) == [4_000, 5_000, 7_000, 9_000]


def test_the_tracker_follows_rows_from_written_to_sealed_to_visible() -> None:
    tracker = FreshnessTracker()
    assert tracker.oldest_pending_s() is None
    tracker.note(batch(["a", "a"], [0, 1], [10_000, 11_000]), now_s=12.0)
    assert tracker.oldest_pending_s() == 10.0
    assert tracker.ages(13.0) == {("a", 0): 3.0, ("a", 1): 2.0}
    tracker.seal(4)
    assert tracker.oldest_pending_s() is None and tracker.pending_bytes == 0
    tracker.note(batch(["a"], [0], [12_500]), now_s=13.0)
    assert tracker.ages(14.0) == {("a", 0): 4.0, ("a", 1): 3.0}  # the sealed rows are not visible yet
    visible = tracker.published(4, now_s=14.0)
    assert sorted(visible.tolist()) == [3.0, 4.0]
    assert tracker.ages(14.0) == {("a", 0): 1.5, ("a", 1): 0.0}  # caught up: 0
    tracker.seal(5)
    assert tracker.published(5, now_s=15.0).tolist() == [2.5]
    assert tracker.ages(15.0) == {("a", 0): 0.0, ("a", 1): 0.0}


def test_rows_without_timestamps_are_pending_from_when_they_were_noted() -> None:
    tracker = FreshnessTracker()
    tracker.note(batch(["a"], [0], [None]), now_s=20.0)
    assert tracker.oldest_pending_s() == 20.0
    tracker.note(batch(["a"], [0], [99_000_000]), now_s=21.0)  # a timestamp ahead of this clock
    assert tracker.oldest_pending_s() == 20.0


def test_a_replacement_ack_of_the_same_epoch_keeps_the_first_acks_rows() -> None:
    tracker = FreshnessTracker()
    tracker.note(batch(["a"], [0], [1_000]), now_s=1.0)
    tracker.seal(3)
    tracker.note(batch(["a"], [0], [2_000]), now_s=2.0)
    tracker.seal(3)
    assert sorted(tracker.published(3, now_s=5.0).tolist()) == [3.0, 4.0]


@given(st.lists(st.floats(0, 100, allow_nan=False), max_size=50))
def test_bucket_counts_match_the_clients_own_observe(values: list[float]) -> None:
    bounds = (0.005, 0.1, 0.5, 1.0, 2.5, 30.0, float("inf"))
    expected = [0] * len(bounds)
    for value in values:
        expected[next(i for i, bound in enumerate(bounds) if value <= bound)] += 1
    assert bucket_counts(np.asarray(values, dtype=np.float64), bounds).tolist() == expected


def test_observe_visibility_exports_what_observing_each_value_would() -> None:
    values = np.asarray([0.003, 0.3, 0.3, 1.7, 2.5, 40.0])
    bulk, single = NodeMetrics(1), NodeMetrics(1)
    bulk.observe_visibility(values)
    bulk.observe_visibility(np.empty(0))
    for value in values.tolist():
        single.visibility.labels("1").observe(value)

    def lines(metrics: NodeMetrics) -> list[str]:
        text = generate_latest(metrics.registry).decode()
        return [line for line in text.splitlines() if line.startswith("laminar_visibility_seconds")]

    assert lines(bulk) == lines(single) and any('le="2.5",node="1"} 5.0' in line for line in lines(bulk))
