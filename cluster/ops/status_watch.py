"""`laminar-kafka status --watch`: observe a pipeline every few seconds until Ctrl-C.

On a terminal, a live view (the ``rich`` library) of members, the leader, the running round, each
partition's durable cursor, durable lag and rate (records per second made durable, from successive
durable cursors) and the health with its reasons. Without a terminal (a pipe, a CI log): a plain
table per observation, or one JSON document per line with ``--json``. An observation that fails
(a server unreachable) is shown as health ``unreachable`` and the watch goes on.

Ctrl-C (SIGINT) or SIGTERM ends the watch after the observation in progress (at most the read
timeout); the exit code is the health code of the last observation (0 healthy, 1 degraded, 3
unreachable).
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.ops.health import (
    DEFAULT_STALE_AFTER,
    Health,
    HealthCode,
    assess,
    partition_rates,
    unreachable,
)
from laminar_kafka.cluster.ops.status import PipelineStatus, node_state
from laminar_kafka.coordinator.stop_signals import stop_on_signals

__all__ = ["Observation", "Watcher", "render_rich", "render_text", "watch"]

#: observations kept to find one at least ``stale_after`` old (bounded memory)
_HISTORY = 256


@dataclass(frozen=True)
class Observation:
    """One refresh: the status (None when it could not be read), its health and partition rates."""

    status: PipelineStatus | None
    health: Health
    rates: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = self.status.to_json() if self.status is not None else {}
        return {**body, "rates": dict(self.rates), "health": self.health.to_json()}


class Watcher:
    """Turns successive status reads into observations (health against an old enough one, rates
    against the last one). Pure apart from calling ``observe``."""

    def __init__(self, observe: Callable[[], PipelineStatus], stale_after: float = DEFAULT_STALE_AFTER) -> None:
        self.observe = observe
        self.stale_after = stale_after
        self.history: deque[PipelineStatus] = deque(maxlen=_HISTORY)

    def step(self) -> Observation:
        try:
            status = self.observe()
        except UsageError as exc:
            return Observation(None, unreachable(str(exc)), {})
        baseline = None
        for old in reversed(self.history):  # the newest observation at least stale_after old
            if status.observed_at - old.observed_at >= self.stale_after:
                baseline = old
                break
        health = assess(status, baseline, stale_after=self.stale_after)
        rates = partition_rates(status, self.history[-1] if self.history else None)
        self.history.append(status)
        return Observation(status, health, rates)


def render_text(observation: Observation) -> str:
    """The plain view of one observation: the status table with a rate column, then the health."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    status = observation.status
    if status is None:
        return f"== {stamp}\n{observation.health.lines()}\n"
    lines = [f"== {stamp}", status.table(), "", f"{'partition':<24} {'records/s':>10}"]
    lines += [f"{p.partition:<24} {_rate(observation.rates, p.partition):>10}" for p in status.partitions]
    return "\n".join([*lines, "", observation.health.lines(), ""])


def _rate(rates: Mapping[str, float], partition: str) -> str:
    return f"{rates[partition]:.1f}" if partition in rates else "-"


def render_rich(observation: Observation) -> Any:
    """The live view of one observation (a ``rich`` renderable)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    health = observation.health
    colour = {HealthCode.HEALTHY: "green", HealthCode.DEGRADED: "yellow", HealthCode.UNREACHABLE: "red"}[health.code]
    parts: list[Any] = [Text(f"health: {health.state}", style=f"bold {colour}")]
    parts += [Text(f"  - {reason}", style=colour) for reason in health.reasons]
    status = observation.status
    if status is not None:
        age = status.manifest_age
        parts.insert(0, Text(
            f"pipeline {status.pipeline}: assignment version {status.assignment_version}, leader "
            f"{status.leader if status.leader is not None else '-'}, last committed epoch {status.last_epoch}"
            + (f" ({age:.0f} s ago)" if age is not None else ""), style="bold"))
        nodes = Table("node", "state", "vnodes", "partitions", title="members")
        for n in status.nodes:
            nodes.add_row(str(n.node_id), node_state(n), str(n.vnodes), str(len(n.partitions)))
        partitions = Table("partition", "owner", "durable", "high", "durable lag", "records/s", title="partitions")
        for p in status.partitions:
            partitions.add_row(p.partition, str(p.owner), "-" if p.durable_cursor is None else str(p.durable_cursor),
                               str(p.high_watermark), "-" if p.durable_lag is None else str(p.durable_lag),
                               _rate(observation.rates, p.partition))
        round_text = json.dumps(dict(status.round)) if status.round else "none running"
        parts[1:1] = [nodes, partitions, Text(f"round: {round_text}")]
    return Group(*parts)


def watch(
    observe: Callable[[], PipelineStatus],
    *,
    interval: float,
    as_json: bool,
    stale_after: float = DEFAULT_STALE_AFTER,
    out: TextIO,
    live: bool,
    stop: threading.Event | None = None,
    max_observations: int | None = None,
) -> int:
    """Observe every ``interval`` seconds until Ctrl-C, ``stop`` is set or ``max_observations`` were
    made; returns the last health code. ``live``: a rich live view on ``out`` (a terminal)."""
    if interval <= 0:
        raise UsageError(f"--interval must be positive, got {interval:g}")
    watcher = Watcher(observe, stale_after)
    last = 2
    count = 0
    with stop_on_signals(stop) as stopping:
        live_view = None
        if live and not as_json:
            from rich.console import Console
            from rich.live import Live

            live_view = Live(console=Console(file=out), auto_refresh=False, transient=False)
            live_view.start()
        try:
            while True:
                observation = watcher.step()
                last = int(observation.health.code)
                count += 1
                if live_view is not None:
                    live_view.update(render_rich(observation), refresh=True)
                else:
                    out.write(json.dumps(observation.to_json()) + "\n" if as_json else render_text(observation) + "\n")
                    out.flush()
                if max_observations is not None and count >= max_observations:
                    break
                if stopping.wait(interval):
                    break
        finally:
            if live_view is not None:
                live_view.stop()
    return last
