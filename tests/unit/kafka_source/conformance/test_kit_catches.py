"""Every conformance scenario fails on a connector that breaks its rule: the reference connector with
one rule broken at a time (each kit test would pass on it otherwise)."""
from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from laminar_kafka.kafka_source.checkpoint import SourceCheckpoint
from laminar_kafka.kafka_source.connector import (
    ConnectorConfig,
    ResumePosition,
    SourceBatch,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceStart,
)
from laminar_kafka.kafka_source.conformance import ConformanceError, ConnectorKit
from laminar_kafka.kafka_source.conformance.memory import MemoryBackend, MemoryLog, MemorySource
from laminar_kafka.kafka_source.conformance.scenarios import SCENARIOS

TOPIC = "events"


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


class PausesEverything(MemorySource):
    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        super().begin_drain(request, deadline)
        assert self.drain is not None
        self.drain = replace(self.drain, revoked=frozenset(self.cursor))


class ReadsPastTheCut(MemorySource):
    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        super().begin_drain(request, deadline)
        assert self.drain is not None
        self.drain = replace(self.drain, revoked=frozenset())


class ResumesPastTheCut(MemorySource):
    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float, handoff_cursors: object = None) -> None:
        revoked = self.drain.revoked if self.drain is not None else frozenset()
        await super().finish_drain(resolution, deadline, handoff_cursors)  # type: ignore[arg-type]
        if resolution.outcome is SourceDrainOutcome.ABORT:
            for tp in revoked:
                self.cursor[tp] += 1


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
    ("vnode-scoped-reading", ReadsEveryPartition),
    ("acquisition-at-offered-cursors", AcquiresAtTheStart),
    ("acquisition-at-offered-cursors", ReadyBeforeAcquiring),
    ("drain-commit", PausesEverything),
    ("drain-commit", ReadsPastTheCut),
    ("drain-abort", ResumesPastTheCut),
]


def test_every_scenario_has_a_connector_that_breaks_it() -> None:
    assert {rule for rule, _ in BROKEN} == set(SCENARIOS)


@pytest.mark.parametrize("rule,broken", BROKEN, ids=[f"{r}-{b.__name__}" for r, b in BROKEN])
async def test_the_scenario_fails_on_a_connector_that_breaks_its_rule(rule: str, broken: type[MemorySource]) -> None:
    log = MemoryLog.of(TOPIC, 3, 10)
    kit = ConnectorKit(MemoryBackend(log, TOPIC), lambda: broken(log), ConnectorConfig("memory", {}), read_timeout_s=1.0)
    with pytest.raises(ConformanceError) as failure:
        await SCENARIOS[rule].check(kit)
    assert failure.value.rule == rule
