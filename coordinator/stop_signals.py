"""Ctrl-C and SIGTERM as a stop request: the one run-until-stopped loop of the project's foreground
commands (the dev servers' ``python -m`` entry points, the compose healthcheck driver, ``status
--watch``).

It lives on the lowest floor only because both the node side (``cluster``) and the dev tooling
(``devstack``) use it and neither may import the other; it has nothing to do with coordination.
Signal handlers can only be installed from the main thread: elsewhere the stop event is only set by
its owner.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["STOP_SIGNALS", "run_until_stopped", "stop_on_signals"]

#: the signals that ask a foreground command to stop
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """Within the block, Ctrl-C (SIGINT) and SIGTERM set the yielded event (``stop``, or a new one)
    instead of raising or killing, also where the parent ignores SIGINT (a background job). The
    previous handlers come back when the block ends, so a second Ctrl-C during the clean-up after it
    interrupts as usual. Off the main thread nothing is installed."""
    event = stop if stop is not None else threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda _signum, _frame: event.set())
    try:
        yield event
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_until_stopped(alive: Callable[[], bool] = lambda: True, poll_s: float = 1.0) -> None:
    """Block until Ctrl-C or SIGTERM, or until ``alive()`` (asked every ``poll_s`` seconds) is false:
    a foreground server's lifetime; the caller stops what it started once this returns."""
    with stop_on_signals() as stop:
        while alive() and not stop.wait(poll_s):
            pass
