"""`wait_until`: the one bounded polling helper of the dev tooling, the tests and the benches."""
from __future__ import annotations

import time
from collections.abc import Callable

from devstack.errors import WaitTimeout

__all__ = ["wait_until"]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, *, interval: float = 0.2) -> float:
    """Poll `predicate` every `interval` seconds until it returns true; return the seconds waited.

    The predicate is called at least once, and the deadline is checked only after a false answer,
    so a condition that holds at once never times out. Raises `WaitTimeout` (a `TimeoutError`)
    saying "<what> did not happen within <timeout>s" when the deadline passes first.
    An exception raised by the predicate propagates at once (that is how a caller aborts early).
    """
    started = time.monotonic()
    deadline = started + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - started
