"""The runtime's inbox: coordinator events handed from the coordinator thread to the loop, in order,
and the wake-up that ends an idle wait (an event, a stop request, new topology, or source data)."""
from __future__ import annotations

import asyncio

from laminar_kafka.coordinator.base import CoordinatorEvent

__all__ = ["Inbox"]


class Inbox:
    """Bound to the running loop on creation (create it inside the loop)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[CoordinatorEvent] = asyncio.Queue()
        #: set by anything that gives the loop work
        self.wake = asyncio.Event()

    def deliver(self, event: CoordinatorEvent) -> None:
        """Coordinator thread -> loop; never blocks (dropped once the loop is closed: the node stops)."""
        try:
            self._loop.call_soon_threadsafe(self._put, event)
        except RuntimeError:  # the loop is closed: the node is shutting down
            pass

    def _put(self, event: CoordinatorEvent) -> None:
        self._events.put_nowait(event)
        self.wake.set()

    def next_event(self) -> CoordinatorEvent | None:
        """The next delivered event, or None when there is none."""
        return None if self._events.empty() else self._events.get_nowait()

    async def wait_for_work(self, data_ready: asyncio.Event | None, timeout: float) -> None:
        """Return once woken, once ``data_ready`` (the source's) is set, or after ``timeout``."""
        if self.wake.is_set():
            self.wake.clear()
            return
        waits = [asyncio.ensure_future(self.wake.wait())]
        if data_ready is not None:
            waits.append(asyncio.ensure_future(data_ready.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        self.wake.clear()
