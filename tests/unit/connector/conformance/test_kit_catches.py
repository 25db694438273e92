"""Every conformance scenario fails on a connector that breaks its rule: the reference connector with
one rule broken at a time (each kit test would pass on it otherwise)."""
from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace

import pytest

from laminar_kafka.connector.checkpoint import CursorFormat, SourceCheckpoint, parse_key
from laminar_kafka.connector.conformance import ConformanceError, ConnectorKit
from laminar_kafka.connector.conformance.scenarios import SCENARIOS
from laminar_kafka.connector.drain import DrainProgress
from laminar_kafka.connector.log_source import PartitionedLogSource
from laminar_kafka.connector.memory import MemoryBackend, MemoryLog, MemorySource
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy,
    ConnectorConfig,
    ConnectorTaskTracker,
    ResumePosition,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceStart,
)
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

TOPIC = "events"
POLL = SourceCheckpointUnavailablePolicy.POLL_TO_REPLAY_BOUNDARY
CANCEL_SAFE = ConnectorCancellationPolicy.CANCEL_SAFE

#: what the threads the broken connectors leave behind wait for (set when their test ends)
_release_threads = threading.Event()


@pytest.fixture(autouse=True)
def _end_left_threads() -> Iterator[None]:
    global _release_threads
    yield
    _release_threads.set()
    _release_threads = threading.Event()


def _stuck() -> None:
    """A thread's work that close() does not stop (it ends when its test does)."""
    _release_threads.wait(30)


class SkipsTheFirstRecord(MemorySource):
    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        self.cursor[(TOPIC, 0)] += 1


class ResumesOneLate(MemorySource):
    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        if isinstance(request.position, ResumePosition):
            self.cursor = {tp: o + 1 for tp, o in self.cursor.items()}


class ReportsACursorAhead(MemorySource):
    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        batch = await super().poll_batch(max_records)
        if batch is None:
            return None
        ahead = {tp: o + 1 for tp, o in self.cursor.items()}
        return SourceBatch(batch.records, SourceCheckpoint.from_partitions(ahead, self.version))


class TriesAStaleCheckpoint(MemorySource):
    def try_checkpoint(self) -> SourceCheckpoint | None:
        return SourceCheckpoint.from_partitions({tp: 0 for tp in self.cursor})


class IgnoresAddedPartitions(MemorySource):
    def add_partitions(self, partitions: object) -> None:
        return None


class CommitsBackwards(MemorySource):
    async def notify_epoch_committed(self, epoch: int, checkpoint: SourceCheckpoint) -> None:
        self.log.committed.update(checkpoint.partitions())


class CommitsWhileReading(MemorySource):
    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        batch = await super().poll_batch(max_records)
        self.log.committed.update(self.cursor)
        return batch


class PollsAfterClose(MemorySource):
    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        return None if self.closed else await super().poll_batch(max_records)


class ARandomIdentity(MemorySource):
    def recovery_identity_options(self, config: ConnectorConfig) -> dict[str, str] | None:
        return {"instance": uuid.uuid4().hex}


class StampsNoName(MemorySource):
    def checkpoint(self) -> SourceCheckpoint:
        return SourceCheckpoint.from_partitions(self.cursor, self.version)


class NamesEachGeneration(MemorySource):
    """A name per generation: not stable (a resumed generation names its checkpoints differently)."""

    def __init__(self, log: MemoryLog, **options: object) -> None:
        super().__init__(log, **options)  # type: ignore[arg-type]
        self.cursor_format = CursorFormat(f"memory-{uuid.uuid4().hex[:8]}")


class AnyName(CursorFormat):
    def accept(self, checkpoint: SourceCheckpoint) -> SourceCheckpoint:
        return checkpoint


class ReadsAnyonesCheckpoint(MemorySource):
    cursor_format = AnyName("memory")


class ReadsEveryPartition(MemorySource):
    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        self.cursor = {tp: 0 for tp in self.log.records}


class AcquiresAtTheStart(MemorySource):
    def acquire_partitions(self, cursors: object, version: int) -> None:
        super().acquire_partitions({}, version)


class ReadyBeforeAcquiring(MemorySource):
    def checkpoint_ready(self) -> bool:
        return not self.closed


def _active_drain(source: MemorySource) -> DrainProgress | None:
    return source.own.drain if source.own is not None else None


