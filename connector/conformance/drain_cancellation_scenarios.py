"""The conformance scenario of a ``finish_drain`` cancelled at its deadline, by the connector's
:class:`ConnectorCancellationPolicy`, as the node runtime handles it (``cluster/runtime/drain.py``).
The round swaps ownership: the node releases some partitions at its cut and gains others at the
handoff cursors of the manifest holding the cut, so the cancelled call has both kinds of work.

- RETIRE_CONNECTOR, or a cancelled call that raised ``FatalError`` (the runtime retires a generation
  on it under either policy): the generation is closed and its ``terminal_task_tracker()`` awaited;
  the round's target is published; the next generation starts at the durable manifest (the one
  holding the cut) and reads exactly the partitions it owns at the target from there.
- CANCEL_SAFE: the same resolution is applied again (``apply_unresolved``) and completes the round
  exactly as if it had never been cancelled.

``finish_drain`` is cancelled at the connector's first suspension point (``KafkaSource``'s awaits the
reader thread's consumer change there); a connector with a test switch that makes its next ``finish_drain`` wait until
cancelled (:class:`HangsFinishes`, as ``MemorySource`` has) gets that hung call cancelled at a
deadline instead. A ``finish_drain`` that never suspends completes before any cancellation lands:
the round is then simply committed (``drain-commit`` checks that). Vnode mode is needed.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.conformance.backend import ConformanceError, ConnectorKit
from laminar_kafka.connector.conformance.reading import (
    Reading,
    append_everywhere,
    close_generation,
    expect_exact,
    read_until,
)
from laminar_kafka.connector.conformance.vnode_scenarios import (
    IDENTITY,
    SELF,
    drive_until,
    owners_giving,
    poll_until_drained,
    split_partitions,
    started_owning,
)
from laminar_kafka.connector.errors import FatalError
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    ConnectorCancellationPolicy,
    DeliveryGuarantee,
    ResumePosition,
    SourceConnector,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceStart,
)
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = ["HangsFinishes", "cancelled_finish_drain"]

#: how long a hung finish_drain is given before it is cancelled (the runtime's finish_drain_timeout_s)
HANG_S = 0.1


@runtime_checkable
class HangsFinishes(Protocol):
    """A connector with a test switch: its next ``finish_drain`` of an active round waits until it
    is cancelled."""

    def hang_next_finish(self) -> None:
        """Make the next ``finish_drain`` wait (inside the connector) until it is cancelled."""


async def cancelled_finish_drain(kit: ConnectorKit) -> None:
    """A round swaps ownership while records keep arriving: this node loses the vnodes of ``mine``
    (paused at its cut) and gains those of ``others`` (at the cut their old owner left in the
    manifest). The manifest holding both cuts is durable; its ``finish_drain(COMMIT, handoff)`` is
    cancelled in the middle."""
    rule = "cancelled-finish-drain"
    mine, others = split_partitions(kit)
    topic = kit.backend.topic
    lost, gained = frozenset((topic, p) for p in mine), frozenset((topic, p) for p in others)
    ends, registry, connector = await started_owning(kit, mine, rule)
    target = owners_giving(kit, others)
    try:
        policy = connector.cancellation_policy()
        if not isinstance(policy, ConnectorCancellationPolicy):
            raise ConformanceError(rule, f"cancellation_policy() is {policy!r}, not a policy")
        says = f"under {policy.name}, "
        reading = await read_until(kit, connector, {tp: ends[tp] for tp in lost}, rule)
        reading.offsets.clear()  # from the ends on
        more = append_everywhere(kit)  # in flight across the round
        round_ = AssignmentDrainId.for_round(registry.snapshot(), target, 1)
        registry.begin_round(round_, target)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)
        await poll_until_drained(kit, connector, round_, reading, rule)
        cut = connector.try_checkpoint()
        if cut is None or set(cut.partitions()) != lost:
            raise ConformanceError(rule, f"try_checkpoint() once the drain is ready is {cut}, not the cut of {sorted(lost)}")
        # the manifest holding the cut: this node's, and where the old owner left the gained partitions
        manifest = cut.partitions() | {tp: ends[tp] // 2 + 1 for tp in gained}
        handoff = {f"{t}:{p}": o for (t, p), o in sorted(manifest.items())}
        registry.clear_round(round_)
        resolution = SourceDrainResolution(round_, SourceDrainOutcome.COMMIT)
        outcome = await _cancelled_finish(kit, connector, resolution, handoff)
    except BaseException:
        await close_generation(connector)
        raise
    if outcome == "retired" or (policy is ConnectorCancellationPolicy.RETIRE_CONNECTOR and outcome == "cancelled"):
        await _retired(kit, connector, SourceCheckpoint.from_partitions(manifest, 1), registry, target, gained, more,
                       says, rule)
        return
    try:  # CANCEL_SAFE (or nothing was cancelled): the runtime applies the same resolution again
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s, handoff)
        registry.publish(2, target)
        await drive_until(kit, connector, connector.checkpoint_ready, rule,
                           f"{says}checkpoint_ready() after the cancelled finish_drain(COMMIT) was applied again")
        checkpoint = connector.checkpoint()
        want = {tp: manifest[tp] for tp in gained}
        if checkpoint.partitions() != want or checkpoint.assignment_version != 2:
            raise ConformanceError(rule, f"{says}after a cancelled finish_drain(COMMIT) applied again, the checkpoint "
                                         f"is {dict(checkpoint.offsets)} at version {checkpoint.assignment_version}; "
                                         f"want the handoff cursors {handoff} of {sorted(gained)} at 2")
        await read_until(kit, connector, {tp: more[tp] for tp in gained}, rule, reading)
        expect_exact(kit, rule, reading, ends | want, {tp: more[tp] for tp in gained} | cut.partitions())
    finally:
        await close_generation(connector)


async def _cancelled_finish(kit: ConnectorKit, connector: SourceConnector, resolution: SourceDrainResolution,
                            handoff: Mapping[str, int]) -> str:
    """``finish_drain`` cancelled in the middle: ``"cancelled"`` (it raised CancelledError),
    ``"retired"`` (it raised FatalError: the runtime retires the generation) or ``"completed"``
    (it returned before the cancellation landed)."""
    task = asyncio.ensure_future(connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s, handoff))
    if isinstance(connector, HangsFinishes):
        connector.hang_next_finish()  # before the task's first step: that call hangs
        await asyncio.wait({task}, timeout=HANG_S)
    else:
        await asyncio.sleep(0)  # cancelled at its first suspension
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return "cancelled"
    except FatalError:
        return "retired"
    return "completed"


async def _retired(kit: ConnectorKit, connector: SourceConnector, manifest: SourceCheckpoint, registry: VnodeRegistry,
                   target: tuple[int, ...], gained: frozenset[TopicPartitionId], more: Mapping[TopicPartitionId, int],
                   says: str, rule: str) -> None:
    """Close, await the tracker, publish the decided target, and start the next generation at the
    durable manifest: it reads exactly the partitions it owns at the target from there."""
    await connector.close()
    tracker = connector.terminal_task_tracker()
    if tracker is not None and not await tracker.wait(kit.read_timeout_s):
        raise ConformanceError(rule, f"{says}the tracked tasks of a generation closed after a cancelled finish_drain "
                                     f"were still running {kit.read_timeout_s:.0f} s after close()")
    registry.publish(2, target)
    resumed = kit.make_connector()
    resumed.set_vnode_assignment(IDENTITY, registry, SELF)
    position = ResumePosition(CheckpointAttempt(1, 1), manifest)
    await resumed.start(SourceStart(kit.config, position, DeliveryGuarantee.EXACTLY_ONCE))
    try:
        await drive_until(kit, resumed, resumed.checkpoint_ready, rule, "checkpoint_ready() of the next generation")
        want = {tp: o for tp, o in manifest.partitions().items() if tp in gained}
        start = resumed.checkpoint().partitions()
        if start != want:
            raise ConformanceError(rule, f"{says}the next generation, started at the durable manifest, begins at "
                                         f"{start}, not at its partitions' cursors there {want}")
        again = Reading()
        await read_until(kit, resumed, {tp: more[tp] for tp in gained}, rule, again)
        foreign = sorted(set(again.offsets) - gained)
        if foreign:
            raise ConformanceError(rule, f"{says}the next generation read {foreign}, which the committed target "
                                         f"gave another node")
        expect_exact(kit, rule, again, want, {tp: more[tp] for tp in gained})
    finally:
        await close_generation(resumed)
