"""A failure repeated every 200 ms is one WARNING, one per interval while it lasts, and one INFO at its end."""
from __future__ import annotations

import logging

import pytest

from laminar_kafka.coordinator.engine.failure_streak import FailureStreak


def test_a_streak_logs_its_start_one_line_per_interval_and_its_end(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    streak = FailureStreak(logging.getLogger("test.streak"), "leader pass", interval_s=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="test.streak"):
        streak.succeeded()  # no streak: silent
        for _ in range(300):  # 60 s of failures, one every 200 ms
            streak.failed(OSError(28, "No space left on device"))
            now[0] += 0.2
        streak.succeeded()
        streak.succeeded()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "WARNING", "INFO"]  # at 0 s, 30 s; the end at 60 s
    assert lines[0][1].startswith("leader pass failed: OSError(28, 'No space left on device')")
    assert lines[1][1].startswith("leader pass still failing: 151 failures in 30s")
    assert lines[2][1] == "leader pass works again after 300 failure(s) in 60.0s"
    assert streak.failures == 0


def test_a_new_streak_after_a_success_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    streak = FailureStreak(logging.getLogger("test.streak2"), "leader pass", clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="test.streak2"):
        streak.failed(RuntimeError("a"))
        streak.succeeded()
        streak.failed(RuntimeError("b"))
    assert [r.getMessage() for r in caplog.records] == [
        "leader pass failed: RuntimeError('a') (retrying)", "leader pass failed: RuntimeError('b') (retrying)"]