def _set_drain(source: MemorySource, drain: DrainProgress) -> None:
    """Overwrite the source's drain state (what a broken connector would get wrong)."""
    assert source.own is not None
    source.own = replace(source.own, drain=drain)


class PausesEverything(MemorySource):
    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        super().begin_drain(request, deadline)
        drain = _active_drain(self)
        assert drain is not None
        _set_drain(self, replace(drain, revoked=frozenset(self.cursor)))


class ReadsPastTheCut(MemorySource):
    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        super().begin_drain(request, deadline)
        drain = _active_drain(self)
        assert drain is not None
        _set_drain(self, replace(drain, revoked=frozenset()))


class ResumesPastTheCut(MemorySource):
    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float, handoff_cursors: object = None) -> None:
        drain = _active_drain(self)
        revoked = drain.revoked if drain is not None else frozenset()
        await super().finish_drain(resolution, deadline, handoff_cursors)  # type: ignore[arg-type]
        if resolution.outcome is SourceDrainOutcome.ABORT:
            for tp in revoked:
                self.cursor[tp] += 1


class AcceptsLackingHandoff(MemorySource):
    """Starts a gained partition the handoff cursors lack at its first offset instead of refusing."""

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        drain = _active_drain(self)
        if handoff_cursors is not None and drain is not None:
            given = (handoff_cursors.partitions() if isinstance(handoff_cursors, SourceCheckpoint)
                     else {parse_key(k): o for k, o in handoff_cursors.items()})
            handoff_cursors = {f"{t}:{p}": o for (t, p), o in ({tp: 0 for tp in drain.target_owned} | given).items()}
        await super().finish_drain(resolution, deadline, handoff_cursors)


class HandsOffEveryPartition(MemorySource):
    """Applies the handoff cursors to the partitions it kept too (rewinding them to the manifest)."""

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        await super().finish_drain(resolution, deadline, handoff_cursors)
        if isinstance(handoff_cursors, Mapping) and resolution.outcome is SourceDrainOutcome.COMMIT:
            for key, offset in handoff_cursors.items():
                if parse_key(key) in self.cursor:
                    self.cursor[parse_key(key)] = offset


class StartsGainedPartitionsAtTheirStart(MemorySource):
    """Checks the handoff cursors, then reads the gained partitions from their first offset."""

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        held = set(self.cursor)
        await super().finish_drain(resolution, deadline, handoff_cursors)
        for tp in set(self.cursor) - held:
            self.cursor[tp] = 0


class ReconcilesOnlyWhenPolled(MemorySource):
    """Declares HOLD_INTAKE but reconciles in poll_batch: held, it never gets a cursor."""

    def drive_control_plane(self) -> None:
        return None

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        super().drive_control_plane()
        return await super().poll_batch(max_records)


class RewindsKeptPartitionsOnReconcile(MemorySource):
    """Reconciling to a new version re-seeks the partitions it keeps to their first offset."""

    def drive_control_plane(self) -> None:
        version, kept = self.version, set(self.cursor)
        super().drive_control_plane()
        if self.version != version:
            self.cursor.update({tp: 0 for tp in kept & set(self.cursor)})


class ReconcilesFromThePreHoldCursor(MemorySource):
    """POLL_TO_REPLAY_BOUNDARY, but reconciling restores the cursor of when the hold began,
    forgetting the batches returned while held."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log, unavailable=POLL)
        self.held: dict[TopicPartitionId, int] | None = None

    def drive_control_plane(self) -> None:
        if self.held is None and not PartitionedLogSource.checkpoint_ready(self):
            self.held = dict(self.cursor)
        super().drive_control_plane()
        if self.held is not None and PartitionedLogSource.checkpoint_ready(self):  # reconciled
            self.cursor.update({tp: o for tp, o in self.held.items() if tp in self.cursor})
            self.held = None


class UnboundHeldBatch(MemorySource):
    """POLL_TO_REPLAY_BOUNDARY, but a batch polled while unreconciled carries the cursor before it."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log, unavailable=POLL)

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        held = not self.closed and not PartitionedLogSource.checkpoint_ready(self)
        before = self.checkpoint()
        batch = await super().poll_batch(max_records)
        return SourceBatch(batch.records, before) if batch is not None and held else batch


