"""The pure verdicts of /healthz and /readyz: every branch, and the bounds exactly at their edges."""
from __future__ import annotations

from dataclasses import replace

import pytest

from laminar_kafka.cluster.runtime.probes import (
    LOOP_STALE_S,
    Activity,
    NodeSnapshot,
    ProbeSettings,
    SessionView,
    Verdict,
    health,
    readiness,
)
from laminar_kafka.cluster.runtime.state import RuntimePhase
from laminar_kafka.coordinator.base import SessionState

ZK = ProbeSettings(zookeeper=True, session_timeout_s=10.0)
EMBEDDED = ProbeSettings(zookeeper=False, session_timeout_s=10.0)
NOW = 1000.0
#: a node that joined, holds assignment version 7 and reads its 4 partitions, its session connected
READING = NodeSnapshot(
    taken_at=NOW - 0.2, phase=RuntimePhase.RUNNING, session=SessionView(SessionState.CONNECTED),
    assignment_version=7, owned_partitions=4, activity=Activity.READING,
)


def away(state: SessionState, seconds: float) -> NodeSnapshot:
    return replace(READING, session=SessionView(state, NOW - seconds))


# -- the session view -------------------------------------------------------------------------------


def test_the_session_view_keeps_the_first_departure_until_connected_again() -> None:
    view = SessionView()
    assert view.state is None and view.away_since is None
    suspended = view.moved_to(SessionState.SUSPENDED, 5.0)
    assert suspended == SessionView(SessionState.SUSPENDED, 5.0)
    lost = suspended.moved_to(SessionState.LOST, 9.0)  # lost after the suspension: still away since 5
    assert lost == SessionView(SessionState.LOST, 5.0)
    assert lost.moved_to(SessionState.CONNECTED, 12.0) == SessionView(SessionState.CONNECTED, None)
    assert SessionView(SessionState.CONNECTED).moved_to(SessionState.LOST, 3.0) == SessionView(SessionState.LOST, 3.0)


# -- health -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [ZK, EMBEDDED], ids=["zookeeper", "embedded"])
def test_a_turning_loop_with_a_live_session_is_healthy(settings: ProbeSettings) -> None:
    assert health(READING, NOW, settings) == Verdict(True, "ok")


@pytest.mark.parametrize("settings", [ZK, EMBEDDED], ids=["zookeeper", "embedded"])
def test_a_loop_silent_for_the_bound_is_unhealthy(settings: ProbeSettings) -> None:
    just_fresh = replace(READING, taken_at=NOW - LOOP_STALE_S + 0.01)
    assert health(just_fresh, NOW, settings).ok
    stale = replace(READING, taken_at=NOW - 12.34)
    assert health(stale, NOW, settings) == Verdict(False, "event loop stalled: no turn for 12.3 s (bound 10 s)")
    assert not health(replace(READING, taken_at=NOW - LOOP_STALE_S), NOW, settings).ok  # the bound itself


def test_the_loop_bound_is_a_setting() -> None:
    snapshot = replace(READING, taken_at=NOW - 3.0)
    assert health(snapshot, NOW, ZK).ok
    assert not health(snapshot, NOW, replace(ZK, loop_stale_s=2.0)).ok


def test_a_session_not_connected_yet_is_healthy() -> None:
    """The join is bounded by its own start timeout: before it, no session to judge."""
    assert health(replace(READING, session=SessionView()), NOW, ZK).ok


@pytest.mark.parametrize("state", [SessionState.SUSPENDED, SessionState.LOST])
def test_a_session_away_for_less_than_its_timeout_is_healthy(state: SessionState) -> None:
    verdict = health(away(state, 9.99), NOW, ZK)
    assert verdict == Verdict(True, "ok (zookeeper session reconnecting for 10.0 s)")


def test_a_session_suspended_for_its_timeout_is_unhealthy() -> None:
    assert health(away(SessionState.SUSPENDED, 12.34), NOW, ZK) == Verdict(
        False, "zookeeper session suspended for 12.3 s (timeout 10 s)")
    assert not health(away(SessionState.SUSPENDED, 10.0), NOW, ZK).ok  # the timeout itself


