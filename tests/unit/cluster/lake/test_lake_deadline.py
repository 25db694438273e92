"""The lake I/O deadline (`laminar_kafka.cluster.lake.deadline`): which call is overdue (pure), the
running calls, the watchdog thread, and the process it ends in one line although a thread is blocked."""
from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.deadline import (
    LakeCallOverdue,
    LakeCalls,
    LakeWatchdog,
    RunningCall,
    call_name,
    check_interval_s,
    overdue_call,
)
from laminar_kafka.cluster.lake.reconcile import OnLakeBehind
from laminar_kafka.cluster.lake.startup import StartFacts, reconcile_with_lake
from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.runtime.context import RuntimeExecutors
from laminar_kafka.devstack.processes import REPO_ROOT, node_environment
from laminar_kafka.errors import ConfigurationError


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- overdue_call, the message, the interval (pure) ------------------------------------------------


def test_no_call_running_is_never_overdue() -> None:
    assert overdue_call({}, 1e9, 1.0) is None


def test_a_call_is_overdue_only_past_the_bound() -> None:
    running = {1: RunningCall("ParquetSink.seal", 10.0)}
    assert overdue_call(running, 10.0, 120.0) is None
    assert overdue_call(running, 130.0, 120.0) is None  # exactly at the bound: not yet
    assert overdue_call(running, 130.5, 120.0) == LakeCallOverdue("ParquetSink.seal", 120.5, 120.0)


def test_the_oldest_running_call_is_the_overdue_one() -> None:
    running = {7: RunningCall("later", 50.0), 3: RunningCall("oldest", 20.0), 9: RunningCall("newest", 90.0)}
    overdue = overdue_call(running, 100.0, 60.0)
    assert overdue is not None and (overdue.what, overdue.elapsed_s) == ("oldest", 80.0)
    assert overdue_call(running, 100.0, 80.0) is None


def test_the_message_is_one_line_that_names_the_bound_the_call_and_the_way_back() -> None:
    message = LakeCallOverdue("EpochBarriers.publish_now", 121.4, 120.0).message()
    assert "\n" not in message and message == message.strip()
    assert message.startswith("lake I/O did not return within 120 s (EpochBarriers.publish_now, running for 121 s)")
    assert "lake-io-timeout-ms" in message
    assert message.endswith("start the node again: it reconciles with the lake")
    assert "within 0.5 s" in LakeCallOverdue("x", 0.7, 0.5).message()


@pytest.mark.parametrize("bound, interval", [(120.0, 1.0), (10.0, 1.0), (3.0, 0.3), (0.2, 0.02)])
def test_the_watchdog_looks_ten_times_per_bound_at_most_once_a_second(bound: float, interval: float) -> None:
    assert check_interval_s(bound) == pytest.approx(interval)


