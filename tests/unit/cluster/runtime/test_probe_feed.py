"""The probe snapshot a running NodeRuntime publishes, and the node's HTTP endpoints answering from it
(an in-memory coordinator and source; the server on a free loopback port)."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.node_server import REQUEST_TIMEOUT_S, serve_node
from laminar_kafka.cluster.runtime.probe_feed import ProbeFeed
from laminar_kafka.cluster.runtime.probes import Activity, ProbeSettings, Verdict, health
from laminar_kafka.cluster.runtime.state import RuntimePhase
from laminar_kafka.coordinator.base import SessionState, SessionStateChanged
from tests.unit.cluster.fakes import FakeCoordinator, wait_for
from tests.unit.cluster.runtime.test_runtime import make_runtime, start_running, stop_running

SETTINGS = ProbeSettings(zookeeper=True, session_timeout_s=10.0)


def get(port: int, path: str) -> tuple[int, str]:
    """The status and body of ``GET path`` (503 and 404 included)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@dataclass
class FixedProbes:
    healthy: Verdict
    ready: Verdict

    def health(self) -> Verdict:
        return self.healthy

    def readiness(self) -> Verdict:
        return self.ready


@pytest.fixture
def served() -> Iterator[tuple[int, FixedProbes, NodeMetrics]]:
    metrics = NodeMetrics(4)
    probes = FixedProbes(Verdict(True, "ok"), Verdict(False, "starting: joining the pipeline"))
    metrics.watch_probes(probes)
    endpoints = serve_node(0, "127.0.0.1", metrics.registry, probes)
    try:
        yield endpoints.port, probes, metrics
    finally:
        endpoints.stop()


def test_the_endpoints_answer_the_verdicts_and_the_metrics(
    served: tuple[int, FixedProbes, NodeMetrics], capfd: pytest.CaptureFixture[str]
) -> None:
    port, probes, _ = served
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz") == (503, "starting: joining the pipeline\n")
    status, body = get(port, "/metrics")
    assert status == 200
    assert 'laminar_node_healthy{node="4"} 1.0' in body and 'laminar_node_ready{node="4"} 0.0' in body
    probes.ready = Verdict(True, "ready: assignment version 3, 2 partition(s)")
    probes.healthy = Verdict(False, "zookeeper session suspended for 12.3 s (timeout 10 s)")
    assert get(port, "/readyz") == (200, "ready: assignment version 3, 2 partition(s)\n")
    assert get(port, "/healthz") == (503, "zookeeper session suspended for 12.3 s (timeout 10 s)\n")
    body = get(port, "/metrics")[1]
    assert 'laminar_node_healthy{node="4"} 0.0' in body and 'laminar_node_ready{node="4"} 1.0' in body
    assert get(port, "/healthz?verbose=1")[0] == 503  # a query string is ignored
    assert get(port, "/other")[0] == 404
    out, err = capfd.readouterr()
    assert err == "" and out == ""  # quiet: no line per request


def test_a_server_without_probes_answers_503() -> None:
    endpoints = serve_node(0, "127.0.0.1", NodeMetrics(5).registry, None)
    try:
        port = endpoints.port
        assert get(port, "/healthz") == (503, "probes not wired in this process\n")
        assert get(port, "/readyz")[0] == 503
        assert get(port, "/metrics")[0] == 200
    finally:
        endpoints.stop()


def test_a_taken_port_raises_oserror(served: tuple[int, FixedProbes, NodeMetrics]) -> None:
    with pytest.raises(OSError):
        serve_node(served[0], "127.0.0.1", NodeMetrics(6).registry, None)


def test_a_silent_client_is_dropped_and_the_server_still_answers(capfd: pytest.CaptureFixture[str]) -> None:
    endpoints = serve_node(0, "127.0.0.1", NodeMetrics(7).registry, None, request_timeout_s=1.0)
    try:
        with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as idle:
            started = time.monotonic()
            assert idle.recv(1024) == b""  # the server closed the connection: nothing was sent
            assert time.monotonic() - started < 9
        assert get(endpoints.port, "/metrics")[0] == 200
    finally:
        endpoints.stop()
    assert capfd.readouterr().err == ""  # the timeout is not a line on stderr


def test_the_default_request_timeout_is_ten_seconds() -> None:
    endpoints = serve_node(0, "127.0.0.1", NodeMetrics(8).registry, None)
    try:
        assert REQUEST_TIMEOUT_S == 10.0
        with socket.create_connection(("127.0.0.1", endpoints.port), timeout=10) as idle:
            idle.settimeout(1.0)
            with pytest.raises(TimeoutError):  # still open after a second: the bound is not tiny
                idle.recv(1024)
    finally:
        endpoints.stop()


