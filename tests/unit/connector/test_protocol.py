from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from laminar_kafka.coordinator.vnodes.registry import VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.kafka_source import (
    CheckpointAttempt,
    ConfigurationError,
    ConnectorCancellationPolicy,
    ConnectorConfig,
    ConnectorTaskTracker,
    DeliveryGuarantee,
    KafkaSource,
    SourceBatch,
    SourceCheckpoint,
    SourceCheckpointUnavailablePolicy,
    SourceConnector,
    SourceContract,
    SourceDrainOutcome,
    SourceDrainRequest,
    SourceDrainResolution,
    SourceOrdering,
    SourcePosition,
    SourceStart,
    SourceTopology,
)

CONFIG = ConnectorConfig("kafka", {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"})


def test_resume_attempt_must_be_canonical() -> None:
    checkpoint = SourceCheckpoint.empty()
    SourceStart(CONFIG, SourcePosition.Resume(CheckpointAttempt(3, 3), checkpoint), DeliveryGuarantee.EXACTLY_ONCE)
    for attempt in (CheckpointAttempt(0, 0), CheckpointAttempt(3, 4)):
        with pytest.raises(ConfigurationError, match="canonical"):
            SourceStart(CONFIG, SourcePosition.Resume(attempt, checkpoint), DeliveryGuarantee.EXACTLY_ONCE)
    start = SourceStart(CONFIG, SourcePosition.Initial(), DeliveryGuarantee.BEST_EFFORT)
    assert start.into_parts() == (CONFIG, SourcePosition.Initial(), DeliveryGuarantee.BEST_EFFORT)


ROUND = AssignmentDrainId(1, 2, 7)


def test_drain_request_must_be_canonical() -> None:
    SourceDrainRequest(ROUND)
    with pytest.raises(ConfigurationError):
        SourceDrainRequest(AssignmentDrainId(1, 3, 7))


def test_delivery_guarantee() -> None:
    assert not DeliveryGuarantee.BEST_EFFORT.is_guaranteed
    assert DeliveryGuarantee.AT_LEAST_ONCE.is_guaranteed and DeliveryGuarantee.EXACTLY_ONCE.is_guaranteed


async def test_kafka_source_contract_identity_and_fail_closed_hooks() -> None:
    source = KafkaSource(CONFIG)
    contract = source.contract(CONFIG)
    assert contract.replayable and contract.append_only and contract.topology is SourceTopology.SPLITTABLE
    identity = source.recovery_identity_options(CONFIG)
    assert identity is not None and "b:1" not in identity.values()
    assert source.schema().names == ["value"]
    assert source.checkpoint_ready()
    with pytest.raises(ConfigurationError):
        source.set_vnode_assignment("src", object(), 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        source.begin_drain(SourceDrainRequest(ROUND), 0.0)
    with pytest.raises(ConfigurationError):
        source.poll_drain_ready(ROUND)
    with pytest.raises(ConfigurationError):
        source.acquire_partitions({"t:0": 1}, 1)
    with pytest.raises(ConfigurationError):
        await source.finish_drain(SourceDrainResolution(ROUND, SourceDrainOutcome.COMMIT), 0.0, {"t:0": 1})
    assert source.acquisition_needed() is None
    assert source.cancellation_policy() is ConnectorCancellationPolicy.RETIRE_CONNECTOR
    assert source.checkpoint_unavailable_policy() is SourceCheckpointUnavailablePolicy.HOLD_INTAKE
    with pytest.raises(ConfigurationError):
        source.contract(ConnectorConfig("postgres", {}))
    await source.close()


class _MinimalSource(SourceConnector):
    """Implements only the abstract methods: every vnode hook must fail closed."""

    async def start(self, request: SourceStart) -> None:
        return None

    async def poll_batch(self, max_records: int) -> SourceBatch | None:
        return None

    def schema(self) -> pa.Schema:
        return pa.schema([])

    def checkpoint(self) -> SourceCheckpoint:
        return SourceCheckpoint.empty()

    async def close(self) -> None:
        return None

    def contract(self, config: ConnectorConfig) -> SourceContract:
        return SourceContract(True, SourceTopology.SPLITTABLE, True, SourceOrdering.PER_SPLIT)


async def test_protocol_defaults_fail_closed_for_every_vnode_hook() -> None:
    source = _MinimalSource()
    resolution = SourceDrainResolution(ROUND, SourceDrainOutcome.ABORT)
    with pytest.raises(ConfigurationError):
        source.set_vnode_assignment("src", VnodeRegistry(8), 1)
    with pytest.raises(ConfigurationError):
        source.acquire_partitions(SourceCheckpoint.empty(), 1)
    with pytest.raises(ConfigurationError):
        source.begin_drain(SourceDrainRequest(ROUND), 0.0)
    with pytest.raises(ConfigurationError):
        source.poll_drain_ready(ROUND)
    with pytest.raises(ConfigurationError):
        await source.finish_drain(resolution, 0.0)
    with pytest.raises(ConfigurationError):
        await source.finish_drain(resolution, 0.0, handoff_cursors={"t:0": 1})
    with pytest.raises(ConfigurationError):
        source.add_partitions([("t", 1)])
    assert source.acquisition_needed() is None  # never in vnode mode: never waits for cursors
    assert source.terminal_task_tracker() is None
    assert source.cancellation_policy() is ConnectorCancellationPolicy.RETIRE_CONNECTOR
    assert source.checkpoint_unavailable_policy() is SourceCheckpointUnavailablePolicy.HOLD_INTAKE


async def test_task_tracker_waits_for_its_threads() -> None:
    tracker = ConnectorTaskTracker()
    assert tracker.is_terminated() and await tracker.wait(0)
    release = threading.Event()
    future = tracker.spawn("blocked", lambda: release.wait(10))
    assert not tracker.is_terminated()
    assert not await tracker.wait(0.05)  # times out while the thread blocks
    release.set()
    assert await tracker.wait(5) and tracker.is_terminated()
    assert future.result() is True


async def test_task_tracker_keeps_a_thread_whose_waiter_was_cancelled() -> None:
    tracker = ConnectorTaskTracker()
    release = threading.Event()
    future = tracker.spawn("blocked", lambda: release.wait(10))
    future.cancel()  # the caller gave up; the thread still runs
    assert not tracker.is_terminated()
    release.set()
    assert await tracker.wait(5)
