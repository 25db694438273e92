"""Topology observations and their changes (pure): growth, new topics, re-created and missing topics."""
from __future__ import annotations

import pytest

from laminar_kafka.cluster.runtime.node_runtime import pinned_start_config
from laminar_kafka.cluster.runtime.topology import (
    MISSING_OBSERVATIONS,
    TopicInfo,
    Topology,
    TopologyError,
    TopologyView,
    topology_change,
)
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig, StartupMode

A8 = TopicInfo("a", "id-a", 8)


def test_partitions_added_and_a_new_topic_are_growth() -> None:
    before = Topology.of(A8)
    after = Topology.of(TopicInfo("a", "id-a", 10), TopicInfo("b", "id-b", 2))
    change = topology_change(before, after, {"a": "id-a"})
    assert change.grew
    assert change.new_partitions == {("a", 8), ("a", 9), ("b", 0), ("b", 1)}
    assert dict(change.new_topics) == {"b": "id-b"} and not change.missing
    assert before.merged(after).partitions() == after.partitions()


def test_nothing_changed() -> None:
    change = topology_change(Topology.of(A8), Topology.of(A8), {"a": "id-a"})
    assert not change.grew and not change.new_topics and not change.missing


def test_a_missing_topic_is_reported_not_forgotten() -> None:
    before = Topology.of(A8, TopicInfo("b", "id-b", 1))
    after = Topology.of(A8)
    change = topology_change(before, after, {})
    assert change.missing == {"b"} and not change.grew
    assert "b" in before.merged(after).topics


@pytest.mark.parametrize("pinned", [{"a": "id-old"}, {}])
def test_a_recreated_topic_is_an_error(pinned: dict[str, str]) -> None:
    before = Topology.of(TopicInfo("a", "id-old", 8)) if not pinned else Topology()
    with pytest.raises(TopologyError, match="deleted and re-created"):
        topology_change(before, Topology.of(A8), pinned)


def test_fewer_partitions_is_an_error() -> None:
    with pytest.raises(TopologyError, match="fewer"):
        topology_change(Topology.of(A8), Topology.of(TopicInfo("a", "id-a", 4)), {"a": "id-a"})


def test_pinned_start_config_uses_exactly_the_pinned_offsets() -> None:
    connector = ConnectorConfig("kafka", {
        "bootstrap.servers": "b", "topic": "a", "group.id": "g", "startup-mode": "latest",
    })
    pinned = pinned_start_config(connector, {"a:0": 17, "a:1": 0})
    config = KafkaSourceConfig.from_properties(pinned.properties)
    assert config.startup_mode is StartupMode.SPECIFIC_OFFSETS
    assert dict(config.startup_specific_offsets) == {("a", 0): 17, ("a", 1): 0}
    timestamp = ConnectorConfig("kafka", {**connector.properties, "startup-mode": "timestamp",
                                          "startup-timestamp-ms": "5"})
    empty = KafkaSourceConfig.from_properties(pinned_start_config(timestamp, {}).properties)
    assert empty.startup_mode is StartupMode.EARLIEST and empty.startup_timestamp_ms is None


def test_view_pins_new_topics_and_fails_on_a_different_durable_id() -> None:
    view, change = TopologyView().observe(Topology.of(A8))
    assert dict(change.new_topics) == {"a": "id-a"} and change.grew
    pinned = view.with_pinned(change.new_topics, {"a": "id-a"})
    assert dict(pinned.pinned_ids) == {"a": "id-a"}
    with pytest.raises(TopologyError, match="pinned topic id id-first"):
        view.with_pinned(change.new_topics, {"a": "id-first"})  # re-created while no node ran
    again, change = pinned.observe(Topology.of(A8))
    assert not change.grew and not change.new_topics and again == pinned


def test_view_declares_a_topic_deleted_only_after_consecutive_misses() -> None:
    view, _ = TopologyView().observe(Topology.of(A8, TopicInfo("b", "id-b", 1)))
    for count in range(1, MISSING_OBSERVATIONS):
        view, change = view.observe(Topology.of(A8))
        assert change.missing == {"b"} and view.missing_streak["b"] == count
    back, change = view.observe(Topology.of(A8, TopicInfo("b", "id-b", 1)))
    assert not back.missing_streak and not change.missing  # a glitch: the streak restarts
    for _ in range(MISSING_OBSERVATIONS - 1):
        back, _ = back.observe(Topology.of(A8))
    with pytest.raises(TopologyError, match="was deleted"):
        back.observe(Topology.of(A8))