class ResumesPastACancelledPoll(MemorySource):
    """Saves its position when a poll is cancelled and resumes there when it is ahead of the
    checkpoint (as a consumer resuming from its group's offsets)."""

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        try:
            return await super().poll_batch(max_records)
        except asyncio.CancelledError:
            self.log.committed.update(self.cursor)
            raise

    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        if isinstance(request.position, ResumePosition):
            self.cursor = {tp: max(o, self.log.committed.get(tp, 0)) for tp, o in self.cursor.items()}


class LeavesAThreadWhenCancelled(MemorySource):
    """A cancelled poll leaves its blocking read running on a tracked thread close() never stops."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log)
        self._tracker = ConnectorTaskTracker()

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        try:
            return await super().poll_batch(max_records)
        except asyncio.CancelledError:
            assert self._tracker is not None
            self._tracker.spawn("cancelled-read", _stuck)
            raise


class LosesACancelledBatch(MemorySource):
    """CANCEL_SAFE, but it advances its cursor and then awaits before returning the batch."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log, cancellation=CANCEL_SAFE)

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        batch = await super().poll_batch(max_records)
        await asyncio.sleep(0)
        return batch


class ReadsThenHangs(MemorySource):
    """CANCEL_SAFE, but a hung poll hangs after it read (and advanced its cursor)."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log, cancellation=CANCEL_SAFE)

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        hang, self.hang_polls = self.hang_polls > 0, 0
        batch = await super().poll_batch(max_records)
        if hang:
            await self.release_hang.wait()
        return batch


class LeavesADrainChangeRunning(MemorySource):
    """A cancelled finish_drain leaves its consumer change running on a tracked thread close() never stops."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log)
        self._tracker = ConnectorTaskTracker()

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        try:
            await super().finish_drain(resolution, deadline, handoff_cursors)
        except asyncio.CancelledError:
            assert self._tracker is not None
            self._tracker.spawn("cancelled-assignment-change", _stuck)
            raise


