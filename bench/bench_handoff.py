"""Benchmark: the KafkaSource drain/commit handoff with the in-process driver (no ZooKeeper).

Two nodes share one topic under continuous production. The driver runs ``--rounds`` commit rounds
that move vnodes between node 1 alone and nodes {1, 2} (begin_drain -> ready -> durable checkpoint
holding the cut -> commit -> finish_drain with the cut as handoff cursors -> publication). For every
moved partition the *handoff pause* is the time from the old owner's last emission of that partition
to the new owner's first one (when the old owner emitted nothing of it since it acquired it, from
the previous owner's last emission: ``handoffs_whose_old_owner_emitted_nothing``); for scale, ``baseline_emission_gap_ms`` is the gap between two
consecutive emissions of one partition by one node when nothing moves. ``handoff_breakdown_ms``
splits each pause at the round's steps: the old owner's last emission to every node drained
(``drain``), to the checkpoint holding the cut (``durable_cut``), to every ``finish_drain`` returned
(``finish``), to the new assignment published (``publish``), to every node reconciled with it
(``acquire``), to the new owner's first emission (``first_fetch``). Then a drain is held open for
``--hold`` seconds between ready and the (abort) decision, ``--holds`` times, and the delivery rate
of the partitions that do not move (:func:`delivery_rate`) is compared with the same-length window
just before the drain; each hold also lists its emission counts, the ratio of plain counts in the two
windows (phase-sensitive: see :func:`delivery_rate`) and the times of the reader's hand-backs of
partitions from its catch-up consumer to its batching one, relative to the drain's start.
Prints one JSON object.

    .venv/bin/python bench/bench_handoff.py [--bootstrap HOST:PORT] [--rounds 12] [--rate 6000] [--kafka KEY=VALUE]

Without ``--bootstrap`` a local single-broker dev stack is started via ``laminar_kafka.devstack.stack.DevStack``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.kafka_source import SourceDrainOutcome, SourceDrainRequest, SourceDrainResolution
from laminar_kafka.kafka_source.config.definitions import DEFAULT_BATCH_WAIT_MS
from laminar_kafka.kafka_source.read.catch_up import ReaderClients
from tests.integration.kafka_source.driver import (
    Driver,
    Node,
    Producing,
    assert_contiguous,
    wait_caught_up,
)
from tests.support import high_watermarks

PARTITIONS = 16


#: a handoff's steps, in order (see the module docstring)
STEPS = ("drain", "durable_cut", "finish", "publish", "acquire", "first_fetch")


def breakdown(times: dict[str, float], last_old: float, first_new: float) -> dict[str, float]:
    """``first_new - last_old`` split at the round's step times (clamped into that span)."""
    marks = [last_old] + [min(max(times[k], last_old), first_new)
                          for k in ("ready", "durable", "finished", "published", "reconciled")] + [first_new]
    return {step: end - start for step, start, end in zip(STEPS, marks, marks[1:], strict=False)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def delivery_rate(emissions: Sequence[tuple[float, int]], start: float, end: float, batch_wait_s: float) -> float:
    """Records a second that ``emissions`` (``(emitted_at, records)`` in time order) delivered over
    ``[start, end)``, measured between emissions: the records of the emissions in ``(a, b]`` over
    ``max(b, end - batch_wait_s) - a``, where ``a`` is the last emission at or before ``start``
    (``start`` when none) and ``b`` the last before ``end``.

    Counting the records emitted inside the window instead swings with the phase of the batches:
    with ``batch-wait-ms`` 250 a 1.5 s window holds five or six fetches of about 250 ms of records
    each (a fetch takes the wait plus a round trip), and one fetch answered early (a hand-back
    reaches ``fetch.min.bytes`` sooner) adds a partial one: 0.90-1.12 over six holds of a steady flow. Between
    emissions every record counted arrived in the time counted. The rate still falls when fetches
    bring fewer records, and when none comes for longer than a batch wait before ``end`` (a stall at
    the end widens the span to ``end - batch_wait_s``); a stall followed by its backlog inside the
    window is a delay, not lost throughput, and keeps the rate.
    """
    a = max((at for at, _n in emissions if at <= start), default=start)
    inside = [(at, n) for at, n in emissions if a < at < end]
    b = max((at for at, _n in inside), default=a)
    span = max(b, end - batch_wait_s) - a
    return sum(n for _at, n in inside) / span if span > 0 else 0.0


def kept_emissions(rows: Sequence[tuple[int, int, float]], kept: set[int]) -> list[tuple[float, int]]:
    """``(emitted_at, records)`` of each emission with rows of ``kept`` partitions, in time order."""
    counts: dict[float, int] = {}
    for p, _o, at in rows:
        if p in kept:
            counts[at] = counts.get(at, 0) + 1
    return sorted(counts.items())


@dataclass(frozen=True)
class Hold:
    """One held drain's figures: the kept partitions' delivery rate during it over the rate just
    before (``ratio``); the two rates; the emissions with kept rows in each window; the ratio of
    plain record counts in the two windows; the hand-backs from 1 s before the first window to 1 s
    after the second, in seconds from the drain's start."""

    ratio: float
    records_per_s: tuple[float, float]
    emissions: tuple[int, ...]
    count_ratio: float
    hand_backs_s: tuple[float, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "ratio": round(self.ratio, 3),
            "records_per_s_before_during": [round(rate) for rate in self.records_per_s],
            "emissions_before_during": list(self.emissions),
            "count_ratio": round(self.count_ratio, 3),
            "hand_backs_s": [round(at, 3) for at in self.hand_backs_s],
        }


#: monotonic times of the reader's hand-backs (catch-up consumer to batching one), both nodes
HAND_BACKS: list[float] = []


def record_hand_backs() -> None:
    """Wrap :meth:`ReaderClients.hand_over` to note when one moves partitions (for the per-hold figures)."""
    hand_over = ReaderClients.hand_over

    def noted(self: ReaderClients, known: Mapping[tuple[str, int], int], keep: frozenset[tuple[str, int]]) -> int:
        moved = hand_over(self, known, keep)
        if moved:
            HAND_BACKS.append(time.monotonic())
        return moved

    ReaderClients.hand_over = noted  # type: ignore[method-assign]


async def held_drain(driver: Driver, node: Node, target: tuple[int, ...], hold_s: float) -> Hold:
    """Hold a drain open on ``node`` for ``hold_s`` after ready; return the kept partitions' delivery
    rate during the drain divided by their rate in the ``hold_s`` window just before it (``ratio``),
    with the figures behind it."""
    kept = {p for _t, p in driver.owned(node.node_id, target)}
    source = node.source
    assert source is not None
    drain_id = AssignmentDrainId.for_round(driver.snapshot, target, driver.leader_token)
    for n in driver.nodes.values():
        n.registry.begin_round(drain_id, target)
    await asyncio.sleep(hold_s)
    began = time.monotonic()

    async def begin() -> None:
        source.begin_drain(SourceDrainRequest(drain_id), began + 30)

    async def ready() -> bool:
        return source.poll_drain_ready(drain_id)

    await node.call(begin)
    while not await node.call(ready):
        await asyncio.sleep(0.002)
    await asyncio.sleep(max(0.0, began + hold_s - time.monotonic()))
    ended = time.monotonic()
    await node.call(
        lambda: source.finish_drain(SourceDrainResolution(drain_id, SourceDrainOutcome.ABORT), time.monotonic() + 10)
    )
    for n in driver.nodes.values():
        n.registry.clear_round(drain_id)
    driver.publish(driver.snapshot.owners)
    await driver.wait_reconciled()
    emissions = kept_emissions(node.rows(), kept)
    wait_s = DEFAULT_BATCH_WAIT_MS / 1000
    before = delivery_rate(emissions, began - hold_s, began, wait_s)
    during = delivery_rate(emissions, began, ended, wait_s)
    windows = ((began - hold_s, began), (began, ended))
    counted = [sum(n for at, n in emissions if start <= at < end) for start, end in windows]
    return Hold(
        ratio=during / before if before else 0.0,
        records_per_s=(before, during),
        emissions=tuple(sum(1 for at, _n in emissions if start <= at < end) for start, end in windows),
        count_ratio=(counted[1] / (ended - began)) / (counted[0] / hold_s) if counted[0] else 0.0,
        hand_backs_s=tuple(at - began for at in HAND_BACKS if began - hold_s - 1 <= at < ended + 1),
    )


async def run(bootstrap: str, rounds: int, rate: float, holds: int, hold_s: float,
              kafka: dict[str, str]) -> dict[str, object]:
    topic = f"bench-handoff-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    properties = {
        "bootstrap.servers": bootstrap,
        "topic": topic,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "include-metadata": "_topic,_partition,_offset",
        **{f"kafka.{key}": value for key, value in kafka.items()},
    }
    driver = Driver(topic, PARTITIONS, vnode_count=64)
    driver.publish([1] * driver.vnode_count)
    a, b = Node(1, properties, driver.vnode_count), Node(2, properties, driver.vnode_count)
    await driver.add_node(a)
    await driver.add_node(b)
    await driver.wait_reconciled()
    pauses: list[float] = []
    breakdowns: list[dict[str, float]] = []
    drain_s: list[float] = []
    holds_out: list[Hold] = []
    reports = []
    unmeasured = 0
    spanning = 0
    try:
        with Producing(bootstrap, topic, PARTITIONS, rate) as producing:
            await asyncio.sleep(2.0)
            for index in range(rounds):
                members = [1, 2] if index % 2 == 0 else [1]
                report = await driver.round(driver.place(members), SourceDrainOutcome.COMMIT)
                await driver.wait_reconciled()
                report.times["reconciled"] = time.monotonic()
                drain_s.append(report.drain_s)
                reports.append(report)
                await asyncio.sleep(0.4)
            for _ in range(holds):
                holds_out.append(await held_drain(driver, a, driver.place([1, 2]) if driver.snapshot.owners == (1,) * driver.vnode_count else driver.place([1]), hold_s))
            producing.stop()
            ends = high_watermarks(bootstrap, topic)
            await wait_caught_up([a, b], ends, timeout=60)
        assert_contiguous([a, b], ends)  # the figures count only if nothing was lost or duplicated
        by_node = {1: a.rows(), 2: b.rows()}
        for report in reports:
            for (_t, p), (old, new) in report.moved.items():
                cut = report.cut[f"{topic}:{p}"]
                # the emission of the last record before the cut: by the old owner, or (when it
                # emitted nothing of the partition since it acquired it) by the owner before it
                last_old = max((at for rows in by_node.values() for q, o, at in rows if q == p and o == cut - 1),
                               default=None)
                if last_old is not None and not any(q == p and o == cut - 1 for q, o, _at in by_node[old]):
                    spanning += 1
                first_new = min((at for q, o, at in by_node[new] if q == p and o == cut), default=None)
                if last_old is not None and first_new is not None:
                    pauses.append(first_new - last_old)
                    breakdowns.append(breakdown(report.times, last_old, first_new))
                else:
                    unmeasured += 1
    finally:
        await a.stop()
        await b.stop()
    # Baseline: the gap between two consecutive emissions of one partition by one node (no handoff).
    gaps: list[float] = []
    for rows in by_node.values():
        last: dict[int, float] = {}
        for p, _o, at in rows:
            if p in last and at > last[p]:
                gaps.append(at - last[p])
            last[p] = at
    return {
        "partitions": PARTITIONS,
        "production_records_per_s": rate,
        "rounds": rounds,
        "moved_partition_handoffs": len(pauses),
        "unmeasured_handoffs": unmeasured,
        "handoffs_whose_old_owner_emitted_nothing": spanning,
        "handoff_pause_ms": {
            "p50": round(statistics.median(pauses) * 1000, 1),
            "p99": round(percentile(pauses, 0.99) * 1000, 1),
            "max": round(max(pauses) * 1000, 1),
        },
        "handoff_breakdown_ms": {
            step: {"p50": round(statistics.median(b[step] for b in breakdowns) * 1000, 1),
                   "p99": round(percentile([b[step] for b in breakdowns], 0.99) * 1000, 1)}
            for step in STEPS
        },
        "slowest_handoff_ms": {step: round(value * 1000, 1) for step, value in
                               max(breakdowns, key=lambda b: sum(b.values())).items()},
        "baseline_emission_gap_ms": {
            "p50": round(statistics.median(gaps) * 1000, 1),
            "p99": round(percentile(gaps, 0.99) * 1000, 1),
        },
        "drain_ready_ms": {"p50": round(statistics.median(drain_s) * 1000, 1), "max": round(max(drain_s) * 1000, 1)},
        "non_moving_throughput_during_drain_fraction": {
            "hold_s": hold_s,
            "runs": [round(h.ratio, 3) for h in holds_out],
            "median": round(statistics.median(h.ratio for h in holds_out), 3),
            "min": round(min(h.ratio for h in holds_out), 3),
            "holds": [h.as_json() for h in holds_out],
        },
        "exactly_once_checked": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--rate", type=float, default=6000.0, help="records/s produced over all partitions")
    parser.add_argument("--holds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.5, help="seconds a measured drain is held open")
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka consumer property for both nodes (repeatable)")
    args = parser.parse_args()
    kafka = dict(item.split("=", 1) for item in args.kafka)
    record_hand_backs()
    stack = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from laminar_kafka.devstack.stack import DevStack

        stack = DevStack.launch(kafka_brokers=1, zookeeper_servers=0)
        bootstrap = stack.bootstrap
    try:
        result = asyncio.run(run(bootstrap, args.rounds, args.rate, args.holds, args.hold, kafka))
        print(json.dumps(result, indent=2))
    finally:
        if stack is not None:
            stack.stop()


if __name__ == "__main__":
    main()
