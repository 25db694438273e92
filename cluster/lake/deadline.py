"""A deadline on the node's lake I/O: a call into the object store or the Iceberg catalog that does
not return within ``lake-io-timeout-ms`` ends the node in one line (exit 1).

Why it is needed: a blocking lake call can wait for ever. pyiceberg's REST catalog client sets no
socket timeout, and a connection whose peer became a black hole (a network partition, a container
given a new address) answers nothing and closes nothing; the kernel gives such a connection up after
many minutes, if ever. Meanwhile the node stays live in ZooKeeper, so nothing fails over: its
partitions make no progress. (pyarrow's own S3 client does give up on a silent store: with its
defaults it aborts a request after 3 s without a byte, three attempts.)

Why a process exit, not an exception: a thread blocked in a socket read cannot be interrupted from
Python, and the node could not stop cleanly around it anyway (every later sink call queues behind
it on the one sink thread, and so would the interpreter's exit). Every lake step is crash-safe
(staged files, idempotent publishes, the epoch property of an Iceberg commit), so ending the process
as a crash would is sound: its supervisor starts it again and it reconciles with the lake, as after
any sink failure. Its ZooKeeper session expires after ``session-timeout-ms`` and the other nodes take
its partitions meanwhile.

- :class:`LakeCalls`: which lake calls are running and since when. Every blocking lake call of the
  runtime runs inside :meth:`LakeCalls.timing` (the sink thread's calls through
  :meth:`LakeCalls.run`; the start-up reconciliation's own). Thread-safe, no I/O.
- :func:`overdue_call` (pure): the oldest running call, when it ran past the bound.
- :class:`LakeWatchdog`: a daemon thread that checks the calls every :func:`check_interval_s` and
  hands the first overdue one to its action, by default :func:`end_process` (the line, then exit 1).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "LakeCallOverdue", "LakeCalls", "LakeWatchdog", "RunningCall", "call_name", "check_interval_s", "end_process",
    "overdue_call",
]

T = TypeVar("T")

#: the watchdog looks at least this often (a smaller bound: ten times per bound)
MAX_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class RunningCall:
    """A lake call in progress: what it is, and when (monotonic seconds) it started."""

    what: str
    started: float


@dataclass(frozen=True)
class LakeCallOverdue:
    """A lake call that ran past the bound: the node stops with :meth:`message`."""

    what: str
    elapsed_s: float
    bound_s: float

    def message(self) -> str:
        """The one line the node stops with (no newline)."""
        return (f"lake I/O did not return within {self.bound_s:g} s ({self.what}, running for "
                f"{self.elapsed_s:.0f} s): the object store or the Iceberg catalog does not answer "
                f"(lake-io-timeout-ms); start the node again: it reconciles with the lake")


def overdue_call(running: Mapping[int, RunningCall], now: float, bound_s: float) -> LakeCallOverdue | None:
    """The oldest of the ``running`` calls when it has run for more than ``bound_s`` at ``now``;
    None when none has (or none runs). Pure."""
    if not running:
        return None
    oldest = min(running.values(), key=lambda call: call.started)
    elapsed = now - oldest.started
    return LakeCallOverdue(oldest.what, elapsed, bound_s) if elapsed > bound_s else None


def check_interval_s(bound_s: float) -> float:
    """How often the watchdog looks: a tenth of the bound, at most :data:`MAX_CHECK_INTERVAL_S`
    (an overdue call is seen at most that late). Pure."""
    if bound_s <= 0:
        raise ValueError(f"the lake I/O bound must be positive, got {bound_s:g}")
    return min(MAX_CHECK_INTERVAL_S, bound_s / 10.0)


def call_name(fn: Callable[..., Any]) -> str:
    """A readable name of a blocking call (``ParquetSink.seal``; a partial's function). Pure."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__)


class LakeCalls:
    """The lake calls running now (on any thread), for :class:`LakeWatchdog` and the
    ``laminar_lake_call_seconds`` gauge. ``clock``: monotonic seconds (tests pass their own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[int, RunningCall] = {}
        self._tokens = itertools.count()

    @contextlib.contextmanager
    def timing(self, what: str) -> Iterator[None]:
        """The block is a lake call named ``what``: it counts as running until the block ends
        (returning or raising)."""
        token = next(self._tokens)
        with self._lock:
            self._running[token] = RunningCall(what, self._clock())
        try:
            yield
        finally:
            with self._lock:
                del self._running[token]

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` as a lake call named :func:`call_name` of ``fn``."""
        with self.timing(call_name(fn)):
            return fn(*args)

    def running(self) -> dict[int, RunningCall]:
        """A copy of the calls running now."""
        with self._lock:
            return dict(self._running)

    def overdue(self, bound_s: float) -> LakeCallOverdue | None:
        """:func:`overdue_call` now."""
        return overdue_call(self.running(), self._clock(), bound_s)

    def age_s(self) -> float:
        """How long the oldest running call has run (0.0: none runs)."""
        running = self.running()
        if not running:
            return 0.0
        return max(0.0, self._clock() - min(call.started for call in running.values()))


def end_process(overdue: LakeCallOverdue) -> None:
    """The default action: ``error: <the line>`` on stderr, as the command line reports a node that
    failed, then exit 1 at once (``os._exit``: no clean-up may wait for the blocked thread)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"error: {overdue.message()}\n".encode())
    os._exit(1)


class LakeWatchdog:
    """A daemon thread that hands the first lake call running past ``bound_s`` to ``on_overdue``
    (once; then it stops looking). ``interval_s``: how often it looks (default
    :func:`check_interval_s`). Use :meth:`start` and :meth:`stop`, or ``with``."""

    def __init__(self, calls: LakeCalls, bound_s: float,
                 on_overdue: Callable[[LakeCallOverdue], None] = end_process,
                 interval_s: float | None = None) -> None:
        self.calls = calls
        self.bound_s = bound_s
        self.interval_s = check_interval_s(bound_s) if interval_s is None else interval_s
        self._on_overdue = on_overdue
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="laminar-lake-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop looking (idempotent); returns once the thread ended, or after 5 s when its action runs."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval_s):
            overdue = self.calls.overdue(self.bound_s)
            if overdue is not None:
                self._on_overdue(overdue)
                return

    def __enter__(self) -> LakeWatchdog:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
