"""What every part of the node runtime shares: the coordinator, the sink, the options, the metrics,
and the executors that keep blocking work off the event loop. (The lake output is the epochs'
alone: :class:`~laminar_kafka.cluster.runtime.epochs.EpochBarriers` publishes into it.)

Three executors, one per kind of blocking work, so one kind never starves another:

- ``control`` (2 threads): coordinator calls (they may block on ZooKeeper);
- ``metadata`` (1 thread): Kafka metadata reads (topology, watermarks): slow while Kafka is
  unreachable, so they never hold a thread the coordinator calls need;
- ``sink`` (1 thread): writes, seals and publishes, in order. A batch's write runs behind the
  loop (:meth:`RuntimeExecutors.write_behind`): the next batch is polled and built while the
  previous one is encoded, and every other sink call first waits for that write and raises its
  error, so a seal never runs past a failed write. Each sink call is a lake call of
  :attr:`RuntimeExecutors.lake_calls`, under the lake I/O deadline (:mod:`laminar_kafka.cluster.lake.deadline`).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from laminar_kafka.cluster.lake.deadline import LakeCalls
from laminar_kafka.cluster.lake.outputs import StagingSink
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.runtime.state import RuntimeOptions
from laminar_kafka.coordinator.base import Coordinator

__all__ = ["RuntimeContext", "RuntimeExecutors"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RuntimeExecutors:
    """The runtime's thread pools; the ``in_*`` coroutines run a blocking call in one of them."""

    def __init__(self) -> None:
        self._control = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="laminar-control")
        self._metadata = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="laminar-metadata")
        self._sink = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="laminar-sink")
        #: the write handed to :meth:`write_behind` and not yet waited for
        self._behind: asyncio.Future[Any] | None = None
        #: the sink thread's calls in progress (and the start-up reconciliation's), for the lake I/O deadline
        self.lake_calls = LakeCalls()

    @staticmethod
    async def _run(executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args))

    async def in_control(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run(self._control, fn, *args)

    async def in_metadata(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._run(self._metadata, fn, *args)

    async def in_sink(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the sink thread once the write behind (if any) is done; raises that
        write's error instead of running ``fn`` when it failed."""
        await self.sink_settled()
        return await self._run(self._sink, self.lake_calls.run, fn, *args)

    async def write_behind(self, fn: Callable[..., Any], *args: Any) -> None:
        """Start ``fn`` on the sink thread and return without waiting for it (after waiting for
        the previous one, whose error it raises). The sink thread runs one call at a time in
        order, so anything submitted later runs after it; :meth:`in_sink` waits for it first."""
        await self.sink_settled()
        self._behind = asyncio.get_running_loop().run_in_executor(
            self._sink, functools.partial(self.lake_calls.run, fn, *args))

    async def sink_settled(self) -> None:
        """Wait for the write behind and raise its error (once). A cancelled waiter leaves the
        write to be waited for by the next caller."""
        behind = self._behind
        if behind is None:
            return
        try:
            await asyncio.shield(behind)
        finally:
            if behind.done():
                self._behind = None

    async def shutdown(self) -> None:
        """Stop the pools; waits (off the loop) for the last sink write, which runs one at a time."""
        self._control.shutdown(wait=False)
        self._metadata.shutdown(wait=False)
        try:
            await self.sink_settled()
        except Exception:  # the node is stopping; the error was the write's own
            logger.warning("the last sink write failed while the node stopped", exc_info=True)
        await asyncio.get_running_loop().run_in_executor(None, self._sink.shutdown, True)


@dataclass(frozen=True)
class RuntimeContext:
    """The collaborators of one node's runtime (shared by its parts; none of them owns another)."""

    coordinator: Coordinator
    sink: StagingSink
    options: RuntimeOptions
    metrics: NodeMetrics
    executors: RuntimeExecutors

    @property
    def source_identity(self) -> str:
        return self.options.source_identity

    @property
    def node_label(self) -> str:
        return self.metrics.node
