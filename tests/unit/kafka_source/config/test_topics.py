"""TopicSelector: named topics or a pattern (pure)."""
from __future__ import annotations

import pytest

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.config.topics import TopicSelector


def test_named_topics() -> None:
    selector = TopicSelector.parse(" orders , refunds ")
    assert selector.names == ("orders", "refunds") and not selector.is_pattern
    assert selector.matches("orders") and not selector.matches("orders.v2")
    assert selector.select(["refunds", "x", "orders"]) == ("orders", "refunds")
    assert selector.select(["x"]) == ()
    assert str(selector) == "orders,refunds"


def test_pattern_matches_whole_names_and_never_internal_topics() -> None:
    selector = TopicSelector.parse(r"re:orders\..*")
    assert selector.is_pattern and selector.names == ()
    assert selector.matches("orders.eu") and not selector.matches("orders") and not selector.matches("xorders.eu")
    assert TopicSelector.parse("re:.*").select(["__consumer_offsets", "__transaction_state", "a"]) == ("a",)
    assert selector.select(["orders.b", "orders.a", "other"]) == ("orders.a", "orders.b")
    assert str(selector) == r"re:orders\..*"
    assert TopicSelector.parse("re:a{1,2}").matches("aa")  # a comma inside the regex is not a list


@pytest.mark.parametrize("value, message", [
    ("re:", "needs a regular expression"),
    ("re:(", "not a valid regular expression"),
    ("a,a", "twice"),
    ("bad topic", "invalid topic name"),
    (" , ", "missing required property"),
])
def test_bad_selectors(value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TopicSelector.parse(value)


def test_source_config_takes_a_pattern() -> None:
    config = KafkaSourceConfig.from_properties({
        "bootstrap.servers": "b:9092", "topic": r"re:orders\..*", "group.id": "g",
        "startup-mode": "specific-offsets", "startup-specific-offsets": "orders.eu:0:5",
    })
    assert config.topics == () and config.topic_pattern == r"orders\..*"
    assert config.selector.matches("orders.us")
    assert config.identity_options()["topic"] == r"re:orders\..*"
    with pytest.raises(ConfigurationError, match="not configured"):
        KafkaSourceConfig.from_properties({
            "bootstrap.servers": "b:9092", "topic": r"re:orders\..*", "group.id": "g",
            "startup-mode": "specific-offsets", "startup-specific-offsets": "refunds:0:5",
        })