async def test_the_feed_follows_a_runtime_from_start_to_stop(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    runtime = make_runtime(tmp_path, coordinator)
    feed = ProbeFeed(runtime, SETTINGS)
    runtime.metrics.watch_probes(feed)
    sample = runtime.metrics.registry.get_sample_value
    assert feed.snapshot().phase is RuntimePhase.JOINING
    assert feed.health().ok and feed.readiness() == Verdict(False, "starting: joining the pipeline")
    async with feed.running():
        task = await start_running(runtime, 10)
        await wait_for(lambda: feed.readiness().ok)
        snapshot = feed.snapshot()
        assert snapshot.phase is RuntimePhase.RUNNING and snapshot.activity is Activity.READING
        assert snapshot.assignment_version == 1 and snapshot.owned_partitions == 2  # embedded: every partition
        assert sample("laminar_node_ready", {"node": "1"}) == 1.0
        assert sample("laminar_node_healthy", {"node": "1"}) == 1.0

        coordinator.emit(SessionStateChanged(SessionState.SUSPENDED))  # heard at once, published next tick
        await wait_for(lambda: feed.snapshot().session.state is SessionState.SUSPENDED)
        away_since = feed.snapshot().session.away_since
        assert away_since is not None and feed.health().ok  # away for less than the timeout
        coordinator.emit(SessionStateChanged(SessionState.CONNECTED))
        await wait_for(lambda: feed.snapshot().session.away_since is None)

        await stop_running(runtime, task)
        await wait_for(lambda: feed.snapshot().phase is RuntimePhase.STOPPING)
        assert feed.readiness() == Verdict(False, "stopping")
        assert sample("laminar_node_ready", {"node": "1"}) == 0.0
    taken = feed.snapshot().taken_at
    await asyncio.sleep(0.6)  # the ticker stopped with the context: no snapshot after it
    assert feed.snapshot().taken_at == taken


async def test_a_loop_that_stops_turning_turns_the_node_unhealthy(tmp_path: Path) -> None:
    """Deterministic under load: the verdicts at a chosen time are the pure ``health``; the blocking
    sleep is longer than ``loop_stale_s``, so no scheduling delay can make the stall look shorter."""
    runtime = make_runtime(tmp_path, FakeCoordinator())
    settings = ProbeSettings(zookeeper=False, session_timeout_s=10.0, loop_stale_s=0.3)
    feed = ProbeFeed(runtime, settings)
    started = feed.snapshot().taken_at
    async with feed.running():
        await wait_for(lambda: feed.snapshot().taken_at > started)  # the ticker published
        ticked = feed.snapshot()
        assert health(ticked, ticked.taken_at + 0.29, settings).ok
        stale = health(ticked, ticked.taken_at + 0.31, settings)
        assert not stale.ok and stale.reason.startswith("event loop stalled")
        stalled_at = feed.snapshot().taken_at
        time.sleep(0.4)  # blocks the event loop: no tick, and at least 0.4 s since the last one
        assert not feed.health().ok and feed.health().reason.startswith("event loop stalled")
        await wait_for(lambda: feed.snapshot().taken_at > stalled_at)  # the loop turns again: a new tick
        again = feed.snapshot()
        assert health(again, again.taken_at, settings).ok


def test_a_failed_snapshot_keeps_the_heartbeat_and_is_logged_once_per_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    feed = ProbeFeed(make_runtime(tmp_path, FakeCoordinator()), SETTINGS)
    feed.publish()
    before = feed.snapshot()
    errors = iter([RuntimeError("assignment gone"), RuntimeError("assignment gone"), KeyError("p"),
                   RuntimeError("assignment gone")])

    def failing_publish() -> None:
        raise next(errors)

    monkeypatch.setattr(feed, "publish", failing_publish)
    failures: set[str] = set()
    taken: list[float] = []
    with caplog.at_level(logging.WARNING, logger="laminar_kafka.cluster.runtime.probe_feed"):
        for _ in range(4):
            feed.tick(failures)
            taken.append(feed.snapshot().taken_at)
    assert taken == sorted(taken) and taken[0] >= before.taken_at
    assert dataclasses.replace(feed.snapshot(), taken_at=before.taken_at) == before  # the last state, a new heartbeat
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "RuntimeError: assignment gone" in warnings[0] and "KeyError: 'p'" in warnings[1]


async def test_the_ticker_outlives_failing_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feed = ProbeFeed(make_runtime(tmp_path, FakeCoordinator()), SETTINGS)

    def failing_publish() -> None:
        raise RuntimeError("no snapshot")

    monkeypatch.setattr(feed, "publish", failing_publish)
    async with feed.running():
        for _ in range(3):  # three heartbeats in a row, each after a failed snapshot
            last = feed.snapshot().taken_at
            await wait_for(lambda last=last: feed.snapshot().taken_at > last)


async def test_a_ticker_that_ends_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    feed = ProbeFeed(make_runtime(tmp_path, FakeCoordinator()), SETTINGS)
    ended = asyncio.Event()

    async def broken_run() -> None:
        ended.set()
        raise SystemError("ticker broke")

    monkeypatch.setattr(feed, "run", broken_run)
    with caplog.at_level(logging.ERROR, logger="laminar_kafka.cluster.runtime.probe_feed"):
        async with feed.running():
            await asyncio.wait_for(ended.wait(), 5)
            await wait_for(lambda: caplog.records)
    (record,) = caplog.records
    assert "the probe ticker stopped: SystemError: ticker broke" in record.getMessage()


async def test_a_cancelled_ticker_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    feed = ProbeFeed(make_runtime(tmp_path, FakeCoordinator()), SETTINGS)
    with caplog.at_level(logging.WARNING, logger="laminar_kafka.cluster.runtime.probe_feed"):
        async with feed.running():
            await asyncio.sleep(0)
    assert caplog.records == []


async def test_a_stop_request_is_published_at_once(tmp_path: Path) -> None:
    """Signal handlers stop the node through the feed: /readyz says so before the next tick (a node
    with nothing to drain may be gone sooner)."""
    runtime = make_runtime(tmp_path, FakeCoordinator())
    feed = ProbeFeed(runtime, SETTINGS)
    task = await start_running(runtime, 10)
    feed.publish()
    assert feed.readiness().ok
    feed.request_stop(planned_leave=True)  # embedded: a stop at once
    assert feed.readiness() == Verdict(False, "stopping")
    await asyncio.wait_for(task, 5)
