"""The node's probe snapshot: published from its event loop, read by the HTTP endpoints' threads.

:class:`ProbeFeed` ticks on the node's event loop every :data:`TICK_S`: each tick is the loop's
heartbeat and swaps in a new frozen :class:`~laminar_kafka.cluster.runtime.probes.NodeSnapshot` of
the runtime's state (one reference assignment: a reader sees the old snapshot or the new one, never a
mix). The coordinator session is followed from the coordinator's own events (their thread), with
the time each arrived. :meth:`health` and :meth:`readiness` are the pure verdicts of
:mod:`~laminar_kafka.cluster.runtime.probes` on the latest snapshot, callable from any thread. A stop
requested through :meth:`request_stop` (the signal handlers) is published at once. A snapshot that
cannot be taken does not stop the ticking: the heartbeat goes on with the last snapshot's state, and
the failure is logged once per kind.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator

from laminar_kafka.cluster.runtime.node_runtime import NodeRuntime
from laminar_kafka.cluster.runtime.probes import (
    Activity,
    NodeSnapshot,
    ProbeSettings,
    SessionView,
    Verdict,
    health,
    readiness,
)
from laminar_kafka.coordinator.base import CoordinatorEvent, SessionStateChanged

__all__ = ["TICK_S", "ProbeFeed"]

logger = logging.getLogger(__name__)

#: seconds between two heartbeats (and snapshots) of the event loop
TICK_S = 0.5


class ProbeFeed:
    """The latest :class:`NodeSnapshot` of ``runtime`` (subscribes to its coordinator's events)."""

    def __init__(self, runtime: NodeRuntime, settings: ProbeSettings) -> None:
        self.settings = settings
        self._runtime = runtime
        #: replaced whole on each session event (from the coordinator's thread)
        self._session = SessionView()
        self._snapshot = NodeSnapshot(time.monotonic())
        runtime.coordinator.subscribe(self._on_event)

    def _on_event(self, event: CoordinatorEvent) -> None:
        if isinstance(event, SessionStateChanged):
            self._session = self._session.moved_to(event.state, time.monotonic())

    def snapshot(self) -> NodeSnapshot:
        """The latest published snapshot (any thread)."""
        return self._snapshot

    def publish(self) -> None:
        """Take and publish a snapshot of the runtime now (on the event loop's thread)."""
        runtime = self._runtime
        owned = runtime.assignment.owned
        generation = runtime.generations.current
        if generation is None:
            activity = Activity.NO_GENERATION
        else:
            activity = Activity.READING if runtime.generations.held_since is None else Activity.HELD
        snapshot = runtime.assignment.snapshot
        self._snapshot = NodeSnapshot(
            taken_at=time.monotonic(),
            phase=runtime.phase,
            session=self._session,
            assignment_version=snapshot.version if snapshot is not None else None,
            owned_partitions=len(owned) if owned is not None else len(runtime.topology.partitions),
            activity=activity,
            leave_requested_at=runtime.leave_requested_at,
        )

    def request_stop(self, *, planned_leave: bool) -> None:
        """``runtime.request_stop``, then a snapshot at once (on the loop's thread, e.g. from a signal
        handler): ``/readyz`` answers 503 from the stop request on, even when the node is gone before
        the next tick."""
        self._runtime.request_stop(planned_leave=planned_leave)
        self.publish()

    def health(self) -> Verdict:
        return health(self._snapshot, time.monotonic(), self.settings)

    def readiness(self) -> Verdict:
        return readiness(self._snapshot, time.monotonic(), self.settings)

    def tick(self, failures: set[str]) -> None:
        """One heartbeat: :meth:`publish`; when that raises, the last snapshot again with ``taken_at``
        now (the loop turns, so ``/healthz`` must not say it stalled), and a warning the first time
        a failure of its kind (exception type and message) is in ``failures``, which it adds to."""
        try:
            self.publish()
        except Exception as exc:  # noqa: BLE001 - the heartbeat must outlive a failed snapshot
            self._snapshot = dataclasses.replace(self._snapshot, taken_at=time.monotonic())
            kind = f"{type(exc).__name__}: {exc}"
            if kind not in failures:
                failures.add(kind)
                logger.warning("probe snapshot failed, the heartbeat goes on with the last state "
                               "(logged once per kind of failure): %s", kind)

    async def run(self) -> None:
        """Tick (:meth:`tick`) every :data:`TICK_S` until cancelled; a failed snapshot does not end it."""
        failures: set[str] = set()
        while True:
            self.tick(failures)
            await asyncio.sleep(TICK_S)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ProbeFeed]:
        """Tick while the body runs (on the running event loop); the ticker ending before the body
        (it should never) is logged as an error: ``/healthz`` turns unhealthy soon after."""
        task = asyncio.create_task(self.run())
        task.add_done_callback(_report_unexpected_end)
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _report_unexpected_end(task: asyncio.Task[None]) -> None:
    """Log the probe ticker's end unless it was cancelled (the only expected end)."""
    if task.cancelled():
        return
    error = task.exception()
    logger.error("the probe ticker stopped: %s; /healthz will report a stalled event loop",
                 f"{type(error).__name__}: {error}" if error is not None else "it returned")
