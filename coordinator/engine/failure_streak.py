"""A failure that repeats every fraction of a second, logged as a streak, not line by line.

The leader retries a failed pass every 200 ms. While the cause lasts (ZooKeeper unreachable, the
embedded state directory's disk full) a line per failure is five lines a second, and the line that
says the cause went away was missing. :class:`FailureStreak` logs the first failure of a streak at
WARNING, then one WARNING every ``interval_s`` with the count and the latest error, and one INFO
when a pass works again. The clock is injected; no I/O but the logger.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["FailureStreak"]


class FailureStreak:
    """Consecutive failures of one repeated action (``what``), logged on ``logger``. One thread."""

    def __init__(self, logger: logging.Logger, what: str, *, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._what = what
        self._interval_s = interval_s
        self._clock = clock
        self.failures = 0
        self._started = 0.0
        self._logged = 0.0

    def failed(self, exc: BaseException) -> None:
        """One more failure: logged when it starts a streak, then at most once per interval."""
        now = self._clock()
        self.failures += 1
        if self.failures == 1:
            self._started = self._logged = now
            self._logger.warning("%s failed: %r (retrying)", self._what, exc)
        elif now - self._logged >= self._interval_s:
            self._logged = now
            self._logger.warning("%s still failing: %d failures in %.0fs, the latest %r",
                                 self._what, self.failures, now - self._started, exc)

    def succeeded(self) -> None:
        """The action worked: ends a streak (logged when there was one)."""
        if self.failures:
            self._logger.info("%s works again after %d failure(s) in %.1fs",
                              self._what, self.failures, self._clock() - self._started)
            self.failures = 0