class MarksResolvedBeforeApplying(MemorySource):
    """CANCEL_SAFE, but finish_drain records the round as resolved before the work it awaits: a
    cancelled call applied again is taken for done."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__(log, cancellation=CANCEL_SAFE)

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        drain = _active_drain(self)
        if self.hang_finishes and drain is not None and drain.round == resolution.round and drain.active:
            self.hang_finishes -= 1
            _set_drain(self, drain.resolved(resolution.outcome))
            await self.release_hang.wait()
            _set_drain(self, drain)
        await super().finish_drain(resolution, deadline, handoff_cursors)


class LeavesAnUntrackedThread(MemorySource):
    """Starts a thread its (absent) terminal task tracker does not report, and close() leaves it."""

    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        threading.Thread(target=_stuck, name="untracked-prefetch", daemon=True).start()


class TracksAThreadCloseNeverStops(MemorySource):
    """Tracks its reader thread, but close() does not stop it."""

    async def start(self, request: SourceStart) -> None:
        await super().start(request)
        self._tracker = ConnectorTaskTracker()
        self._tracker.spawn("unstopped-reader", _stuck)


BROKEN = [
    ("initial-position-exact", SkipsTheFirstRecord),
    ("resume-exact", ResumesOneLate),
    ("checkpoint-bound-to-batch", ReportsACursorAhead),
    ("try-checkpoint", TriesAStaleCheckpoint),
    ("add-partitions", IgnoresAddedPartitions),
    ("advisory-commits", CommitsBackwards),
    ("advisory-commits", CommitsWhileReading),
    ("close-ends-the-generation", PollsAfterClose),
    ("recovery-identity", ARandomIdentity),
    ("checkpoint-name", StampsNoName),
    ("checkpoint-name", NamesEachGeneration),
    ("checkpoint-name", ReadsAnyonesCheckpoint),
    ("vnode-scoped-reading", ReadsEveryPartition),
    ("acquisition-at-offered-cursors", AcquiresAtTheStart),
    ("acquisition-at-offered-cursors", ReadyBeforeAcquiring),
    ("drain-commit", PausesEverything),
    ("drain-commit", ReadsPastTheCut),
    ("drain-abort", ResumesPastTheCut),
    ("drain-commit-handoff", AcceptsLackingHandoff),
    ("drain-commit-handoff", HandsOffEveryPartition),
    ("drain-commit-handoff", StartsGainedPartitionsAtTheirStart),
    ("checkpoint-unavailable-policy", ReconcilesOnlyWhenPolled),
    ("checkpoint-unavailable-policy", RewindsKeptPartitionsOnReconcile),
    ("checkpoint-unavailable-policy", ReconcilesFromThePreHoldCursor),
    ("checkpoint-unavailable-policy", UnboundHeldBatch),
    ("cancellation-policy", ResumesPastACancelledPoll),
    ("cancellation-policy", LeavesAThreadWhenCancelled),
    ("cancellation-policy", LosesACancelledBatch),
    ("cancellation-policy", ReadsThenHangs),
    ("cancelled-finish-drain", LeavesADrainChangeRunning),
    ("cancelled-finish-drain", MarksResolvedBeforeApplying),
    ("terminal-task-tracker", LeavesAnUntrackedThread),
    ("terminal-task-tracker", TracksAThreadCloseNeverStops),
]


#: why a scenario fails on a broken connector (a pattern of its message), where one scenario has
#: several ways to fail: each connector must fail it for the reason it was broken for
WHY: dict[type[MemorySource], str] = {
    StampsNoName: r"one stable non-empty connector name; it gave \[''\]",
    NamesEachGeneration: r"one stable non-empty connector name; it gave \['memory-[0-9a-f]{8}', 'memory-",
    ReadsAnyonesCheckpoint: r"start\(\) from a checkpoint named 'other-connector' \(not 'memory'\) did not raise",
    AcceptsLackingHandoff: r"accepted handoff cursors that lack the gained partition",
    HandsOffEveryPartition: r"after the commit the checkpoint .* differs: \(have, want\) \{'events:0'",
    StartsGainedPartitionsAtTheirStart: r"after the commit the checkpoint .* differs: \(have, want\) \{'events:1': \(0,",
    ReconcilesOnlyWhenPolled: r"under HOLD_INTAKE, try_checkpoint\(\) stayed None .* drive_control_plane\(\) alone",
    RewindsKeptPartitionsOnReconcile: r"under HOLD_INTAKE, the first checkpoint once available .* \{'events:0': \(0,",
    ReconcilesFromThePreHoldCursor: r"under POLL_TO_REPLAY_BOUNDARY, the first checkpoint once available .* [1-9]\d* batch",
    UnboundHeldBatch: r"under POLL_TO_REPLAY_BOUNDARY, a batch polled while try_checkpoint\(\) was None is not bound",
    ResumesPastACancelledPoll: r"under RETIRE_CONNECTOR, the next generation, started at the durable checkpoint .* missing",
    LeavesAThreadWhenCancelled: r"under RETIRE_CONNECTOR, the tracked tasks .* still running",
    LosesACancelledBatch: r"under CANCEL_SAFE, the same generation polled on .* missing \[\d",
    ReadsThenHangs: r"under CANCEL_SAFE, the same generation polled on .* missing \[\d",
    LeavesADrainChangeRunning: r"under RETIRE_CONNECTOR, the tracked tasks of a generation closed after a cancelled finish_drain",
    MarksResolvedBeforeApplying: r"under CANCEL_SAFE, checkpoint_ready\(\) after the cancelled finish_drain\(COMMIT\) was applied again did not",
    LeavesAnUntrackedThread: r"\['untracked-prefetch'\]; its terminal_task_tracker\(\) is None",
    TracksAThreadCloseNeverStops: r"terminal_task_tracker\(\)\.wait\(\) was still False",
}


def test_every_scenario_has_a_connector_that_breaks_it() -> None:
    assert {rule for rule, _ in BROKEN} == set(SCENARIOS)


@pytest.mark.parametrize("rule,broken", BROKEN, ids=[f"{r}-{b.__name__}" for r, b in BROKEN])
async def test_the_scenario_fails_on_a_connector_that_breaks_its_rule(rule: str, broken: type[MemorySource]) -> None:
    log = MemoryLog.of(TOPIC, 3, 10)
    kit = ConnectorKit(MemoryBackend(log, TOPIC), lambda: broken(log), ConnectorConfig("memory", {}), read_timeout_s=1.0)
    with pytest.raises(ConformanceError) as failure:
        await SCENARIOS[rule].check(kit)
    assert failure.value.rule == rule
    if broken in WHY:
        assert re.search(WHY[broken], str(failure.value)), str(failure.value)
