"""The health of a pipeline from one or two `status` observations: the exit code of ``laminar-kafka
status`` and the reasons behind it. Pure: no I/O, no clock (the observations carry their times).

Codes (:class:`HealthCode`), as monitoring plugins (Nagios) and probes read them: 0 healthy; 1
degraded; 3 unreachable, the state unknown (Kafka, ZooKeeper or the state directory could not be
read, the pipeline or a topic does not exist: :func:`unreachable`, since there is then no
observation to assess). 2 is left to the command line's own usage errors (a wrong flag), which
argparse and every `laminar-kafka` command exit with.

Degraded, with one reason per finding (:func:`assess`):

- **a member missing**: a node owns vnodes in the published assignment but has no live session
  (so fewer live members than the assignment names);
- **no leader**: no node holds the leader election;
- **a round stuck**: a round is still running ``round_grace`` seconds after its deadline (the leader
  aborts a round at its deadline, so one that outlives it means the leader is not making progress);
- **durable lag growing**, judged two ways:

  * one observation: durable lag > 0 and the last manifest is older than ``stale_after`` seconds
    (default 10 s: five checkpoint intervals at the default 2 s). Data waits and no epoch made it
    durable;
  * two observations at least ``stale_after`` apart (``status --watch``): a partition's high
    watermark advanced while its durable cursor did not move (its durable lag grew).
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from laminar_kafka.cluster.ops.status import PipelineStatus
from laminar_kafka.coordinator.codec import is_int

__all__ = [
    "DEFAULT_ROUND_GRACE", "DEFAULT_STALE_AFTER", "Health", "HealthCode", "assess", "partition_rates",
    "unreachable",
]

#: Seconds without a manifest while durable lag > 0 before the pipeline counts as degraded.
DEFAULT_STALE_AFTER = 10.0
#: Seconds a round may outlive its deadline before it counts as stuck (the leader's reaction time).
DEFAULT_ROUND_GRACE = 5.0


class HealthCode(enum.IntEnum):
    """The exit code of ``laminar-kafka status`` (2 is never one: it is a usage error's)."""

    HEALTHY = 0
    DEGRADED = 1
    UNREACHABLE = 3


@dataclass(frozen=True)
class Health:
    """A verdict and the reasons for it (empty when healthy); reasons are one line each, no secret."""

    code: HealthCode
    reasons: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        return self.code.name.lower()

    def to_json(self) -> dict[str, object]:
        return {"code": int(self.code), "state": self.state, "reasons": list(self.reasons)}

    def lines(self) -> str:
        """``health: <state>`` and one ``  - reason`` line per reason."""
        return "\n".join([f"health: {self.state}", *(f"  - {r}" for r in self.reasons)])


def unreachable(reason: str) -> Health:
    """The verdict when the observation itself failed (a server or the state directory unreadable)."""
    return Health(HealthCode.UNREACHABLE, (reason,))


def assess(
    status: PipelineStatus,
    previous: PipelineStatus | None = None,
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
    round_grace: float = DEFAULT_ROUND_GRACE,
) -> Health:
    """The health of ``status`` (see the module docstring for every rule). ``previous``: an earlier
    observation of the same pipeline; it is used only when at least ``stale_after`` seconds older
    (a shorter window cannot tell a stall from an epoch in progress)."""
    reasons: list[str] = []
    for node in status.nodes:
        if not node.live and node.vnodes > 0:
            reasons.append(f"member missing: node {node.node_id} owns {node.vnodes} vnodes but has no live session")
    if status.leader is None:
        reasons.append("no leader: no node holds the leader election")
    stuck = _round_stuck(status, round_grace)
    if stuck:
        reasons.append(stuck)
    lag = status.total_durable_lag
    age = status.manifest_age
    if lag > 0 and age is not None and age > stale_after:
        reasons.append(f"durable lag growing: {lag} records wait and no epoch was committed for {age:.0f} s "
                       f"(limit {stale_after:g} s)")
    elif previous is not None and status.observed_at - previous.observed_at >= stale_after:
        stalled = _stalled_partitions(status, previous)
        if stalled:
            shown = ", ".join(stalled[:5]) + (f" and {len(stalled) - 5} more" if len(stalled) > 5 else "")
            reasons.append(f"durable lag growing on {len(stalled)} partition(s) ({shown}): new records, no durable "
                           f"progress in {status.observed_at - previous.observed_at:.0f} s")
    if status.lake is not None and status.lake.verdict:
        reasons.append(f"lake and control state: {status.lake.verdict}")
    return Health(HealthCode.DEGRADED if reasons else HealthCode.HEALTHY, tuple(reasons))


def _round_stuck(status: PipelineStatus, grace: float) -> str | None:
    if not status.round or not status.observed_at:
        return None
    deadline_ms = status.round.get("deadline_ms")
    if not is_int(deadline_ms):
        return None
    overdue = status.observed_at - deadline_ms / 1000.0
    if overdue <= grace:
        return None
    return f"round stuck: the running round is {overdue:.0f} s past its deadline"


def _stalled_partitions(status: PipelineStatus, previous: PipelineStatus) -> list[str]:
    """Partitions whose high watermark advanced while their durable cursor stayed where it was."""
    before = {p.partition: p for p in previous.partitions}
    stalled = []
    for now in status.partitions:
        then = before.get(now.partition)
        if then is None or now.durable_lag is None or then.durable_lag is None:
            continue
        if now.high_watermark > then.high_watermark and now.durable_cursor == then.durable_cursor:
            stalled.append(now.partition)
    return stalled


def partition_rates(status: PipelineStatus, previous: PipelineStatus | None) -> Mapping[str, float]:
    """Records per second made durable per partition between two observations (durable cursor
    advance over elapsed time); empty without a usable previous observation."""
    if previous is None:
        return {}
    elapsed = status.observed_at - previous.observed_at
    if elapsed <= 0:
        return {}
    before = {p.partition: p.durable_cursor for p in previous.partitions}
    rates = {}
    for p in status.partitions:
        then = before.get(p.partition)
        if p.durable_cursor is not None and then is not None:
            rates[p.partition] = max(0, p.durable_cursor - then) / elapsed
    return rates
