"""The conformance scenarios of the two runtime policies a connector declares: what the runtime does
while ``try_checkpoint()`` is ``None`` (:class:`SourceCheckpointUnavailablePolicy`) and after it
cancels a lifecycle coroutine at a deadline (:class:`ConnectorCancellationPolicy`).

Each scenario checks the policy the connector declares (its errors name it) and drives the
connector as the node runtime does under it (``cluster/runtime/node_runtime.py``, ``generation.py``):

- HOLD_INTAKE: no ``poll_batch`` while ``try_checkpoint()`` is ``None``; ``drive_control_plane()``
  every turn. POLL_TO_REPLAY_BOUNDARY: at most one ``poll_batch`` per turn, each after retrying
  ``try_checkpoint()`` (the retained barrier).
- RETIRE_CONNECTOR: after a cancelled ``poll_batch`` the generation is closed, its
  ``terminal_task_tracker()`` awaited, and a new generation starts at the last durable checkpoint;
  the cancelled one is never called again. CANCEL_SAFE: the runtime keeps polling the same one.

The unavailable state is the natural one: a published assignment version that gives this node
partitions it waits for cursors for (``acquisition_needed()``), so vnode mode is needed (a
connector without it skips that scenario).

Cancelling a poll: the kit cancels ``poll_batch`` at the connector's own suspension points (after
0 to 5 event-loop steps, and after 1 and 10 ms); a poll that never suspends completes first and
its batch is taken, as the runtime would. A connector with a test switch that makes its next poll
wait until cancelled (:class:`HangsPolls`, as ``MemorySource`` has) also gets a poll cancelled in
the middle, at a deadline, like the runtime's ``poll_timeout_s``.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import NamedTuple, Protocol, runtime_checkable

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.conformance.backend import ConformanceError, ConnectorKit
from laminar_kafka.connector.conformance.reading import (
    POLL_RECORDS,
    RECORDS,
    Reading,
    append_everywhere,
    close_generation,
    expect_exact,
    read_until,
    resume_at,
    start_generation,
    take_batch,
)
from laminar_kafka.connector.conformance.vnode_scenarios import (
    drive_until,
    owners_giving,
    split_partitions,
    started_owning,
)
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
)
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = ["HangsPolls", "cancellation_policy", "checkpoint_unavailable_policy"]

#: turns the kit keeps a generation unreconciled (cursors for gained partitions not offered yet)
HELD_TURNS = 6
#: how long a poll made to hang is given before it is cancelled (the runtime's poll_timeout_s)
HANG_S = 0.1
#: when the kit cancels a poll: after so many event-loop steps (0: before it ran at all)...
CANCEL_AFTER_STEPS = (1, 2, 3, 5)
#: ...or after so many seconds (a poll awaiting I/O)
CANCEL_AFTER_S = (0.001, 0.01)


@runtime_checkable
class HangsPolls(Protocol):
    """A connector with a test switch: its next ``poll_batch`` waits until it is cancelled."""

    def hang_next_poll(self) -> None:
        """Make the next ``poll_batch`` wait (inside the connector) until it is cancelled."""


# -- checkpoint-unavailable-policy -------------------------------------------------------------------

async def checkpoint_unavailable_policy(kit: ConnectorKit) -> None:
    """Version 2 gives this node the vnodes of ``others`` while records wait in every partition;
    the kit holds the generation unreconciled for :data:`HELD_TURNS` turns (driving it every turn,
    polling by the declared policy), then offers the cursors. Once ``try_checkpoint()`` returns a
    cursor it must be the one after exactly the rows returned (kept partitions) and the offered
    cursors (gained ones), at version 2, and reading on from it must be exact."""
    rule = "checkpoint-unavailable-policy"
    mine, others = split_partitions(kit)
    topic = kit.backend.topic
    kept, gained = frozenset((topic, p) for p in mine), frozenset((topic, p) for p in others)
    ends, registry, connector = await started_owning(kit, mine, rule)
    try:
        policy = connector.checkpoint_unavailable_policy()
        if not isinstance(policy, SourceCheckpointUnavailablePolicy):
            raise ConformanceError(rule, f"checkpoint_unavailable_policy() is {policy!r}, not a policy")
        polls = policy is SourceCheckpointUnavailablePolicy.POLL_TO_REPLAY_BOUNDARY
        says = f"under {policy.name}, "
        await read_until(kit, connector, {tp: ends[tp] for tp in kept}, rule)
        before = connector.checkpoint().partitions()
        more = append_everywhere(kit)  # records waiting across the hold
        registry.publish(2, owners_giving(kit, mine | others))
        await drive_until(kit, connector, lambda: connector.acquisition_needed() is not None, rule,
                           "acquisition_needed() after version 2 gave this node partitions")
        held = Reading()
        for _turn in range(HELD_TURNS):  # no cursor offered yet: it stays unavailable
            connector.drive_control_plane()
            attempt = connector.try_checkpoint()
            if attempt is not None:
                raise ConformanceError(rule, f"{says}try_checkpoint() gave {attempt} while gained partitions "
                                             f"{sorted(gained)} waited for cursors")
            if polls:
                await _poll_one(kit, connector, held, says, rule)
            await asyncio.sleep(0.02)
        offered = {tp: ends[tp] // 2 + 1 for tp in gained}
        connector.acquire_partitions({f"{t}:{p}": o for (t, p), o in offered.items()}, 2)
        checkpoint = await _until_available(kit, connector, polls, held, says, rule)
        want = dict(before)  # kept: after exactly the rows returned, held polls included
        for batch_cursor in held.checkpoints:
            want.update({tp: o for tp, o in batch_cursor.partitions().items() if tp in kept})
        want.update(offered)
        if checkpoint.partitions() != want or checkpoint.assignment_version != 2:
            have = checkpoint.partitions()
            wrong = {f"{t}:{p}": (have.get((t, p)), o) for (t, p), o in sorted(want.items()) if have.get((t, p)) != o}
            raise ConformanceError(rule, f"{says}the first checkpoint once available (version "
                                         f"{checkpoint.assignment_version}, want 2) is not the cursor after the "
                                         f"{len(held.checkpoints)} batch(es) returned and the offered cursors: "
                                         f"(have, want) {wrong}")
        if checkpoint != connector.checkpoint():
            raise ConformanceError(rule, f"{says}try_checkpoint() {checkpoint} is not checkpoint() "
                                         f"{connector.checkpoint()}")
        await read_until(kit, connector, more, rule, held)
        expect_exact(kit, rule, held, before | offered, more)  # kept from before the hold, gained as offered
    finally:
        await close_generation(connector)


async def _poll_one(kit: ConnectorKit, connector: SourceConnector, reading: Reading, says: str, rule: str) -> None:
    """The one poll POLL_TO_REPLAY_BOUNDARY allows before the barrier is retried: its batch must be
    bound to its cursor (stopping at a replay-unit boundary: every row below it, none after)."""
    batch = await connector.poll_batch(POLL_RECORDS)
    if batch is None:
        return
    try:
        take_batch(kit, batch, reading, rule)
    except ConformanceError as exc:
        raise ConformanceError(rule, f"{says}a batch polled while try_checkpoint() was None is not bound to its "
                                     f"cursor: {str(exc).removeprefix(rule + ': ')}") from exc


async def _until_available(kit: ConnectorKit, connector: SourceConnector, polls: bool, reading: Reading,
                           says: str, rule: str) -> SourceCheckpoint:
    """Turns (drive, retry ``try_checkpoint()``, then one poll only under POLL_TO_REPLAY_BOUNDARY)
    until ``try_checkpoint()`` returns a cursor."""
    deadline = time.monotonic() + kit.read_timeout_s
    while True:
        connector.drive_control_plane()
        checkpoint = connector.try_checkpoint()
        if checkpoint is not None:
            return checkpoint
        if time.monotonic() > deadline:
            how = "with one poll per turn" if polls else "with intake held (no poll): drive_control_plane() alone must reconcile"
            raise ConformanceError(rule, f"{says}try_checkpoint() stayed None {kit.read_timeout_s:.0f} s after the "
                                         f"cursors were offered, {how}")
        if polls:
            await _poll_one(kit, connector, reading, says, rule)
        await asyncio.sleep(0.02)


# -- cancellation-policy -----------------------------------------------------------------------------

async def cancellation_policy(kit: ConnectorKit) -> None:
    """Polls cancelled as the runtime cancels them, then what the declared policy lets the runtime
    do next: no record lost or doubled either way."""
    rule = "cancellation-policy"
    ends = append_everywhere(kit, 2 * RECORDS)
    connector = await start_generation(kit)
    policy = connector.cancellation_policy()
    try:
        if policy is ConnectorCancellationPolicy.CANCEL_SAFE:
            await _cancel_safe(kit, connector, ends, rule)
            return
        if policy is not ConnectorCancellationPolicy.RETIRE_CONNECTOR:
            raise ConformanceError(rule, f"cancellation_policy() is {policy!r}, not a policy")
    except BaseException:
        await close_generation(connector)
        raise
    await _retired_after_cancel(kit, connector, ends, rule)


async def _cancel_safe(kit: ConnectorKit, connector: SourceConnector, ends: Mapping[TopicPartitionId, int],
                       rule: str) -> None:
    """CANCEL_SAFE: polls cancelled at every point the kit can reach, the same generation polled on
    between them; every record is returned exactly once in the end."""
    reading = Reading()
    cancelled = 0
    for attempt in _attempts(connector):
        cancelled += await _cancelled_poll(kit, connector, attempt, reading, rule)
        batch = await connector.poll_batch(POLL_RECORDS)  # the runtime polls on
        if batch is not None:
            take_batch(kit, batch, reading, rule)
    if not cancelled:
        raise ConformanceError(rule, "the kit cancelled no poll_batch (a kit defect)")
    try:
        await read_until(kit, connector, ends, rule, reading)
        expect_exact(kit, rule, reading, {tp: 0 for tp in ends}, ends)
    except ConformanceError as exc:
        raise ConformanceError(rule, f"under CANCEL_SAFE, the same generation polled on after {cancelled} "
                                     f"cancelled poll(s): {str(exc).removeprefix(rule + ': ')}") from exc
    await close_generation(connector)


async def _retired_after_cancel(kit: ConnectorKit, connector: SourceConnector,
                                ends: Mapping[TopicPartitionId, int], rule: str) -> None:
    """RETIRE_CONNECTOR: a barrier's cursor is the durable checkpoint; rows read past it are the
    retired generation's unsealed output (dropped). A poll is cancelled; the generation is closed
    and its tracker awaited; the next generation, from the durable checkpoint, reads exactly on."""
    says = "under RETIRE_CONNECTOR, "
    try:
        reading = Reading()
        await _take_batches(kit, connector, reading, 2, rule)
        durable = connector.try_checkpoint()
        if durable is None:
            raise ConformanceError(rule, f"{says}try_checkpoint() is None for a started generation that owns its "
                                         f"partitions")
        await _take_batches(kit, connector, reading, 1, rule)
        for attempt in _attempts(connector):  # the first cancellation retires it: never called again
            if await _cancelled_poll(kit, connector, attempt, reading, rule):
                break
    finally:
        await connector.close()
    tracker = connector.terminal_task_tracker()
    if tracker is not None and not await tracker.wait(kit.read_timeout_s):
        raise ConformanceError(rule, f"{says}the tracked tasks of a generation closed after a cancelled poll_batch "
                                     f"were still running {kit.read_timeout_s:.0f} s after close()")
    resumed = await start_generation(kit, resume_at(durable.partitions()))
    try:
        more = append_everywhere(kit, 5)
        again = await read_until(kit, resumed, more, rule)
        expect_exact(kit, rule, again, durable.partitions(), more)
    except ConformanceError as exc:
        raise ConformanceError(rule, f"{says}the next generation, started at the durable checkpoint after a "
                                     f"cancelled poll: {str(exc).removeprefix(rule + ': ')}") from exc
    finally:
        await close_generation(resumed)


class _Attempt(NamedTuple):
    """When the kit cancels one poll: ``"hang"`` (a hung poll, after :data:`HANG_S`), ``"steps"``
    (after ``value`` event-loop steps) or ``"seconds"`` (after ``value`` seconds)."""

    how: str
    value: float = 0.0


def _attempts(connector: SourceConnector) -> list[_Attempt]:
    """Where the kit cancels polls: a hung poll at a deadline (a connector that can hang one),
    after event-loop steps or seconds, and last before the poll ever ran."""
    hang = [_Attempt("hang", HANG_S)] if isinstance(connector, HangsPolls) else []
    return (hang + [_Attempt("steps", n) for n in CANCEL_AFTER_STEPS] + [_Attempt("seconds", s) for s in CANCEL_AFTER_S]
            + [_Attempt("steps", 0)])


async def _cancelled_poll(kit: ConnectorKit, connector: SourceConnector, attempt: _Attempt, reading: Reading,
                          rule: str) -> bool:
    """One ``poll_batch`` cancelled at ``attempt``; True if it was cancelled. A poll that
    returned first has its batch taken (as the runtime takes a poll that beat its deadline)."""
    if attempt.how == "hang":
        assert isinstance(connector, HangsPolls)
        connector.hang_next_poll()
    task = asyncio.ensure_future(connector.poll_batch(POLL_RECORDS))
    if attempt.how == "steps":
        for _step in range(int(attempt.value)):
            await asyncio.sleep(0)
    else:
        await asyncio.wait({task}, timeout=attempt.value)
    task.cancel()
    try:
        batch: SourceBatch | None = await task
    except asyncio.CancelledError:
        return True
    if batch is not None:
        take_batch(kit, batch, reading, rule)
    return False


async def _take_batches(kit: ConnectorKit, connector: SourceConnector, reading: Reading, count: int,
                        rule: str) -> None:
    """Poll until ``count`` more batches came."""
    want = len(reading.checkpoints) + count
    deadline = time.monotonic() + kit.read_timeout_s
    while len(reading.checkpoints) < want:
        batch = await connector.poll_batch(POLL_RECORDS)
        if batch is not None:
            take_batch(kit, batch, reading, rule)
        elif time.monotonic() > deadline:
            raise ConformanceError(rule, f"no batch came in {kit.read_timeout_s:.0f} s with records in the log")
        else:
            await asyncio.sleep(0.02)
