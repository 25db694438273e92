"""The conformance scenarios of vnode mode: reading only what the node owns, acquiring at offered
cursors, drains that pause only the moving partitions at an exact cut, and the handoff cursors a
committed drain places gained partitions at. They drive the control plane as the node runtime does:
``drive_control_plane()`` every turn, no poll while not ready. A connector without vnode mode (its
``set_vnode_assignment`` fails closed with ``ConfigurationError``) skips them."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.conformance.backend import ConformanceError, ConformanceSkipped, ConnectorKit
from laminar_kafka.connector.conformance.reading import (
    POLL_RECORDS,
    RECORDS,
    Reading,
    append_everywhere,
    close_generation,
    expect_exact,
    read_until,
    take_batch,
)
from laminar_kafka.connector.errors import DrainError
from laminar_kafka.connector.protocol import (
    DeliveryGuarantee,
    InitialPosition,
    SourceConnector,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceStart,
)
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode
from laminar_kafka.errors import ConfigurationError

__all__ = [
    "acquisition_at_the_offered_cursors", "drain_abort", "drain_commit", "drain_commit_handoff", "vnode_scoped_reading",
]

#: the identity and vnode count the vnode scenarios route with, and the node the generation is
IDENTITY, VNODES, SELF = "conformance", 16, 1


def owners_giving(kit: ConnectorKit, mine: frozenset[int]) -> tuple[int, ...]:
    """Owners of :data:`VNODES` vnodes giving :data:`SELF` the vnodes of partitions ``mine`` and
    node 2 every other vnode."""
    topic = kit.backend.topic
    vnodes = {partition_vnode(IDENTITY, topic, p, VNODES) for p in mine}
    return tuple(SELF if v in vnodes else 2 for v in range(VNODES))


def split_partitions(kit: ConnectorKit) -> tuple[frozenset[int], frozenset[int]]:
    """The partitions this node owns first (partition 0's vnode) and the others (at least one:
    a partition of another vnode)."""
    topic, count = kit.backend.topic, kit.backend.partitions()
    first = partition_vnode(IDENTITY, topic, 0, VNODES)
    mine = frozenset(p for p in range(count) if partition_vnode(IDENTITY, topic, p, VNODES) == first)
    others = frozenset(range(count)) - mine
    if not others:
        raise ConformanceSkipped(f"every partition of {topic} routes to one vnode: nothing to split")
    return mine, others


async def started_owning(
    kit: ConnectorKit, partitions: frozenset[int], rule: str
) -> tuple[dict[TopicPartitionId, int], VnodeRegistry, SourceConnector]:
    """Records appended to every partition (their ends), version 1 published giving this node the
    vnodes of ``partitions``, and a generation started on it from its initial position, ready."""
    ends = append_everywhere(kit)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, owners_giving(kit, partitions))
    connector = kit.make_connector()
    try:
        connector.set_vnode_assignment(IDENTITY, registry, SELF)
    except ConfigurationError as exc:  # the protocol's fail-closed default: no vnode mode
        raise ConformanceSkipped(f"{type(connector).__name__} has no vnode mode: {exc}") from exc
    await connector.start(SourceStart(kit.config, InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE))
    try:
        await drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after start")
    except BaseException:
        await close_generation(connector)
        raise
    return ends, registry, connector


async def drive_until(kit: ConnectorKit, connector: SourceConnector, predicate: Callable[[], bool],
                       rule: str, what: str) -> None:
    """Call ``drive_control_plane()`` (as the runtime does every turn, not polling while not ready)
    until ``predicate()``."""
    deadline = time.monotonic() + kit.read_timeout_s
    while True:
        connector.drive_control_plane()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise ConformanceError(rule, f"{what} did not happen within {kit.read_timeout_s:.0f} s")
        await asyncio.sleep(0.02)


async def vnode_scoped_reading(kit: ConnectorKit) -> None:
    rule = "vnode-scoped-reading"
    mine, _others = split_partitions(kit)
    ends, _registry, connector = await started_owning(kit, mine, rule)
    try:
        topic = kit.backend.topic
        owned = {(topic, p): ends[(topic, p)] for p in mine}
        named = set(connector.checkpoint().partitions())
        if named != set(owned):
            raise ConformanceError(rule, f"the checkpoint names {sorted(named)}; this node owns {sorted(owned)}")
        reading = await read_until(kit, connector, owned, rule)
        foreign = sorted(set(reading.offsets) - set(owned))
        if foreign:
            raise ConformanceError(rule, f"rows of {foreign}, whose vnodes another node owns")
        expect_exact(kit, rule, reading, {tp: 0 for tp in owned}, owned)
        if connector.checkpoint().assignment_version != 1:
            raise ConformanceError(rule, f"the checkpoint is at assignment version "
                                         f"{connector.checkpoint().assignment_version}, not the published 1")
    finally:
        await close_generation(connector)


async def acquisition_at_the_offered_cursors(kit: ConnectorKit) -> None:
    rule = "acquisition-at-offered-cursors"
    mine, others = split_partitions(kit)
    ends, registry, connector = await started_owning(kit, mine, rule)
    try:
        topic = kit.backend.topic
        owned = {(topic, p): ends[(topic, p)] for p in mine}
        await read_until(kit, connector, owned, rule)
        registry.publish(2, owners_giving(kit, mine | others))  # the other vnodes come to this node
        gained = frozenset((topic, p) for p in others)
        await drive_until(kit, connector, lambda: connector.acquisition_needed() is not None, rule,
                           "acquisition_needed() after version 2 gave this node partitions")
        needed = connector.acquisition_needed()
        if needed != (2, gained):
            raise ConformanceError(rule, f"acquisition_needed() is {needed}, not (2, {sorted(gained)})")
        if connector.checkpoint_ready() or connector.try_checkpoint() is not None:
            raise ConformanceError(rule, "checkpoint_ready() / try_checkpoint() report a cursor before the "
                                         "gained partitions were acquired")
        offered = {(t, p): ends[(t, p)] // 2 + 1 for t, p in gained}  # where the manifest says they are
        connector.acquire_partitions({f"{t}:{p}": o for (t, p), o in offered.items()}, 2)
        await drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after acquiring")
        cursor = connector.checkpoint()
        wrong = {f"{t}:{p}": (cursor.partitions().get((t, p)), o) for (t, p), o in offered.items()
                 if cursor.partitions().get((t, p)) != o}
        if wrong or cursor.assignment_version != 2:
            raise ConformanceError(rule, f"after acquiring, the checkpoint (version {cursor.assignment_version}) "
                                         f"differs from the offered cursors (have, offered): {wrong}")
        reading = await read_until(kit, connector, {tp: ends[tp] for tp in gained}, rule)
        expect_exact(kit, rule, reading, offered, {tp: ends[tp] for tp in gained})
    finally:
        await close_generation(connector)


async def _drain(kit: ConnectorKit, outcome: SourceDrainOutcome) -> None:
    """A round moves the vnodes of ``others`` away from this node while records keep arriving: only
    they pause, at an exact cut, while ``mine`` are read on; then ``outcome`` resolves it."""
    rule = f"drain-{outcome.value}"
    mine, others = split_partitions(kit)
    topic = kit.backend.topic
    kept, moving = frozenset((topic, p) for p in mine), frozenset((topic, p) for p in others)
    ends, registry, connector = await started_owning(kit, mine | others, rule)
    try:
        reading = await read_until(kit, connector, ends, rule)
        reading.offsets.clear()
        more = append_everywhere(kit, RECORDS)  # in flight across the drain
        target = owners_giving(kit, mine)
        round_ = AssignmentDrainId.for_round(registry.snapshot(), target, 1)
        registry.begin_round(round_, target)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)  # idempotent
        await poll_until_drained(kit, connector, round_, reading, rule)
        cut = {tp: o for tp, o in connector.checkpoint().partitions().items() if tp in moving}
        if set(cut) != moving:
            raise ConformanceError(rule, f"the checkpoint at the drain's cut names {sorted(cut)}, not every moving "
                                         f"partition {sorted(moving)}")
        await read_until(kit, connector, {tp: more[tp] for tp in kept}, rule, reading)  # the others read on
        expect_exact(kit, rule, reading, ends, {tp: more[tp] for tp in kept})
        expect_exact(kit, rule, reading, ends, cut)  # the moving ones: exactly up to the cut, not past it
        after = connector.checkpoint().partitions()
        if any(after.get(tp) != o for tp, o in cut.items()):
            raise ConformanceError(rule, f"a paused partition's cursor moved past its cut {cut}: {after}")
        registry.clear_round(round_)
        resolution = SourceDrainResolution(round_, outcome)
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s)
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s)  # idempotent
        if outcome is SourceDrainOutcome.COMMIT:
            registry.publish(2, target)
            await drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after the commit")
            checkpoint = connector.checkpoint()
            if set(checkpoint.partitions()) != kept or checkpoint.assignment_version != 2:
                raise ConformanceError(rule, f"after the commit the checkpoint names {sorted(checkpoint.partitions())} "
                                             f"at version {checkpoint.assignment_version}; the target is {sorted(kept)} at 2")
            return
        registry.publish(2, owners_giving(kit, mine | others))  # an abort publishes the predecessor's owners
        await drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after the abort")
        resumed = Reading()
        await read_until(kit, connector, more, rule, resumed)  # the paused partitions resume at their cut
        expect_exact(kit, rule, resumed, cut, {tp: more[tp] for tp in moving})
    finally:
        await close_generation(connector)


async def poll_until_drained(kit: ConnectorKit, connector: SourceConnector, round_: AssignmentDrainId,
                              reading: Reading, rule: str) -> None:
    """Drive and poll (the runtime polls through a drain) until ``poll_drain_ready(round_)``."""
    deadline = time.monotonic() + kit.read_timeout_s
    while True:
        connector.drive_control_plane()
        if connector.poll_drain_ready(round_):
            return
        if time.monotonic() > deadline:
            raise ConformanceError(rule, f"poll_drain_ready() stayed False for {kit.read_timeout_s:.0f} s")
        batch = await connector.poll_batch(POLL_RECORDS) if connector.checkpoint_ready() else None
        if batch is not None:
            take_batch(kit, batch, reading)
        else:
            await asyncio.sleep(0.02)


async def drain_commit(kit: ConnectorKit) -> None:
    await _drain(kit, SourceDrainOutcome.COMMIT)


async def drain_abort(kit: ConnectorKit) -> None:
    await _drain(kit, SourceDrainOutcome.ABORT)


async def drain_commit_handoff(kit: ConnectorKit) -> None:
    """The recipient side of a committed round: this node gains the vnodes of ``others``. The
    handoff cursors are a manifest's: every partition's, the kept ones behind their live cursor."""
    rule = "drain-commit-handoff"
    mine, others = split_partitions(kit)
    topic = kit.backend.topic
    kept, gained = frozenset((topic, p) for p in mine), frozenset((topic, p) for p in others)
    ends, registry, connector = await started_owning(kit, mine, rule)
    try:
        reading = await read_until(kit, connector, {tp: ends[tp] for tp in kept}, rule)
        live = connector.checkpoint().partitions()
        target = owners_giving(kit, mine | others)
        round_ = AssignmentDrainId.for_round(registry.snapshot(), target, 1)
        registry.begin_round(round_, target)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)
        await poll_until_drained(kit, connector, round_, reading, rule)
        registry.clear_round(round_)
        # the manifest holding the cut: the gained partitions where their old owner left them, the
        # kept ones where this node acked them an epoch ago (behind the live cursor: never applied)
        handoff = {tp: ends[tp] // 2 + 1 for tp in gained} | {tp: max(live[tp] - 3, 0) for tp in kept}
        resolution = SourceDrainResolution(round_, SourceDrainOutcome.COMMIT)
        lacking = min(gained)
        try:  # both forms the protocol takes: a SourceCheckpoint here, the runtime's mapping below
            await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s,
                                         SourceCheckpoint.from_partitions({tp: o for tp, o in handoff.items()
                                                                           if tp != lacking}))
        except DrainError:
            pass  # refused, nothing changed: the runtime resolves the round again
        else:
            raise ConformanceError(rule, f"finish_drain(COMMIT) accepted handoff cursors that lack the gained "
                                         f"partition {lacking[0]}:{lacking[1]} instead of raising DrainError")
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s, _keyed(handoff))
        registry.publish(2, target)
        await drive_until(kit, connector, connector.checkpoint_ready, rule,
                           "checkpoint_ready() after the committed target was published")
        needed = connector.acquisition_needed()
        if needed is not None:
            raise ConformanceError(rule, f"after a commit with handoff cursors, acquisition_needed() is {needed}")
        want = {tp: live[tp] for tp in kept} | {tp: handoff[tp] for tp in gained}
        checkpoint = connector.checkpoint()
        if checkpoint.partitions() != want or checkpoint.assignment_version != 2:
            have = checkpoint.partitions()
            wrong = {f"{t}:{p}": (have.get((t, p)), o) for (t, p), o in sorted(want.items()) if have.get((t, p)) != o}
            raise ConformanceError(rule, f"after the commit the checkpoint (version {checkpoint.assignment_version}, "
                                         f"want 2) differs: (have, want) {wrong}; extra "
                                         f"{sorted(set(have) - set(want))}")
        more = append_everywhere(kit, 5)
        after = Reading()
        await read_until(kit, connector, more, rule, after)
        expect_exact(kit, rule, after, want, more)
    finally:
        await close_generation(connector)


def _keyed(cursors: dict[TopicPartitionId, int]) -> dict[str, int]:
    """Cursors as a manifest holds them: ``"topic:partition" -> next offset``."""
    return {f"{t}:{p}": o for (t, p), o in sorted(cursors.items())}
