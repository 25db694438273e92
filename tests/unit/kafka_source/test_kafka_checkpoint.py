"""Kafka's checkpoints name "kafka"; a Kafka source never resumes or acquires from another
connector's checkpoint (it is refused before any client is made)."""
from __future__ import annotations

import pytest

from laminar_kafka.connector import (
    UNNAMED,
    CheckpointAttempt,
    CheckpointError,
    ConnectorConfig,
    DeliveryGuarantee,
    ResumePosition,
    SourceCheckpoint,
    SourceStart,
)
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME, KAFKA_CURSORS, CursorCheckpoints
from laminar_kafka.kafka_source.read import startup
from laminar_kafka.kafka_source.vnode.assignment import cursor_offsets


def test_kafka_checkpoints_name_kafka() -> None:
    assert CONNECTOR_NAME == "kafka" == KAFKA_CURSORS.name
    assert CursorCheckpoints().of({("t", 0): 3}, 1).connector == "kafka"


@pytest.mark.parametrize("name", ["kafka", UNNAMED])
def test_kafka_takes_its_own_and_the_runtimes_cursors(name: str) -> None:
    assert cursor_offsets(SourceCheckpoint({"t:0": 4}, 1, name)) == {("t", 0): 4}
    assert cursor_offsets({"t:0": 4}) == {("t", 0): 4}


def test_cursor_offsets_runs_the_cursor_check_for_mappings_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handoff and acquisition cursors arrive as mappings from the runtime: the format's
    ``check_cursor`` hook must see them as it sees checkpoints."""
    from laminar_kafka.connector.checkpoint import CursorFormat
    from laminar_kafka.kafka_source.vnode import assignment

    class Strict(CursorFormat):
        def check_cursor(self, partition: tuple[str, int], position: int) -> None:
            if position > 100:
                raise CheckpointError(f"cursor {position} of {partition} is out of this log's range")

    monkeypatch.setattr(assignment, "KAFKA_CURSORS", Strict("kafka"))
    with pytest.raises(CheckpointError, match="cursor 101"):
        cursor_offsets({"t:0": 101})
    with pytest.raises(CheckpointError, match="cursor 101"):
        cursor_offsets(SourceCheckpoint({"t:0": 101}))
    assert cursor_offsets({"t:0": 100}) == {("t", 0): 100}


def test_kafka_refuses_handoff_cursors_of_another_connector() -> None:
    with pytest.raises(CheckpointError, match="belongs to connector 'redis', not 'kafka'"):
        cursor_offsets(SourceCheckpoint({"t:0": 4}, 1, "redis"))


async def test_kafka_refuses_to_resume_from_another_connectors_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_client(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a client was made")

    monkeypatch.setattr(startup, "make_consumer", no_client)
    checkpoint = SourceCheckpoint({"orders:0": 7}, 0, "redis")
    position = ResumePosition(CheckpointAttempt(3, 3), checkpoint)
    request = SourceStart(ConnectorConfig("kafka", {"bootstrap.servers": "k:1", "topics": "orders"}), position,
                          DeliveryGuarantee.EXACTLY_ONCE)
    with pytest.raises(CheckpointError, match="belongs to connector 'redis', not 'kafka'"):
        await KafkaSource().start(request)
