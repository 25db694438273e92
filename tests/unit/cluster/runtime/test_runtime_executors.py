"""The sink thread's write behind: the loop goes on while a batch is written; every other sink call
waits for that write and raises its error, so nothing (a seal) runs past a failed write."""
from __future__ import annotations

import asyncio
import threading

import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.runtime.context import RuntimeExecutors


async def test_a_write_behind_runs_while_the_loop_goes_on_and_calls_after_it_wait_for_it() -> None:
    executors = RuntimeExecutors()
    release = threading.Event()
    order: list[str] = []

    def write() -> None:
        release.wait(5)
        order.append("write")

    await executors.write_behind(write)  # returns although the write is blocked
    order.append("loop")
    release.set()
    await executors.in_sink(lambda: order.append("seal"))
    assert order == ["loop", "write", "seal"]
    await executors.shutdown()


async def test_a_failed_write_is_raised_once_and_the_next_sink_call_does_not_run() -> None:
    executors = RuntimeExecutors()
    ran: list[str] = []

    def failing_write() -> None:
        raise SinkError("disk full")

    await executors.write_behind(failing_write)
    with pytest.raises(SinkError, match="disk full"):
        await executors.in_sink(lambda: ran.append("seal"))
    assert ran == []  # the seal did not run past the failed write
    await executors.in_sink(lambda: ran.append("later"))  # raised once; the sink is usable again
    assert ran == ["later"]
    await executors.write_behind(failing_write)
    with pytest.raises(SinkError):
        await executors.write_behind(lambda: ran.append("next write"))
    assert ran == ["later"]
    await executors.shutdown()


async def test_a_cancelled_waiter_leaves_the_write_to_the_next_one() -> None:
    executors = RuntimeExecutors()
    release = threading.Event()

    def write() -> None:
        release.wait(5)
        raise SinkError("late failure")

    await executors.write_behind(write)
    waiter = asyncio.create_task(executors.sink_settled())
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    with pytest.raises(SinkError, match="late failure"):
        await executors.in_sink(lambda: None)
    await executors.shutdown()


async def test_shutdown_reports_a_failed_last_write_without_raising(caplog: pytest.LogCaptureFixture) -> None:
    executors = RuntimeExecutors()

    def failing_write() -> None:
        raise SinkError("disk full")

    await executors.write_behind(failing_write)
    await executors.shutdown()
    assert "the last sink write failed" in caplog.text
