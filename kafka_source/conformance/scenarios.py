"""The protocol's contract, rule by rule, as scenarios over a :class:`ConnectorKit`.

Each scenario is a coroutine function taking the kit; it builds its own generations (never reusing
one), drives them as the node runtime does, closes them, and raises :class:`ConformanceError` naming
its rule when the connector breaks it. Scenarios append to the backend's log and never assume it
is empty: they measure from the ends they read first. :data:`SCENARIOS` maps each rule's name to
its scenario and the rule in one sentence (``docs/connector-guide.md`` has them in full).
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode
from laminar_kafka.kafka_source.checkpoint import SourceCheckpoint
from laminar_kafka.kafka_source.connector import (
    CheckpointAttempt,
    DeliveryGuarantee,
    InitialPosition,
    ResumePosition,
    SourceBatch,
    SourceConnector,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourcePosition,
    SourceStart,
    SourceTopology,
)
from laminar_kafka.kafka_source.conformance.backend import ConformanceError, ConformanceSkipped, ConnectorKit
from laminar_kafka.kafka_source.errors import FatalError

__all__ = ["SCENARIOS", "Scenario", "Reading", "read_until", "start_generation"]

#: records a scenario appends to each partition it reads
RECORDS = 25
#: ``max_records`` of every poll: small, so a scenario sees many batches and cursors
POLL_RECORDS = 7


@dataclass(frozen=True)
class Scenario:
    """One rule: its sentence and the coroutine function that checks it."""

    rule: str
    check: Callable[[ConnectorKit], Awaitable[None]]


@dataclass
class Reading:
    """What one generation returned: each partition's offsets in the order read, and every batch's
    checkpoint in order."""

    offsets: dict[TopicPartitionId, list[int]] = field(default_factory=dict)
    checkpoints: list[SourceCheckpoint] = field(default_factory=list)


async def start_generation(kit: ConnectorKit, position: SourcePosition | None = None) -> SourceConnector:
    """A fresh generation of the connector, started at ``position`` (its initial position by default)."""
    connector = kit.make_connector()
    await connector.start(SourceStart(kit.config, position or InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE))
    return connector


def resume_at(cursors: Mapping[TopicPartitionId, int], epoch: int = 1) -> ResumePosition:
    """A resume position at exactly ``cursors`` (as the node builds one from a manifest)."""
    return ResumePosition(CheckpointAttempt(epoch, epoch), SourceCheckpoint.from_partitions(cursors))


async def read_until(
    kit: ConnectorKit, connector: SourceConnector, ends: Mapping[TopicPartitionId, int], rule: str,
    reading: Reading | None = None,
) -> Reading:
    """Poll ``connector`` until its checkpoint reaches ``ends`` for every partition there, checking
    on the way that each batch's checkpoint is bound to it (rule ``checkpoint-bound-to-batch``):
    every row's offset is below the batch's cursor of its partition, no cursor moves backwards, and
    no later row of a partition has an offset below a cursor returned before it."""
    reading = reading or Reading()
    deadline = time.monotonic() + kit.read_timeout_s
    ready = connector.data_ready_notify()
    while True:
        batch = await connector.poll_batch(POLL_RECORDS)
        if batch is not None:
            _take(kit, batch, reading)
        cursor = connector.checkpoint().partitions()
        if all(cursor.get(tp, -1) >= end for tp, end in ends.items()):
            return reading
        if time.monotonic() > deadline:
            behind = {f"{t}:{p}": (cursor.get((t, p)), end) for (t, p), end in ends.items() if cursor.get((t, p), -1) < end}
            raise ConformanceError(rule, f"the checkpoint did not reach the log's ends in {kit.read_timeout_s:.0f} s: "
                                         f"(cursor, end) {behind}")
        if batch is None:
            if ready is not None:
                try:
                    await asyncio.wait_for(ready.wait(), 0.1)
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0.02)


def _take(kit: ConnectorKit, batch: SourceBatch, reading: Reading) -> None:
    rule = "checkpoint-bound-to-batch"
    records = batch.records
    topics = records.column(kit.topic_column).to_pylist()
    partitions = records.column(kit.partition_column).to_pylist()
    offsets = records.column(kit.offset_column).to_pylist()
    cursor = batch.checkpoint.partitions()
    previous = reading.checkpoints[-1].partitions() if reading.checkpoints else {}
    for tp, offset in previous.items():
        if cursor.get(tp, offset) < offset:
            raise ConformanceError(rule, f"{tp[0]}:{tp[1]}'s cursor moved back from {offset} to {cursor[tp]}")
    for topic, partition, offset in zip(topics, partitions, offsets):
        tp = (topic, partition)
        if tp not in cursor or offset >= cursor[tp]:
            raise ConformanceError(rule, f"a row of {topic}:{partition} at offset {offset} is not below its batch's "
                                         f"cursor {cursor.get(tp)}")
        if offset < previous.get(tp, 0):
            raise ConformanceError(rule, f"a row of {topic}:{partition} at offset {offset} came after a cursor of "
                                         f"{previous[tp]}: resuming there would skip it")
        reading.offsets.setdefault(tp, []).append(offset)
    reading.checkpoints.append(batch.checkpoint)


def _ends(kit: ConnectorKit) -> dict[TopicPartitionId, int]:
    return {(kit.backend.topic, p): kit.backend.end(p) for p in range(kit.backend.partitions())}


def _append_everywhere(kit: ConnectorKit, count: int = RECORDS) -> dict[TopicPartitionId, int]:
    for partition in range(kit.backend.partitions()):
        kit.backend.append(partition, count)
    return _ends(kit)


def _expect_exact(rule: str, reading: Reading, starts: Mapping[TopicPartitionId, int],
                  ends: Mapping[TopicPartitionId, int]) -> None:
    """Each partition read from exactly its start to its end, once each, in offset order."""
    for tp, end in ends.items():
        got = reading.offsets.get(tp, [])
        want = list(range(starts.get(tp, 0), end))
        if got != want:
            missing = sorted(set(want) - set(got))[:5]
            repeated = sorted({o for o in got if got.count(o) > 1})[:5]
            raise ConformanceError(rule, f"{tp[0]}:{tp[1]} read {len(got)} rows for offsets {want[:1]}..{end - 1}: "
                                         f"missing {missing}, repeated {repeated}, first {got[:3]}")


async def _closed(connector: SourceConnector) -> None:
    await connector.close()
    tracker = connector.terminal_task_tracker()
    if tracker is not None and not await tracker.wait(30):
        raise ConformanceError("close-ends-the-generation", "its tracked tasks were still running 30 s after close()")


# -- the scenarios -----------------------------------------------------------------------------------

async def initial_position_reads_everything_once(kit: ConnectorKit) -> None:
    rule = "initial-position-exact"
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        start = connector.checkpoint().partitions()
        if set(start) != set(ends):
            raise ConformanceError(rule, f"the checkpoint after start() names {sorted(start)}, not every "
                                         f"partition {sorted(ends)}")
        reading = await read_until(kit, connector, ends, rule)
        _expect_exact(rule, reading, {tp: 0 for tp in ends}, ends)
    finally:
        await _closed(connector)


async def resume_starts_exactly_at_the_checkpoint(kit: ConnectorKit) -> None:
    rule = "resume-exact"
    ends = _append_everywhere(kit)
    cursors = {tp: end // 2 + i % 3 for i, (tp, end) in enumerate(sorted(ends.items()))}  # uneven, inside the log
    connector = await start_generation(kit, resume_at(cursors))
    try:
        if connector.checkpoint().partitions() != cursors:
            raise ConformanceError(rule, f"the checkpoint after start() is {dict(connector.checkpoint().offsets)}, "
                                         f"not the resume cursors")
        more = _append_everywhere(kit, 5)  # records appended after the start are read too
        reading = await read_until(kit, connector, more, rule)
        _expect_exact(rule, reading, cursors, more)
    finally:
        await _closed(connector)


async def checkpoint_is_bound_to_the_batches_returned(kit: ConnectorKit) -> None:
    rule = "checkpoint-bound-to-batch"
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        reading = await read_until(kit, connector, ends, rule)  # checks every batch on the way
        if len(reading.checkpoints) < 2:
            raise ConformanceError(rule, f"{sum(ends.values())} records came in {len(reading.checkpoints)} batch(es) "
                                         f"at max_records={POLL_RECORDS}")
    finally:
        await _closed(connector)
    # every batch's cursor is a place to resume from: the rows after it, nothing else
    middle = reading.checkpoints[len(reading.checkpoints) // 2].partitions()
    resumed = await start_generation(kit, resume_at(middle))
    try:
        again = await read_until(kit, resumed, ends, rule)
        _expect_exact(rule, again, middle, ends)
    finally:
        await _closed(resumed)


async def try_checkpoint_is_the_checkpoint_when_ready(kit: ConnectorKit) -> None:
    rule = "try-checkpoint"
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        await read_until(kit, connector, ends, rule)
        if not connector.checkpoint_ready():
            raise ConformanceError(rule, "checkpoint_ready() is False for a started generation that owns its partitions")
        attempt = connector.try_checkpoint()
        if attempt != connector.checkpoint():
            raise ConformanceError(rule, f"try_checkpoint() gave {attempt} while ready, checkpoint() "
                                         f"{connector.checkpoint()}")
    finally:
        await _closed(connector)


async def add_partitions_reads_a_new_partition_from_its_start(kit: ConnectorKit) -> None:
    rule = "add-partitions"
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        await read_until(kit, connector, ends, rule)
        added = kit.backend.add_partition()
        tp = (kit.backend.topic, added)
        kit.backend.append(added, RECORDS)
        connector.add_partitions([tp])
        connector.add_partitions([tp])  # idempotent
        reading = await read_until(kit, connector, {tp: kit.backend.end(added)}, rule)
        _expect_exact(rule, reading, {tp: 0}, {tp: kit.backend.end(added)})
        if tp not in connector.checkpoint().partitions():
            raise ConformanceError(rule, f"the checkpoint does not name the added partition {tp[0]}:{tp[1]}")
    finally:
        await _closed(connector)


async def advisory_commits_follow_committed_epochs_only(kit: ConnectorKit) -> None:
    rule = "advisory-commits"
    before = kit.backend.committed_offsets()
    if before is None:
        raise ConformanceSkipped(f"{type(kit.backend).__name__} cannot observe advisory commits")
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        reading = await read_until(kit, connector, ends, rule)
        await asyncio.sleep(0)  # nothing is committed before an epoch is: the read alone commits nothing
        now = kit.backend.committed_offsets() or {}
        moved = {p: o for p, o in now.items() if before.get(p) != o}
        if moved:
            raise ConformanceError(rule, f"offsets {moved} were committed before notify_epoch_committed")
        cut = reading.checkpoints[len(reading.checkpoints) // 2]
        await connector.notify_epoch_committed(1, cut)
        want = {p: o for (_t, p), o in cut.partitions().items() if o > 0}  # a cursor at 0 has nothing to commit
        await _until(lambda: _at_least(kit.backend.committed_offsets() or {}, want), kit.read_timeout_s, rule,
                     f"the committed offsets {want} of epoch 1")
        older = reading.checkpoints[0]
        await connector.notify_epoch_committed(2, older)  # an older cursor never moves a commit back
        await connector.notify_epoch_committed(3, SourceCheckpoint.empty())
        final = kit.backend.committed_offsets() or {}
        back = {p: (final.get(p), o) for p, o in want.items() if final.get(p, -1) < o}
        if back:
            raise ConformanceError(rule, f"advisory commits moved backwards (now, before): {back}")
    finally:
        await _closed(connector)


async def close_ends_the_generation(kit: ConnectorKit) -> None:
    rule = "close-ends-the-generation"
    ends = _append_everywhere(kit)
    connector = await start_generation(kit)
    await read_until(kit, connector, ends, rule)
    await _closed(connector)
    try:
        batch = await connector.poll_batch(POLL_RECORDS)
    except FatalError:
        return
    raise ConformanceError(rule, f"poll_batch() after close() returned {batch!r} instead of raising FatalError")


async def recovery_identity_is_deterministic(kit: ConnectorKit) -> None:
    rule = "recovery-identity"
    connector, again = kit.make_connector(), kit.make_connector()
    first = connector.recovery_identity_options(kit.config)
    second = again.recovery_identity_options(type(kit.config)(kit.config.connector_type, dict(kit.config.properties)))
    if first != second:
        raise ConformanceError(rule, f"two equal configurations gave {first} and {second}")
    if first is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in first.items()):
            raise ConformanceError(rule, f"options must map str to str: {first}")
        json.dumps(first, sort_keys=True)
    contract = connector.contract(kit.config)
    if contract.topology is not SourceTopology.SPLITTABLE or not contract.replayable:
        raise ConformanceError(rule, f"an assignment-scoped source is replayable and splittable; contract {contract}")


#: the identity and vnode count the vnode scenarios route with, and the node the generation is
IDENTITY, VNODES, SELF = "conformance", 16, 1


def _owners_giving(kit: ConnectorKit, mine: frozenset[int]) -> tuple[int, ...]:
    """Owners of :data:`VNODES` vnodes giving :data:`SELF` the vnodes of partitions ``mine`` and
    node 2 every other vnode."""
    topic = kit.backend.topic
    vnodes = {partition_vnode(IDENTITY, topic, p, VNODES) for p in mine}
    return tuple(SELF if v in vnodes else 2 for v in range(VNODES))


def _split(kit: ConnectorKit) -> tuple[frozenset[int], frozenset[int]]:
    """The partitions this node owns first (partition 0's vnode) and the others (at least one:
    a partition of another vnode)."""
    topic, count = kit.backend.topic, kit.backend.partitions()
    first = partition_vnode(IDENTITY, topic, 0, VNODES)
    mine = frozenset(p for p in range(count) if partition_vnode(IDENTITY, topic, p, VNODES) == first)
    others = frozenset(range(count)) - mine
    if not others:
        raise ConformanceSkipped(f"every partition of {topic} routes to one vnode: nothing to split")
    return mine, others


async def _start_scoped(kit: ConnectorKit, registry: VnodeRegistry) -> SourceConnector:
    connector = kit.make_connector()
    connector.set_vnode_assignment(IDENTITY, registry, SELF)
    await connector.start(SourceStart(kit.config, InitialPosition(), DeliveryGuarantee.EXACTLY_ONCE))
    return connector


async def _drive_until(kit: ConnectorKit, connector: SourceConnector, predicate: Callable[[], bool],
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
    mine, others = _split(kit)
    ends = _append_everywhere(kit)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, _owners_giving(kit, mine))
    connector = await _start_scoped(kit, registry)
    try:
        topic = kit.backend.topic
        owned = {(topic, p): ends[(topic, p)] for p in mine}
        await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after start")
        named = set(connector.checkpoint().partitions())
        if named != set(owned):
            raise ConformanceError(rule, f"the checkpoint names {sorted(named)}; this node owns {sorted(owned)}")
        reading = await read_until(kit, connector, owned, rule)
        foreign = sorted(set(reading.offsets) - set(owned))
        if foreign:
            raise ConformanceError(rule, f"rows of {foreign}, whose vnodes another node owns")
        _expect_exact(rule, reading, {tp: 0 for tp in owned}, owned)
        if connector.checkpoint().assignment_version != 1:
            raise ConformanceError(rule, f"the checkpoint is at assignment version "
                                         f"{connector.checkpoint().assignment_version}, not the published 1")
    finally:
        await _closed(connector)


async def acquisition_at_the_offered_cursors(kit: ConnectorKit) -> None:
    rule = "acquisition-at-offered-cursors"
    mine, others = _split(kit)
    ends = _append_everywhere(kit)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, _owners_giving(kit, mine))
    connector = await _start_scoped(kit, registry)
    try:
        topic = kit.backend.topic
        owned = {(topic, p): ends[(topic, p)] for p in mine}
        await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after start")
        await read_until(kit, connector, owned, rule)
        registry.publish(2, _owners_giving(kit, mine | others))  # the other vnodes come to this node
        gained = frozenset((topic, p) for p in others)
        await _drive_until(kit, connector, lambda: connector.acquisition_needed() is not None, rule,
                           "acquisition_needed() after version 2 gave this node partitions")
        needed = connector.acquisition_needed()
        if needed != (2, gained):
            raise ConformanceError(rule, f"acquisition_needed() is {needed}, not (2, {sorted(gained)})")
        if connector.checkpoint_ready() or connector.try_checkpoint() is not None:
            raise ConformanceError(rule, "checkpoint_ready() / try_checkpoint() report a cursor before the "
                                         "gained partitions were acquired")
        offered = {(t, p): ends[(t, p)] // 2 + 1 for t, p in gained}  # where the manifest says they are
        connector.acquire_partitions({f"{t}:{p}": o for (t, p), o in offered.items()}, 2)
        await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after acquiring")
        cursor = connector.checkpoint()
        wrong = {f"{t}:{p}": (cursor.partitions().get((t, p)), o) for (t, p), o in offered.items()
                 if cursor.partitions().get((t, p)) != o}
        if wrong or cursor.assignment_version != 2:
            raise ConformanceError(rule, f"after acquiring, the checkpoint (version {cursor.assignment_version}) "
                                         f"differs from the offered cursors (have, offered): {wrong}")
        reading = await read_until(kit, connector, {tp: ends[tp] for tp in gained}, rule)
        _expect_exact(rule, reading, offered, {tp: ends[tp] for tp in gained})
    finally:
        await _closed(connector)


async def _drain(kit: ConnectorKit, outcome: SourceDrainOutcome) -> None:
    """A round moves the vnodes of ``others`` away from this node while records keep arriving: only
    they pause, at an exact cut, while ``mine`` are read on; then ``outcome`` resolves it."""
    rule = f"drain-{outcome.value}"
    mine, others = _split(kit)
    topic = kit.backend.topic
    kept, moving = frozenset((topic, p) for p in mine), frozenset((topic, p) for p in others)
    ends = _append_everywhere(kit)
    registry = VnodeRegistry(VNODES)
    registry.publish(1, _owners_giving(kit, mine | others))
    connector = await _start_scoped(kit, registry)
    try:
        await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after start")
        reading = await read_until(kit, connector, ends, rule)
        reading.offsets.clear()
        more = _append_everywhere(kit, RECORDS)  # in flight across the drain
        target = _owners_giving(kit, mine)
        round_ = AssignmentDrainId.for_round(registry.snapshot(), target, 1)
        registry.begin_round(round_, target)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)
        connector.begin_drain(SourceDrainRequest(round_), time.monotonic() + kit.read_timeout_s)  # idempotent
        await _poll_until_drained(kit, connector, round_, reading, rule)
        cut = {tp: o for tp, o in connector.checkpoint().partitions().items() if tp in moving}
        if set(cut) != moving:
            raise ConformanceError(rule, f"the checkpoint at the drain's cut names {sorted(cut)}, not every moving "
                                         f"partition {sorted(moving)}")
        await read_until(kit, connector, {tp: more[tp] for tp in kept}, rule, reading)  # the others read on
        _expect_exact(rule, reading, ends, {tp: more[tp] for tp in kept})
        _expect_exact(rule, reading, ends, cut)  # the moving ones: exactly up to the cut, not past it
        after = connector.checkpoint().partitions()
        if any(after.get(tp) != o for tp, o in cut.items()):
            raise ConformanceError(rule, f"a paused partition's cursor moved past its cut {cut}: {after}")
        registry.clear_round(round_)
        resolution = SourceDrainResolution(round_, outcome)
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s)
        await connector.finish_drain(resolution, time.monotonic() + kit.read_timeout_s)  # idempotent
        if outcome is SourceDrainOutcome.COMMIT:
            registry.publish(2, target)
            await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after the commit")
            checkpoint = connector.checkpoint()
            if set(checkpoint.partitions()) != kept or checkpoint.assignment_version != 2:
                raise ConformanceError(rule, f"after the commit the checkpoint names {sorted(checkpoint.partitions())} "
                                             f"at version {checkpoint.assignment_version}; the target is {sorted(kept)} at 2")
            return
        registry.publish(2, _owners_giving(kit, mine | others))  # an abort publishes the predecessor's owners
        await _drive_until(kit, connector, connector.checkpoint_ready, rule, "checkpoint_ready() after the abort")
        resumed = Reading()
        await read_until(kit, connector, more, rule, resumed)  # the paused partitions resume at their cut
        _expect_exact(rule, resumed, cut, {tp: more[tp] for tp in moving})
    finally:
        await _closed(connector)


async def _poll_until_drained(kit: ConnectorKit, connector: SourceConnector, round_: AssignmentDrainId,
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
            _take(kit, batch, reading)
        else:
            await asyncio.sleep(0.02)


async def drain_commit(kit: ConnectorKit) -> None:
    await _drain(kit, SourceDrainOutcome.COMMIT)


async def drain_abort(kit: ConnectorKit) -> None:
    await _drain(kit, SourceDrainOutcome.ABORT)


async def _until(predicate: Callable[[], bool], timeout_s: float, rule: str, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise ConformanceError(rule, f"{what} did not come within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


def _at_least(have: Mapping[int, int], want: Mapping[int, int]) -> bool:
    return all(have.get(p, -1) >= o for p, o in want.items())


SCENARIOS: dict[str, Scenario] = {
    "initial-position-exact": Scenario(
        "started at its initial position, a generation names every partition in its first checkpoint "
        "and reads each from its first offset to its end, every record once, in offset order",
        initial_position_reads_everything_once),
    "resume-exact": Scenario(
        "started at a checkpoint, its first checkpoint is that cursor and it reads each partition from "
        "exactly there, records appended later included",
        resume_starts_exactly_at_the_checkpoint),
    "checkpoint-bound-to-batch": Scenario(
        "each batch's checkpoint is the cursor after its rows: no row at or past it, no later row before "
        "it, never backwards; resuming at any batch's cursor reads exactly the rows after it",
        checkpoint_is_bound_to_the_batches_returned),
    "try-checkpoint": Scenario(
        "a started generation that owns its partitions is checkpoint_ready() and try_checkpoint() is "
        "its checkpoint()",
        try_checkpoint_is_the_checkpoint_when_ready),
    "add-partitions": Scenario(
        "add_partitions() (idempotent) has a running generation read a new partition from its first "
        "offset, and its checkpoint name it",
        add_partitions_reads_a_new_partition_from_its_start),
    "advisory-commits": Scenario(
        "advisory offsets are committed only after notify_epoch_committed(), at that epoch's cursors, "
        "and never move backwards",
        advisory_commits_follow_committed_epochs_only),
    "close-ends-the-generation": Scenario(
        "after close() its tracked tasks end and poll_batch() raises FatalError",
        close_ends_the_generation),
    "vnode-scoped-reading": Scenario(
        "after set_vnode_assignment(), a generation reads only the partitions whose vnode its node owns "
        "at the published version, from its start position, and its checkpoint names exactly them at "
        "that version",
        vnode_scoped_reading),
    "acquisition-at-offered-cursors": Scenario(
        "a published version that gives the node partitions outside a round makes acquisition_needed() "
        "name exactly them and holds the checkpoint until acquire_partitions(); then they read from "
        "exactly the offered cursors",
        acquisition_at_the_offered_cursors),
    "drain-commit": Scenario(
        "begin_drain() (idempotent) pauses only the partitions that change owner, at an exact cut: they "
        "are read up to it and not past it while the others are read on; poll_drain_ready() turns True; "
        "finish_drain(COMMIT) leaves the target's partitions at the target version",
        drain_commit),
    "drain-abort": Scenario(
        "as drain-commit up to the cut; finish_drain(ABORT) (idempotent) resumes the paused partitions "
        "at exactly their cut",
        drain_abort),
    "recovery-identity": Scenario(
        "recovery_identity_options() is deterministic and I/O-free (str -> str), and the contract is "
        "replayable and splittable",
        recovery_identity_is_deterministic),
}
