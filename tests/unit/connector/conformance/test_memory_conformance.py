"""The conformance kit on the reference connector (``MemorySource`` over in-memory logs), under both
declared policy pairs, and the kit's own discipline: it drives a connector as the runtime does."""
from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.conformance import ConnectorKit
from laminar_kafka.connector.conformance.backend import ConformanceSkipped
from laminar_kafka.connector.conformance.pytest_kit import THREADS_END_CLEANLY, conformance_tests
from laminar_kafka.connector.conformance.scenarios import SCENARIOS
from laminar_kafka.connector.log_source import PartitionedLogSource
from laminar_kafka.connector.memory import MemoryBackend, MemoryLog, MemorySource
from laminar_kafka.connector.protocol import (
    ConnectorCancellationPolicy,
    ConnectorConfig,
    SourceBatch,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourceDrainResolution,
)
from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry

TOPIC = "events"
RETIRE, CANCEL_SAFE = ConnectorCancellationPolicy.RETIRE_CONNECTOR, ConnectorCancellationPolicy.CANCEL_SAFE
HOLD, POLL = SourceCheckpointUnavailablePolicy.HOLD_INTAKE, SourceCheckpointUnavailablePolicy.POLL_TO_REPLAY_BOUNDARY
#: both values of each policy are exercised: the protocol's defaults, and the other two
POLICIES = [(RETIRE, HOLD), (CANCEL_SAFE, POLL)]


@pytest.fixture(params=POLICIES, ids=["retire-hold", "cancel_safe-poll"])
def conformance_kit(request: pytest.FixtureRequest) -> ConnectorKit:
    cancellation, unavailable = request.param
    log = MemoryLog.of(TOPIC, 3, 10)
    return ConnectorKit(MemoryBackend(log, TOPIC),
                        lambda: MemorySource(log, cancellation=cancellation, unavailable=unavailable),
                        ConnectorConfig("memory", {}), read_timeout_s=5.0)


NAMES = conformance_tests(globals())


def test_every_scenario_became_a_test() -> None:
    assert len(NAMES) == len(SCENARIOS) and all(n.startswith("test_conformance_") for n in NAMES)


def test_a_thread_dying_of_an_exception_fails_every_conformance_test() -> None:
    for name in NAMES:
        marks = [m for m in getattr(globals()[name], "pytestmark", []) if m.name == "filterwarnings"]
        assert [m.args for m in marks] == [THREADS_END_CLEANLY.mark.args], name


class Watched(MemorySource):
    """Records where the kit breaks the runtime's discipline: a poll while ``try_checkpoint()``
    is None under HOLD_INTAKE, a second poll without retrying it under POLL_TO_REPLAY_BOUNDARY, or
    a poll of a RETIRE_CONNECTOR generation after one of its polls was cancelled."""

    def __init__(self, log: MemoryLog, breaches: list[str], cancellation: ConnectorCancellationPolicy,
                 unavailable: SourceCheckpointUnavailablePolicy) -> None:
        super().__init__(log, cancellation=cancellation, unavailable=unavailable)
        self.breaches = breaches
        self.polls_unretried = 0
        self.held_polls = 0
        self.cancelled = 0

    def try_checkpoint(self) -> SourceCheckpoint | None:
        self.polls_unretried = 0
        return super().try_checkpoint()

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        if self.cancelled and self.cancellation_policy() is RETIRE:
            self.breaches.append("a poll of a RETIRE_CONNECTOR generation after a cancelled poll")
        if not self.closed and not PartitionedLogSource.checkpoint_ready(self):
            self.held_polls += 1
            self.polls_unretried += 1
            if self.checkpoint_unavailable_policy() is HOLD:
                self.breaches.append("a poll while try_checkpoint() is None under HOLD_INTAKE")
            elif self.polls_unretried > 1:
                self.breaches.append("two polls without retrying try_checkpoint() under POLL_TO_REPLAY_BOUNDARY")
        try:
            return await super().poll_batch(max_records)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def finish_drain(self, resolution: SourceDrainResolution, deadline: float,
                           handoff_cursors: Mapping[str, int] | SourceCheckpoint | None = None) -> None:
        if self.cancelled and self.cancellation_policy() is RETIRE:
            self.breaches.append("a finish_drain of a RETIRE_CONNECTOR generation after a cancelled call")
        try:
            await super().finish_drain(resolution, deadline, handoff_cursors)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


@pytest.mark.parametrize("cancellation,unavailable", POLICIES, ids=["retire-hold", "cancel_safe-poll"])
@pytest.mark.parametrize("rule", sorted(SCENARIOS))
async def test_the_kit_polls_as_the_runtime_does(rule: str, cancellation: ConnectorCancellationPolicy,
                                                 unavailable: SourceCheckpointUnavailablePolicy) -> None:
    log, breaches = MemoryLog.of(TOPIC, 3, 10), list[str]()
    made: list[Watched] = []

    def make() -> Watched:
        made.append(Watched(log, breaches, cancellation, unavailable))
        return made[-1]

    await SCENARIOS[rule].check(ConnectorKit(MemoryBackend(log, TOPIC), make, ConnectorConfig("memory", {}),
                                             read_timeout_s=5.0))
    assert breaches == []
    if rule == "checkpoint-unavailable-policy":  # it held the generation unreconciled, polling by the policy
        assert made[0].held_polls > 0 if unavailable is POLL else made[0].held_polls == 0
    if rule in ("cancellation-policy", "cancelled-finish-drain"):  # a call was cancelled in the middle: the hung one
        assert made[0].cancelled == 1
        assert len(made) == (2 if cancellation is RETIRE else 1)  # retired: a new generation; else the same


class WithoutVnodeMode(MemorySource):
    """The protocol's fail-closed default: no vnode-scoped ownership."""

    def set_vnode_assignment(self, source_identity: str, registry: VnodeRegistry, self_id: int) -> None:
        SourceConnector.set_vnode_assignment(self, source_identity, registry, self_id)


#: the scenarios that need vnode mode (a pending reconciliation is the unavailable state too)
VNODE_RULES = {"vnode-scoped-reading", "acquisition-at-offered-cursors", "drain-commit", "drain-abort",
               "drain-commit-handoff", "checkpoint-unavailable-policy", "cancelled-finish-drain"}


@pytest.mark.parametrize("rule", sorted(SCENARIOS))
async def test_a_connector_without_vnode_mode_skips_only_the_vnode_scenarios(rule: str) -> None:
    log = MemoryLog.of(TOPIC, 3, 10)
    kit = ConnectorKit(MemoryBackend(log, TOPIC), lambda: WithoutVnodeMode(log), ConnectorConfig("memory", {}),
                       read_timeout_s=5.0)
    if rule not in VNODE_RULES:
        await SCENARIOS[rule].check(kit)
        return
    with pytest.raises(ConformanceSkipped, match="has no vnode mode"):
        await SCENARIOS[rule].check(kit)