@pytest.mark.parametrize("bound", [0.0, -1.0])
def test_a_bound_that_is_not_positive_is_refused(bound: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        check_interval_s(bound)


class _Sink:
    def seal(self, epoch: int) -> None:
        pass

    def __call__(self) -> None:
        pass


def _recover(root: str, *, latest_epoch: int) -> None:
    pass


def test_a_call_is_named_by_its_function() -> None:
    sink = _Sink()
    assert call_name(sink.seal) == "_Sink.seal"
    assert call_name(_recover) == "_recover"
    assert call_name(functools.partial(_recover, "root", latest_epoch=3)) == "_recover"
    assert call_name(functools.partial(functools.partial(sink.seal), 1)) == "_Sink.seal"
    assert call_name(sink) == "_Sink"  # a callable object without a __qualname__ of its own
    assert call_name(lambda: None).endswith("<lambda>")


# -- LakeCalls -------------------------------------------------------------------------------------


def test_a_timed_block_runs_until_it_ends_returning_or_raising() -> None:
    clock = FakeClock(100.0)
    calls = LakeCalls(clock)
    assert calls.running() == {} and calls.age_s() == 0.0 and calls.overdue(1.0) is None
    with calls.timing("reading the lake's facts"):
        assert [c.what for c in calls.running().values()] == ["reading the lake's facts"]
        clock.now = 104.0
        assert calls.age_s() == 4.0
        overdue = calls.overdue(3.0)
        assert overdue is not None and overdue.what == "reading the lake's facts" and overdue.elapsed_s == 4.0
    assert calls.running() == {} and calls.age_s() == 0.0
    with pytest.raises(OSError), calls.timing("publish"):
        raise OSError("connection reset")
    assert calls.running() == {}


def test_calls_on_two_threads_are_both_running_and_the_age_is_the_oldest_one() -> None:
    clock = FakeClock(0.0)
    calls = LakeCalls(clock)
    with calls.timing("first"):
        clock.now = 5.0
        with calls.timing("second"):
            assert sorted(c.what for c in calls.running().values()) == ["first", "second"]
            clock.now = 8.0
            assert calls.age_s() == 8.0
        assert [c.what for c in calls.running().values()] == ["first"]


def test_run_times_the_call_under_its_name_and_returns_its_value() -> None:
    calls = LakeCalls()
    seen: list[list[str]] = []

    def seal(epoch: int) -> str:
        seen.append([c.what for c in calls.running().values()])
        return f"sealed {epoch}"

    assert calls.run(seal, 4) == "sealed 4"
    assert seen == [["test_run_times_the_call_under_its_name_and_returns_its_value.<locals>.seal"]]
    assert calls.running() == {}


# -- LakeWatchdog ----------------------------------------------------------------------------------


def test_the_watchdog_hands_the_overdue_call_to_its_action_once_then_stops_looking() -> None:
    clock = FakeClock(0.0)
    calls = LakeCalls(clock)
    reported: list[LakeCallOverdue] = []
    fired = threading.Event()

    def action(overdue: LakeCallOverdue) -> None:
        reported.append(overdue)
        fired.set()

    watchdog = LakeWatchdog(calls, 30.0, action, interval_s=0.005)
    with calls.timing("ParquetSink.seal"), watchdog:
        clock.now = 30.5
        assert fired.wait(10), "the watchdog did not report the overdue call"
        watchdog._thread.join(10)  # it stops looking after its action
        assert not watchdog._thread.is_alive()
    assert reported == [LakeCallOverdue("ParquetSink.seal", 30.5, 30.0)]


def test_a_stopped_watchdog_ends_its_thread() -> None:
    watchdog = LakeWatchdog(LakeCalls(), 120.0, lambda overdue: None)
    assert watchdog.interval_s == 1.0
    watchdog.start()
    watchdog.stop()
    assert not watchdog._thread.is_alive()
    watchdog.stop()  # idempotent


#: a node's sink thread blocked in a lake call for ever (a non-daemon pool thread, which a normal
#: interpreter exit would wait for), under a watchdog with the default action
_BLOCKED_NODE = """
import concurrent.futures, threading, time
from laminar_kafka.cluster.lake.deadline import LakeCalls, LakeWatchdog
calls = LakeCalls()
blocked = threading.Event()
def hung_seal():
    with calls.timing("ParquetSink.seal"):
        blocked.set()
        threading.Event().wait()  # a socket read that never returns
pool = concurrent.futures.ThreadPoolExecutor(1)
pool.submit(hung_seal)
blocked.wait()
LakeWatchdog(calls, 0.3).start()
print("blocked", flush=True)
threading.Event().wait()  # the event loop goes on meanwhile
"""


def test_the_default_action_ends_the_process_in_one_line_exit_1_although_a_thread_is_blocked() -> None:
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", _BLOCKED_NODE], cwd=REPO_ROOT, env=node_environment(),
                           capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert child.returncode == 1, child.stderr
    assert child.stdout == "blocked\n"
    lines = child.stderr.splitlines()
    assert len(lines) == 1, child.stderr
    assert lines[0].startswith("error: lake I/O did not return within 0.3 s (ParquetSink.seal, running for ")
    assert lines[0].endswith("it reconciles with the lake")
    assert elapsed < 30, f"the process took {elapsed:.1f} s to end"


# -- where the runtime times its lake calls -----------------------------------------------------------


async def test_every_sink_call_of_the_runtime_is_a_running_lake_call_while_it_runs() -> None:
    executors = RuntimeExecutors()
    calls = executors.lake_calls
    release = threading.Event()
    seen: list[list[str]] = []

    def write() -> None:
        seen.append([c.what for c in calls.running().values()])
        release.wait(10)

    def seal(epoch: int) -> int:
        seen.append([c.what for c in calls.running().values()])
        return epoch

    await executors.write_behind(write)
    release.set()
    assert await executors.in_sink(seal, 3) == 3
    assert [names[0].rsplit(".", 1)[-1] for names in seen] == ["write", "seal"]
    assert calls.running() == {}

    def failing() -> None:
        raise OSError("reset")

    with pytest.raises(OSError):
        await executors.in_sink(failing)
    assert calls.running() == {}  # a call that raised is over
    await executors.shutdown()


class _Coordinator:
    """What reconcile_with_lake reads of a coordinator: no manifest yet."""

    @contextlib.contextmanager
    def reconcile_lock(self) -> Iterator[None]:
        yield

    def latest_manifest(self) -> None:
        return None


class _SilentLake:
    """A lake whose read fails after recording which lake calls ran while it read."""

    def __init__(self, calls: LakeCalls) -> None:
        self.calls = calls
        self.seen: list[str] = []

    def read_facts(self, pipeline: str, topics: object) -> object:
        self.seen = [c.what for c in self.calls.running().values()]
        raise OSError("the catalog does not answer")


def test_the_start_up_reconciliation_reads_the_lake_as_a_timed_lake_call() -> None:
    calls = LakeCalls()
    lake = _SilentLake(calls)
    facts = StartFacts("p", 1, ["t"], {"t": "id"}, OnLakeBehind.REWIND)
    with pytest.raises(RuntimeFailure, match="the lake cannot be read"):
        reconcile_with_lake(_Coordinator(), lake, facts, lambda manifest: None, calls)  # type: ignore[arg-type]
    assert lake.seen == ["reading the lake's facts"]
    assert calls.running() == {}


# -- the setting and the metric ----------------------------------------------------------------------


def test_lake_io_timeout_ms_defaults_to_two_minutes_and_must_be_positive() -> None:
    base = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}
    assert settings_from(base, {}, {}).lake_io_timeout_ms == 120_000
    assert settings_from(base, {"LAMINAR_LAKE_IO_TIMEOUT_MS": "3000"}, {}).lake_io_timeout_ms == 3000
    assert settings_from(base, {}, {"lake-io-timeout-ms": "500"}).lake_io_timeout_ms == 500
    with pytest.raises(ConfigurationError, match="lake-io-timeout-ms must be >= 1"):
        settings_from(base, {}, {"lake-io-timeout-ms": "0"})


def test_the_running_calls_age_is_exported_at_each_scrape() -> None:
    metrics = NodeMetrics(4)
    sample = metrics.registry.get_sample_value
    assert sample("laminar_lake_call_seconds", {"node": "4"}) == 0.0
    clock = FakeClock(10.0)
    calls = LakeCalls(clock)
    metrics.watch_lake_calls(calls.age_s)
    with calls.timing("publish"):
        clock.now = 17.5
        assert sample("laminar_lake_call_seconds", {"node": "4"}) == 7.5
    assert sample("laminar_lake_call_seconds", {"node": "4"}) == 0.0
