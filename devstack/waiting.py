"""Bounded waiting, the one implementation the dev tooling, the tests and the benches use.

- :func:`wait_until`: poll a condition from a thread;
- :func:`await_until`: the same from a coroutine (never blocks the event loop);
- :class:`EventLog`: a thread-safe log of events (for example a coordinator's) that can be awaited.

Every wait is bounded and raises :class:`~laminar_kafka.devstack.errors.WaitTimeout` (a ``TimeoutError``) naming
what did not happen. This module does no I/O.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from laminar_kafka.devstack.errors import WaitTimeout

__all__ = ["EventLog", "await_until", "wait_until"]

E = TypeVar("E")
T = TypeVar("T")


def wait_until(predicate: Callable[[], object], timeout: float, what: str, *, interval: float = 0.2) -> float:
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


async def await_until(
    predicate: Callable[[], object], timeout: float, what: str, *, interval: float = 0.005
) -> float:
    """:func:`wait_until` for coroutines: the loop sleeps between polls, so other tasks run."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    while not predicate():
        if loop.time() >= deadline:
            raise WaitTimeout(f"{what} did not happen within {timeout:.0f}s")
        await asyncio.sleep(interval)
    return loop.time() - started


class EventLog(Generic[T]):
    """Events appended from any thread (``append`` fits a subscriber callback), awaited by type."""

    def __init__(self) -> None:
        self.events: list[T] = []
        self._cond = threading.Condition()

    def append(self, event: T) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(
        self, kind: type[E], predicate: Callable[[E], bool] = lambda _e: True, timeout: float = 15.0, after: int = 0
    ) -> E:
        """The first event of `kind` (at index >= `after`) satisfying `predicate`; raises
        `WaitTimeout` with the last events seen when none arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events[after:]:
                    if isinstance(event, kind) and predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(f"no matching {kind.__name__} within {timeout:g}s; saw {self.events[-5:]}")
                self._cond.wait(remaining)

    def of(self, kind: type[E]) -> list[E]:
        """The events of `kind` so far, in order."""
        with self._cond:
            return [e for e in self.events if isinstance(e, kind)]
