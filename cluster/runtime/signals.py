"""How a node process stops on signals: the first SIGTERM or SIGINT asks the runtime for a planned
leave (its partitions drained to the other nodes), a second one stops it at once."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import Protocol

logger = logging.getLogger(__name__)

__all__ = ["stop_on_signals"]


class _Stoppable(Protocol):
    def request_stop(self, *, planned_leave: bool) -> None: ...


@contextlib.contextmanager
def stop_on_signals(runtime: _Stoppable) -> Iterator[None]:
    """While the body runs (on the running event loop), SIGTERM and SIGINT stop ``runtime``: a planned
    leave the first time, at once the next. The handlers are removed on the way out."""
    loop = asyncio.get_running_loop()
    received = 0

    def on_signal(signum: int) -> None:
        nonlocal received
        received += 1
        logger.info("signal %s received", signal.Signals(signum).name)
        runtime.request_stop(planned_leave=received == 1)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