def test_a_session_lost_and_not_rejoined_within_its_timeout_is_unhealthy() -> None:
    assert health(away(SessionState.LOST, 15.0), NOW, ZK) == Verdict(
        False, "zookeeper session lost, not yet rejoined for 15.0 s (timeout 10 s)")


def test_embedded_mode_ignores_the_session() -> None:
    assert health(away(SessionState.SUSPENDED, 500.0), NOW, EMBEDDED) == Verdict(True, "ok")


def test_a_stalled_loop_is_reported_before_the_session() -> None:
    snapshot = replace(away(SessionState.SUSPENDED, 30.0), taken_at=NOW - 20.0)
    assert health(snapshot, NOW, ZK).reason.startswith("event loop stalled")


# -- readiness --------------------------------------------------------------------------------------


def test_a_node_reading_its_partitions_is_ready() -> None:
    assert readiness(READING, NOW, ZK) == Verdict(True, "ready: assignment version 7, 4 partition(s)")


def test_a_node_that_owns_no_partition_is_ready_without_a_generation() -> None:
    idle = replace(READING, owned_partitions=0, activity=Activity.NO_GENERATION)
    assert readiness(idle, NOW, ZK) == Verdict(True, "ready: assignment version 7, no partition owned")


@pytest.mark.parametrize(("change", "reason"), [
    ({"phase": RuntimePhase.JOINING}, "starting: joining the pipeline"),
    ({"phase": RuntimePhase.REJOINING}, "rejoining the pipeline after its session was lost"),
    ({"phase": RuntimePhase.STOPPING}, "stopping"),
    ({"phase": RuntimePhase.LEFT}, "left the pipeline (planned leave complete); stopping"),
    ({"leave_requested_at": NOW - 2.5}, "leaving: its vnodes drain to the other nodes (requested 2.5 s ago)"),
    ({"assignment_version": None}, "joined; waiting for its first assignment"),
    ({"activity": Activity.NO_GENERATION}, "assignment version 7: starting a source generation for 4 partition(s)"),
    ({"activity": Activity.HELD}, "assignment version 7: source intake held until it is reconciled with the assignment"),
], ids=["joining", "rejoining", "stopping", "left", "leaving", "no-assignment", "no-generation", "held"])
def test_a_node_not_serving_its_assignment_is_not_ready(change: dict[str, object], reason: str) -> None:
    assert readiness(replace(READING, **change), NOW, ZK) == Verdict(False, reason)  # type: ignore[arg-type]


def test_a_leave_is_reported_even_without_partitions_and_before_joining_is_over() -> None:
    leaving = replace(READING, leave_requested_at=NOW - 1.0, owned_partitions=0, phase=RuntimePhase.JOINING)
    assert readiness(leaving, NOW, ZK).reason.startswith("leaving")


def test_a_final_phase_wins_over_a_leave_request() -> None:
    left = replace(READING, leave_requested_at=NOW - 1.0, phase=RuntimePhase.LEFT)
    assert readiness(left, NOW, ZK).reason.startswith("left the pipeline")


def test_an_unhealthy_node_is_not_ready_and_says_why() -> None:
    assert readiness(replace(READING, taken_at=NOW - 11.0), NOW, ZK) == Verdict(
        False, "not healthy: event loop stalled: no turn for 11.0 s (bound 10 s)")
    assert readiness(away(SessionState.SUSPENDED, 11.0), NOW, ZK) == Verdict(
        False, "not healthy: zookeeper session suspended for 11.0 s (timeout 10 s)")


def test_a_session_briefly_away_keeps_a_reading_node_ready() -> None:
    assert readiness(away(SessionState.SUSPENDED, 2.0), NOW, ZK).ok


def test_the_first_snapshot_is_a_starting_node() -> None:
    first = NodeSnapshot(NOW)
    assert health(first, NOW, ZK).ok
    assert readiness(first, NOW, ZK) == Verdict(False, "starting: joining the pipeline")
