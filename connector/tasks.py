"""Tracking the threads a connector starts, so a retired generation never overlaps the next one."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["ConnectorTaskTracker"]

_T = TypeVar("_T")
#: How often :meth:`ConnectorTaskTracker.wait` looks at its threads.
_TRACKER_POLL_S = 0.01


class ConnectorTaskTracker:
    """Observes the threads a connector starts, which may outlive the connector value.

    A connector registers every thread it starts (:meth:`track`, or :meth:`spawn`, which starts a
    tracked thread for one blocking call). After :meth:`SourceConnector.close` the runtime awaits
    :meth:`wait` before it starts the next generation, so a retired generation's threads (and the
    clients they own) never overlap its successor. Thread-safe.
    """

    def __init__(self, threads: Iterable[threading.Thread] = ()) -> None:
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = list(threads)

    def track(self, thread: threading.Thread) -> None:
        """Track ``thread``. Pre: it is started before anyone may observe :meth:`is_terminated`
        (an unstarted thread counts as terminated)."""
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def spawn(self, name: str, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        """Run ``fn()`` on a new tracked daemon thread; its result (or error) lands in the future.

        Cancelling the future does not stop the thread; the tracker keeps reporting it until it ends.
        """
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller
                future.set_exception(exc)
            else:
                future.set_result(result)

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()
        return future

    def is_terminated(self) -> bool:
        """True iff every tracked thread has ended."""
        with self._lock:
            threads = list(self._threads)
        return not any(t.is_alive() for t in threads)

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until every tracked thread has ended (True) or ``timeout`` seconds passed (False).

        Threads tracked while waiting are waited for too. Never blocks the event loop.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.is_terminated():
            if deadline is not None and loop.time() >= deadline:
                return False
            await asyncio.sleep(_TRACKER_POLL_S)
        return True
