"""The verdicts of a node's ``/healthz`` (liveness) and ``/readyz`` (readiness): pure functions of a
:class:`NodeSnapshot`, the time and :class:`ProbeSettings` (no I/O, no clock of their own).

The runtime publishes a snapshot of its own state (:mod:`~laminar_kafka.cluster.runtime.probe_feed`);
the HTTP endpoints and the ``laminar_node_healthy`` / ``laminar_node_ready`` gauges read it and call
:func:`health` and :func:`readiness`, so no request ever touches Kafka or ZooKeeper.

- Healthy: the event loop turned less than ``loop_stale_s`` ago, and (ZooKeeper mode) the session is
  connected, not connected yet (the join is bounded by its own timeout), or has been away (suspended,
  then lost while the node rejoins) for less than the session timeout.
- Ready: healthy, and the node joined, holds its assignment, is not leaving, and reads what it owns:
  a source generation runs and its intake is not held (a node that owns no partition is ready too).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from laminar_kafka.cluster.runtime.state import RuntimePhase
from laminar_kafka.coordinator.base import SessionState

__all__ = ["LOOP_STALE_S", "Activity", "NodeSnapshot", "ProbeSettings", "SessionView", "Verdict", "health", "readiness"]

#: the default bound on the event loop's silence: the loop's heartbeat ticks every 0.5 s, and no
#: turn of a healthy node holds the loop for more than a fraction of a second
LOOP_STALE_S = 10.0


@dataclass(frozen=True)
class ProbeSettings:
    """What the verdicts compare against (fixed for a node's life). Durations in seconds."""

    #: whether the node has a ZooKeeper session (False: embedded mode, the loop alone decides health)
    zookeeper: bool
    #: the coordinator's session timeout (``session-timeout-ms``)
    session_timeout_s: float
    #: the longest the event loop may go without a heartbeat before the node is unhealthy
    loop_stale_s: float = LOOP_STALE_S


@dataclass(frozen=True)
class SessionView:
    """The coordinator session as the node last heard of it. ``state`` None: not connected yet.
    ``away_since``: when the session left CONNECTED (:func:`time.monotonic`; kept from the first
    SUSPENDED through a LOST until CONNECTED again), None while connected."""

    state: SessionState | None = None
    away_since: float | None = None

    def moved_to(self, state: SessionState, now: float) -> SessionView:
        """This view after a ``SessionStateChanged(state)`` heard at ``now``."""
        if state is SessionState.CONNECTED:
            return SessionView(state, None)
        return SessionView(state, self.away_since if self.away_since is not None else now)


class Activity(enum.Enum):
    """What the node's source does, as far as readiness cares."""

    #: no source generation runs (none started yet, or one retired and the next not started)
    NO_GENERATION = "no-generation"
    #: a generation runs but its intake is held (not reconciled with the published assignment)
    HELD = "held"
    #: a generation runs and reads
    READING = "reading"


@dataclass(frozen=True)
class NodeSnapshot:
    """The node's own state at ``taken_at`` (:func:`time.monotonic`, when the event loop last ticked)."""

    taken_at: float
    phase: RuntimePhase = RuntimePhase.JOINING
    session: SessionView = SessionView()
    #: the assignment version the node adopted (None: none yet)
    assignment_version: int | None = None
    #: how many partitions the node owns under that assignment (embedded: every partition)
    owned_partitions: int = 0
    activity: Activity = Activity.NO_GENERATION
    #: when a planned leave was requested (:func:`time.monotonic`), None without one
    leave_requested_at: float | None = None


@dataclass(frozen=True)
class Verdict:
    """One probe's answer: ``ok`` (HTTP 200) or not (503), with a one-line ``reason``."""

    ok: bool
    reason: str


def health(snapshot: NodeSnapshot, now: float, settings: ProbeSettings) -> Verdict:
    """Liveness: the event loop turns, and the ZooKeeper session is live or away for less than its timeout."""
    silence = now - snapshot.taken_at
    if silence >= settings.loop_stale_s:
        return Verdict(False, f"event loop stalled: no turn for {silence:.1f} s (bound {settings.loop_stale_s:g} s)")
    session = snapshot.session
    if settings.zookeeper and session.away_since is not None:
        away = now - session.away_since
        if away >= settings.session_timeout_s:
            state = "suspended" if session.state is SessionState.SUSPENDED else "lost, not yet rejoined"
            return Verdict(False, f"zookeeper session {state} for {away:.1f} s "
                                  f"(timeout {settings.session_timeout_s:g} s)")
        return Verdict(True, f"ok (zookeeper session reconnecting for {away:.1f} s)")
    return Verdict(True, "ok")


def readiness(snapshot: NodeSnapshot, now: float, settings: ProbeSettings) -> Verdict:
    """Readiness: healthy, joined (phase RUNNING), holding an assignment, not leaving, and reading
    what it owns (a generation runs, its intake not held; owning nothing is ready too)."""
    alive = health(snapshot, now, settings)
    if not alive.ok:
        return Verdict(False, f"not healthy: {alive.reason}")
    phase = snapshot.phase
    if phase is RuntimePhase.LEFT:
        return Verdict(False, "left the pipeline (planned leave complete); stopping")
    if phase is RuntimePhase.STOPPING:
        return Verdict(False, "stopping")
    if snapshot.leave_requested_at is not None:
        return Verdict(False, f"leaving: its vnodes drain to the other nodes (requested "
                              f"{now - snapshot.leave_requested_at:.1f} s ago)")
    if phase is RuntimePhase.JOINING:
        return Verdict(False, "starting: joining the pipeline")
    if phase is RuntimePhase.REJOINING:
        return Verdict(False, "rejoining the pipeline after its session was lost")
    if snapshot.assignment_version is None:
        return Verdict(False, "joined; waiting for its first assignment")
    version = snapshot.assignment_version
    if snapshot.owned_partitions == 0:
        return Verdict(True, f"ready: assignment version {version}, no partition owned")
    if snapshot.activity is Activity.NO_GENERATION:
        return Verdict(False, f"assignment version {version}: starting a source generation "
                              f"for {snapshot.owned_partitions} partition(s)")
    if snapshot.activity is Activity.HELD:
        return Verdict(False, f"assignment version {version}: source intake held until it is "
                              "reconciled with the assignment")
    return Verdict(True, f"ready: assignment version {version}, {snapshot.owned_partitions} partition(s)")
