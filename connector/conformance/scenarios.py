"""The protocol's contract, rule by rule, as scenarios over a :class:`ConnectorKit`.

Each scenario is a coroutine function taking the kit; it builds its own generations (never reusing
one), drives them as the node runtime does, closes them, and raises :class:`ConformanceError` naming
its rule when the connector breaks it. Scenarios append to the backend's log and never assume it
is empty: they measure from the ends they read first. :data:`SCENARIOS` maps each rule's name to
its scenario and the rule in one sentence (``docs/connector-guide.md`` has them in full); the vnode
mode's are in :mod:`laminar_kafka.connector.conformance.vnode_scenarios`, the declared policies'
in :mod:`~laminar_kafka.connector.conformance.policy_scenarios` and
:mod:`~laminar_kafka.connector.conformance.drain_cancellation_scenarios`, the shared reading in
:mod:`laminar_kafka.connector.conformance.reading`.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time

from laminar_kafka.connector.checkpoint import UNNAMED, SourceCheckpoint
from laminar_kafka.connector.conformance.backend import ConformanceError, ConformanceSkipped, ConnectorKit
from laminar_kafka.connector.conformance.drain_cancellation_scenarios import cancelled_finish_drain
from laminar_kafka.connector.conformance.policy_scenarios import cancellation_policy, checkpoint_unavailable_policy
from laminar_kafka.connector.conformance.reading import (
    POLL_RECORDS,
    RECORDS,
    Scenario,
    append_everywhere,
    at_least,
    close_generation,
    expect_exact,
    read_until,
    resume_at,
    start_generation,
    until,
)
from laminar_kafka.connector.conformance.vnode_scenarios import (
    acquisition_at_the_offered_cursors,
    drain_abort,
    drain_commit,
    drain_commit_handoff,
    vnode_scoped_reading,
)
from laminar_kafka.connector.errors import CheckpointError, FatalError
from laminar_kafka.connector.protocol import (
    CheckpointAttempt,
    DeliveryGuarantee,
    ResumePosition,
    SourceStart,
    SourceTopology,
)

__all__ = ["SCENARIOS", "Scenario"]

#: the longest a thread a generation started may take to end after its close() (and tracker)
THREAD_GRACE_S = 5.0

# -- the scenarios -----------------------------------------------------------------------------------

async def initial_position_reads_everything_once(kit: ConnectorKit) -> None:
    rule = "initial-position-exact"
    ends = append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        start = connector.checkpoint().partitions()
        if set(start) != set(ends):
            raise ConformanceError(rule, f"the checkpoint after start() names {sorted(start)}, not every "
                                         f"partition {sorted(ends)}")
        reading = await read_until(kit, connector, ends, rule)
        expect_exact(kit, rule, reading, {tp: 0 for tp in ends}, ends)
    finally:
        await close_generation(connector)


async def resume_starts_exactly_at_the_checkpoint(kit: ConnectorKit) -> None:
    rule = "resume-exact"
    ends = append_everywhere(kit)
    cursors = {tp: end // 2 + i % 3 for i, (tp, end) in enumerate(sorted(ends.items()))}  # uneven, inside the log
    connector = await start_generation(kit, resume_at(cursors))
    try:
        if connector.checkpoint().partitions() != cursors:
            raise ConformanceError(rule, f"the checkpoint after start() is {dict(connector.checkpoint().offsets)}, "
                                         f"not the resume cursors")
        more = append_everywhere(kit, 5)  # records appended after the start are read too
        reading = await read_until(kit, connector, more, rule)
        expect_exact(kit, rule, reading, cursors, more)
    finally:
        await close_generation(connector)


async def checkpoint_is_bound_to_the_batches_returned(kit: ConnectorKit) -> None:
    rule = "checkpoint-bound-to-batch"
    ends = append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        reading = await read_until(kit, connector, ends, rule)  # checks every batch on the way
        if len(reading.checkpoints) < 2:
            raise ConformanceError(rule, f"{sum(ends.values())} records came in {len(reading.checkpoints)} batch(es) "
                                         f"at max_records={POLL_RECORDS}")
    finally:
        await close_generation(connector)
    # every batch's cursor is a place to resume from: the rows after it, nothing else
    middle = reading.checkpoints[len(reading.checkpoints) // 2].partitions()
    resumed = await start_generation(kit, resume_at(middle))
    try:
        again = await read_until(kit, resumed, ends, rule)
        expect_exact(kit, rule, again, middle, ends)
    finally:
        await close_generation(resumed)


async def try_checkpoint_is_the_checkpoint_when_ready(kit: ConnectorKit) -> None:
    rule = "try-checkpoint"
    ends = append_everywhere(kit)
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
        await close_generation(connector)


async def add_partitions_reads_a_new_partition_from_its_start(kit: ConnectorKit) -> None:
    rule = "add-partitions"
    ends = append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        await read_until(kit, connector, ends, rule)
        added = kit.backend.add_partition()
        tp = (kit.backend.topic, added)
        kit.backend.append(added, RECORDS)
        connector.add_partitions([tp])
        connector.add_partitions([tp])  # idempotent
        reading = await read_until(kit, connector, {tp: kit.backend.end(added)}, rule)
        expect_exact(kit, rule, reading, {tp: 0}, {tp: kit.backend.end(added)})
        if tp not in connector.checkpoint().partitions():
            raise ConformanceError(rule, f"the checkpoint does not name the added partition {tp[0]}:{tp[1]}")
    finally:
        await close_generation(connector)


async def advisory_commits_follow_committed_epochs_only(kit: ConnectorKit) -> None:
    rule = "advisory-commits"
    before = kit.backend.committed_offsets()
    if before is None:
        raise ConformanceSkipped(f"{type(kit.backend).__name__} cannot observe advisory commits")
    ends = append_everywhere(kit)
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
        await until(lambda: at_least(kit.backend.committed_offsets() or {}, want), kit.read_timeout_s, rule,
                     f"the committed offsets {want} of epoch 1")
        older = reading.checkpoints[0]
        await connector.notify_epoch_committed(2, older)  # an older cursor never moves a commit back
        await connector.notify_epoch_committed(3, SourceCheckpoint.empty())
        final = kit.backend.committed_offsets() or {}
        back = {p: (final.get(p), o) for p, o in want.items() if final.get(p, -1) < o}
        if back:
            raise ConformanceError(rule, f"advisory commits moved backwards (now, before): {back}")
    finally:
        await close_generation(connector)


async def close_ends_the_generation(kit: ConnectorKit) -> None:
    rule = "close-ends-the-generation"
    ends = append_everywhere(kit)
    connector = await start_generation(kit)
    await read_until(kit, connector, ends, rule)
    await close_generation(connector)
    try:
        batch = await connector.poll_batch(POLL_RECORDS)
    except FatalError:
        return
    raise ConformanceError(rule, f"poll_batch() after close() returned {batch!r} instead of raising FatalError")


async def terminal_task_tracker_ends_every_thread(kit: ConnectorKit) -> None:
    """A generation's whole life (start, reading, an advisory commit, close); then its tracker's
    ``wait()`` is True within the kit's bound, and no thread started during that life is still
    alive after :data:`THREAD_GRACE_S` (the event loop's own executor threads, ``asyncio_*``, are the
    loop's, not the connector's: work a connector runs there unawaited is not seen)."""
    rule = "terminal-task-tracker"
    before = set(threading.enumerate())
    ends = append_everywhere(kit)
    connector = await start_generation(kit)
    try:
        reading = await read_until(kit, connector, ends, rule)
        await connector.notify_epoch_committed(1, reading.checkpoints[-1])
    finally:
        await connector.close()
    tracker = connector.terminal_task_tracker()
    if tracker is not None:
        started = time.monotonic()
        if not await tracker.wait(kit.read_timeout_s):
            raise ConformanceError(rule, f"terminal_task_tracker().wait() was still False {kit.read_timeout_s:.0f} s "
                                         f"after close()")
        if not tracker.is_terminated():
            raise ConformanceError(rule, f"terminal_task_tracker().wait() returned True after "
                                         f"{time.monotonic() - started:.1f} s but is_terminated() is False")

    def left() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t not in before and t.is_alive() and not t.name.startswith("asyncio_")]

    deadline = time.monotonic() + min(THREAD_GRACE_S, kit.read_timeout_s)
    while left() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if left():
        names = sorted(t.name for t in left())
        whose = ("its terminal_task_tracker() is None, so it may start no thread" if tracker is None
                 else "its terminal_task_tracker() reports every thread ended: these are not tracked")
        raise ConformanceError(rule, f"threads started during the generation's life were still running "
                                     f"{min(THREAD_GRACE_S, kit.read_timeout_s):.0f} s after close(): {names}; {whose}")


async def checkpoints_carry_one_name(kit: ConnectorKit) -> None:
    """Every checkpoint of two generations (one started at its initial position, one resumed) names
    the same non-empty connector; a generation asked to resume from a checkpoint stamped with
    another connector's name refuses in ``start()`` with :class:`CheckpointError`."""
    rule = "checkpoint-name"
    ends = append_everywhere(kit)
    names: set[str] = set()
    connector = await start_generation(kit)
    try:
        names.add(connector.checkpoint().connector)
        reading = await read_until(kit, connector, ends, rule)
        names |= {checkpoint.connector for checkpoint in reading.checkpoints}
    finally:
        await close_generation(connector)
    resumed = await start_generation(kit, resume_at(reading.checkpoints[0].partitions()))
    try:
        names.add(resumed.checkpoint().connector)
    finally:
        await close_generation(resumed)
    if len(names) != 1 or UNNAMED in names:
        raise ConformanceError(rule, f"checkpoint() must carry one stable non-empty connector name; it gave "
                                     f"{sorted(names)}")
    (name,) = names
    other = "another-connector" if name == "other-connector" else "other-connector"
    foreign = SourceCheckpoint(dict(reading.checkpoints[0].offsets), 0, other)
    stranger = kit.make_connector()
    try:
        await stranger.start(SourceStart(kit.config, ResumePosition(CheckpointAttempt(1, 1), foreign),
                                         DeliveryGuarantee.EXACTLY_ONCE))
    except CheckpointError:
        return
    finally:
        await stranger.close()
    raise ConformanceError(rule, f"start() from a checkpoint named {other!r} (not {name!r}) did not raise "
                                 f"CheckpointError")


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
    "drain-commit-handoff": Scenario(
        "on the side that gains partitions in a round, finish_drain(COMMIT, handoff_cursors) (a manifest's "
        "cursors of every partition) places exactly the gained partitions at their handoff cursors, leaves "
        "the kept ones where they are, needs no acquisition, and reading is exact from there; handoff "
        "cursors lacking a gained partition raise DrainError and change nothing",
        drain_commit_handoff),
    "checkpoint-unavailable-policy": Scenario(
        "while try_checkpoint() is None (a version whose gained partitions wait for cursors) the "
        "connector is driven by its declared policy: HOLD_INTAKE (no poll; drive_control_plane() alone "
        "must make the cursor available once reconciled) or POLL_TO_REPLAY_BOUNDARY (one poll per "
        "retry, each batch bound to its cursor); the first checkpoint then is the cursor after exactly "
        "the rows returned plus the offered cursors, and reading on is exact",
        checkpoint_unavailable_policy),
    "cancellation-policy": Scenario(
        "after a cancelled poll_batch, by the declared policy: RETIRE_CONNECTOR (closed, its tracker "
        "ends, a new generation from the last durable checkpoint reads exactly from there) or "
        "CANCEL_SAFE (the same generation polled on returns every record not yet returned, once)",
        cancellation_policy),
    "cancelled-finish-drain": Scenario(
        "a finish_drain(COMMIT) cancelled at its deadline, by the declared policy: RETIRE_CONNECTOR (or a "
        "FatalError: closed, its tracker ends, the next generation at the committed target reads its "
        "partitions exactly from the durable checkpoint holding the cut) or CANCEL_SAFE (the same "
        "resolution applied again completes the round exactly)",
        cancelled_finish_drain),
    "terminal-task-tracker": Scenario(
        "after close(), terminal_task_tracker().wait() is True within a bound, and no thread the "
        "generation started outlives it (None: the connector starts no thread)",
        terminal_task_tracker_ends_every_thread),
    "checkpoint-name": Scenario(
        "every checkpoint() carries one stable non-empty connector name, and start() from a checkpoint "
        "stamped with another connector's name raises CheckpointError",
        checkpoints_carry_one_name),
    "recovery-identity": Scenario(
        "recovery_identity_options() is deterministic and I/O-free (str -> str), and the contract is "
        "replayable and splittable",
        recovery_identity_is_deterministic),
}
