from __future__ import annotations

import pytest

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import CheckpointError
from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.read.startup import BrokerFacts, resolve_initial, resolve_out_of_range, resolve_resume

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}
FACTS = BrokerFacts({("t", 0): (10, 20), ("t", 1): (0, 0), ("t", 2): (5, 50)})
ALO = DeliveryGuarantee.AT_LEAST_ONCE
BE = DeliveryGuarantee.BEST_EFFORT


def config(**extra: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.from_properties({**BASE, **extra})


def test_earliest_and_latest() -> None:
    assert dict(resolve_initial(config(), FACTS, ALO).offsets) == {("t", 0): 10, ("t", 1): 0, ("t", 2): 5}
    latest = resolve_initial(config(**{"startup-mode": "latest"}), FACTS, ALO)
    assert dict(latest.offsets) == {("t", 0): 20, ("t", 1): 0, ("t", 2): 50}


def test_timestamp() -> None:
    facts = BrokerFacts(FACTS.watermarks, {("t", 0): 15, ("t", 1): None, ("t", 2): 3})
    cfg = config(**{"startup-mode": "timestamp", "startup-timestamp-ms": "1000"})
    assert dict(resolve_initial(cfg, facts, ALO).offsets) == {("t", 0): 15, ("t", 1): 0, ("t", 2): 5}


def test_specific_offsets() -> None:
    cfg = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:12,t:2:50"})
    assert dict(resolve_initial(cfg, FACTS, ALO).offsets) == {("t", 0): 12, ("t", 1): 0, ("t", 2): 50}
    beyond = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:21"})
    with pytest.raises(ConfigurationError):
        resolve_initial(beyond, FACTS, ALO)
    missing = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:9:0"})
    with pytest.raises(ConfigurationError):
        resolve_initial(missing, FACTS, ALO)
    below = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:3"})
    with pytest.raises(OffsetOutOfRangeError):
        resolve_initial(below, FACTS, ALO)
    plan = resolve_initial(below, FACTS, BE)
    assert plan.offsets[("t", 0)] == 10 and plan.resets == 1


def test_resume_exact_and_new_partitions_at_low() -> None:
    checkpoint = SourceCheckpoint.from_partitions({("t", 0): 17, ("t", 2): 5})
    plan = resolve_resume(config(), checkpoint, FACTS, DeliveryGuarantee.EXACTLY_ONCE)
    assert dict(plan.offsets) == {("t", 0): 17, ("t", 1): 0, ("t", 2): 5}
    assert plan.resets == 0


@pytest.mark.parametrize("delivery", [DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE])
def test_resume_below_low_watermark_fails_under_guaranteed_delivery(delivery: DeliveryGuarantee) -> None:
    checkpoint = SourceCheckpoint.from_partitions({("t", 0): 9})
    with pytest.raises(OffsetOutOfRangeError) as info:
        resolve_resume(config(), checkpoint, FACTS, delivery)
    assert (info.value.topic, info.value.partition, info.value.offset, info.value.low) == ("t", 0, 9, 10)
    assert isinstance(info.value, CheckpointError)


@pytest.mark.parametrize("delivery", [DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE])
def test_fail_on_data_loss_false_resumes_at_the_low_watermark_and_logs_the_lost_offsets(
        delivery: DeliveryGuarantee, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint = SourceCheckpoint.from_partitions({("t", 0): 7, ("t", 2): 5})
    with pytest.raises(OffsetOutOfRangeError, match="fail-on-data-loss=false resumes"):
        resolve_resume(config(), checkpoint, FACTS, delivery)
    with caplog.at_level("WARNING", logger="laminar_kafka.kafka_source.read.startup"):
        plan = resolve_resume(config(**{"fail-on-data-loss": "false"}), checkpoint, FACTS, delivery)
    assert plan.offsets[("t", 0)] == 10 and plan.offsets[("t", 2)] == 5 and plan.resets == 1 and plan.lost == 3
    assert [r.getMessage() for r in caplog.records] == [
        "checkpoint offset 7 of t:0 is below the low watermark 10: offsets 7..9 were deleted by retention "
        "before they were read and are lost; resuming at 10 (fail-on-data-loss=false)"]
    with pytest.raises(OffsetOutOfRangeError, match="beyond the high watermark"):  # not a retention loss
        resolve_resume(config(**{"fail-on-data-loss": "false"}), SourceCheckpoint.from_partitions({("t", 2): 51}),
                       FACTS, delivery)


def test_fail_on_data_loss_takes_true_or_false() -> None:
    assert config().fail_on_data_loss and not config(**{"fail-on-data-loss": "no"}).fail_on_data_loss
    with pytest.raises(ConfigurationError, match="fail-on-data-loss='maybe' is not a boolean"):
        config(**{"fail-on-data-loss": "maybe"})


def test_resume_out_of_range_resets_under_best_effort() -> None:
    checkpoint = SourceCheckpoint.from_partitions({("t", 0): 9, ("t", 2): 51})
    plan = resolve_resume(config(), checkpoint, FACTS, BE)
    assert plan.offsets[("t", 0)] == 10 and plan.offsets[("t", 2)] == 5 and plan.resets == 2
    with pytest.raises(OffsetOutOfRangeError):
        resolve_resume(config(), checkpoint, FACTS, ALO)


def test_resume_rejects_foreign_topic_or_missing_partition() -> None:
    with pytest.raises(CheckpointError, match="not configured"):
        resolve_resume(config(), SourceCheckpoint.from_partitions({("other", 0): 1}), FACTS, ALO)
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_resume(config(), SourceCheckpoint.from_partitions({("t", 7): 1}), FACTS, ALO)


@pytest.mark.parametrize("delivery", [DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE])
def test_a_read_offset_deleted_under_a_running_reader_is_resolved_like_a_checkpoint_below_low(
        delivery: DeliveryGuarantee, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(OffsetOutOfRangeError, match="read offset 7 of t:0 is below the low watermark 10 "
                       r"\(records were deleted by retention\); .*fail-on-data-loss=false resumes") as info:
        resolve_out_of_range(("t", 0), 7, 10, 20, delivery, config())
    assert (info.value.offset, info.value.low, info.value.high) == (7, 10, 20)
    with caplog.at_level("WARNING", logger="laminar_kafka.kafka_source.read.startup"):
        assert resolve_out_of_range(("t", 0), 7, 10, 20, delivery, config(**{"fail-on-data-loss": "false"})) == 10
    assert [r.getMessage() for r in caplog.records] == [
        "read offset 7 of t:0 is below the low watermark 10: offsets 7..9 were deleted by retention "
        "before they were read and are lost; resuming at 10 (fail-on-data-loss=false)"]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_read_offset_beyond_the_partitions_end_always_fails_naming_re_creation(fail_on_data_loss: str) -> None:
    with pytest.raises(OffsetOutOfRangeError, match="t:0 now ends at offset 3, below the read offset 7: the topic "
                       "was deleted and re-created, or an unclean leader election truncated its log") as info:
        resolve_out_of_range(("t", 0), 7, 0, 3, ALO, config(**{"fail-on-data-loss": fail_on_data_loss}))
    assert (info.value.topic, info.value.partition, info.value.offset, info.value.high) == ("t", 0, 7, 3)


def test_a_read_offset_back_in_range_is_read_again() -> None:
    assert resolve_out_of_range(("t", 0), 12, 10, 20, ALO, config()) == 12
    assert resolve_out_of_range(("t", 0), 20, 10, 20, ALO, config()) == 20  # the end: wait for records there


def test_offsets_skipped_at_the_start_are_counted_lost_and_a_re_read_is_not() -> None:
    below = config(**{"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:3,t:2:1"})
    assert resolve_initial(below, FACTS, BE).lost == (10 - 3) + (5 - 1)
    beyond = resolve_resume(config(), SourceCheckpoint.from_partitions({("t", 2): 51}), FACTS, BE)
    assert beyond.resets == 1 and beyond.lost == 0  # reset to the low watermark: read again, not lost
    assert resolve_resume(config(), SourceCheckpoint.from_partitions({("t", 0): 12}), FACTS, ALO).lost == 0


def test_lost_offsets_reach_the_hook_a_node_exports_them_with() -> None:
    from laminar_kafka.kafka_source.metrics import SourceMetrics

    exported: list[int] = []
    metrics = SourceMetrics(on_offsets_lost=exported.append)
    metrics.count_lost(0, resets=2)  # partitions reset without a loss (best-effort, beyond the end)
    metrics.count_lost(35)
    assert (metrics.offset_resets, metrics.offsets_lost, exported) == (3, 35, [35])
