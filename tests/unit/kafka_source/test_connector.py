from __future__ import annotations

from dataclasses import dataclass

import pytest

from kafka_source import (
    CheckpointAttempt,
    ConfigurationError,
    ConnectorConfig,
    DeliveryGuarantee,
    KafkaSource,
    SourceCheckpoint,
    SourceDrainRequest,
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


@dataclass(frozen=True)
class Round:
    canonical: bool

    def is_canonical(self) -> bool:
        return self.canonical


def test_drain_request_must_be_canonical() -> None:
    SourceDrainRequest(Round(True))
    with pytest.raises(ConfigurationError):
        SourceDrainRequest(Round(False))


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
        source.begin_drain(SourceDrainRequest(Round(True)), 0.0)
    with pytest.raises(ConfigurationError):
        source.poll_drain_ready(Round(True))
    with pytest.raises(ConfigurationError):
        source.contract(ConnectorConfig("postgres", {}))
    await source.close()
