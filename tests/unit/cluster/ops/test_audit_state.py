"""The continuous audit's arithmetic: incremental passes add up to the one-shot audit, rows arriving
below an audited mark are duplicates, rows past the mark wait, and the mark never moves back."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.ops.audit_state import PartitionAccount, PartitionPass, advance


def arr(*offsets: int) -> np.ndarray:
    return np.asarray(offsets, np.int64)


def test_a_pass_settles_the_window_and_keeps_rows_past_the_mark() -> None:
    account, found = advance(PartitionAccount(), PartitionPass(arr(0, 1, 2, 3, 3, 7, 9), 6, arr(0, 1, 2, 3, 4, 5)))
    assert (found.missing, found.duplicated, found.unexpected, found.present) == (2, 1, 0, 4)
    assert account.mark == 6 and account.pending.tolist() == [7, 9] and account.first_missing == (4, 5)
    account, found = advance(account, PartitionPass(arr(8), 10, arr(6, 7, 8, 9)))
    assert (found.missing, found.present) == (1, 3)  # 6 missing; 7 and 9 came in the pass before
    assert (account.missing, account.duplicated, account.present, account.mark) == (3, 1, 7, 10)
    assert account.first_missing == (4, 5, 6)


def test_a_row_below_the_mark_is_a_duplicate_a_copied_file() -> None:
    account, _ = advance(PartitionAccount(), PartitionPass(arr(0, 1, 2), 3, arr(0, 1, 2)))
    account, found = advance(account, PartitionPass(arr(0, 1, 2), 3, arr()))
    assert (found.duplicated, account.duplicated, account.missing) == (3, 3, 0)


def test_rows_kafka_does_not_hold_are_unexpected_unless_retention_deleted_them() -> None:
    _, found = advance(PartitionAccount(), PartitionPass(arr(0, 1, 5, 6), 7, arr(5, 6), low_watermark=5))
    assert (found.unexpected, found.missing, found.present) == (0, 0, 2)  # 0 and 1: deleted by retention
    _, found = advance(PartitionAccount(), PartitionPass(arr(5, 6, 7), 8, arr(5, 6), low_watermark=5))
    assert found.unexpected == 1  # 7: a transaction marker's offset, say, that no record holds


def test_a_missing_offset_landed_later_is_recovered_not_duplicated() -> None:
    """An epoch the lake lost (missing), landed again by a node's rewind: settled, once."""
    account, found = advance(PartitionAccount(), PartitionPass(arr(0, 1, 4), 5, arr(0, 1, 2, 3, 4)))
    assert found.missing == 2 and account.first_missing == (2, 3)
    account, found = advance(account, PartitionPass(arr(2, 3, 3, 1), 5, arr()))
    assert (found.recovered, found.duplicated) == (2, 2)  # 3 twice and 1 again: duplicates
    assert (account.missing, account.present, account.duplicated) == (0, 5, 2)


def test_the_mark_never_moves_back() -> None:
    account, _ = advance(PartitionAccount(), PartitionPass(arr(), 5, arr()))
    with pytest.raises(ValueError, match="moved back from 5 to 4"):
        advance(account, PartitionPass(arr(), 4, arr()))


@st.composite
def landings(draw: st.DrawFn) -> tuple[list[int], list[int], list[tuple[list[int], int]]]:
    """Kafka's offsets (sparse), the lake's rows (some missing, some doubled), and passes: each with
    the rows of its new files and its mark, every row arriving no later than the pass whose mark
    passes it (files are published before their epoch's record)."""
    end = draw(st.integers(0, 60))
    kafka = sorted(draw(st.sets(st.integers(0, max(end - 1, 0)), max_size=end)) if end else [])
    rows = [o for o in kafka if draw(st.booleans()) or draw(st.booleans())]  # about a quarter missing
    rows += draw(st.lists(st.sampled_from(kafka), max_size=5)) if kafka else []  # doubled
    marks = sorted(draw(st.lists(st.integers(0, end), min_size=1, max_size=6))) + [end]
    passes: list[tuple[list[int], int]] = [([], m) for m in marks]
    for row in rows:
        last = next(i for i, m in enumerate(marks) if row < m)  # the pass whose mark passes it
        passes[draw(st.integers(0, last))][0].append(row)
    return kafka, rows, passes


@settings(max_examples=300, deadline=None)
@given(landings())
def test_incremental_passes_add_up_to_the_one_shot_audit(case: tuple[list[int], list[int], list[tuple[list[int], int]]]) -> None:
    kafka, rows, passes = case
    account = PartitionAccount()
    expected = np.asarray(kafka, np.int64)
    for new_rows, mark in passes:
        window = expected[(expected >= account.mark) & (expected < mark)]
        account, _ = advance(account, PartitionPass(np.asarray(new_rows, np.int64), mark, window))
    unique, counts = np.unique(np.asarray(rows, np.int64), return_counts=True)
    assert account.missing == len(set(kafka) - set(rows))
    assert account.duplicated == int(np.sum(counts - 1))
    assert account.present == len(set(kafka) & set(rows)) and account.unexpected == 0
    assert account.pending.size == 0 and account.mark == passes[-1][1]
