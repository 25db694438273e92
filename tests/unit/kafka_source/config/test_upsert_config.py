"""upsert-keys and format=debezium-json: parsing, validation, their rules with on-tombstone and
json-schema, the node's pass-through and the source's identity and contract."""
from __future__ import annotations

import pytest

from laminar_kafka.cluster.settings_def import NODE_SETTINGS
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.connector.settings import Layer
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.kafka_source.config.definitions import SOURCE_SETTINGS, UPSERT_KEYS
from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig

BASE = {"bootstrap.servers": "b:1", "topic": "t", "group.id": "g"}
JSON = {**BASE, "format": "json", "json-schema": "id:int64,tenant:string,v:double"}


def test_upsert_keys_parse_to_a_tuple_in_order_default_empty() -> None:
    assert KafkaSourceConfig.from_properties(JSON).upsert_keys == ()
    assert KafkaSourceConfig.from_properties({**JSON, "upsert-keys": " tenant , id "}).upsert_keys == ("tenant", "id")
    assert KafkaSourceConfig.from_properties({**JSON, "upsert-keys": ""}).upsert_keys == ()


@pytest.mark.parametrize(("keys", "message"), [
    ("id,", "upsert-keys='id,' has an empty field name"),
    ("id,,tenant", "has an empty field name"),
    ("id,tenant,id", "upsert-keys names id twice"),
    ("_offset", "upsert-keys: _offset is a column the source adds"),
    ("id,_op", "upsert-keys: _op is a column the source adds"),
    ("sku", "upsert-keys: sku is not a field of json-schema"),
])
def test_invalid_upsert_keys_are_refused_in_one_line(keys: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        KafkaSourceConfig.from_properties({**JSON, "upsert-keys": keys})
    assert "\n" not in str(caught.value)


def test_upsert_mode_makes_tombstones_deletes_so_on_tombstone_may_not_be_set() -> None:
    for policy in ("bad", "row"):
        with pytest.raises(ConfigurationError, match="on-tombstone cannot be set with upsert-keys"):
            KafkaSourceConfig.from_properties({**JSON, "upsert-keys": "id", "on-tombstone": policy})
    assert KafkaSourceConfig.from_properties({**JSON, "on-tombstone": "row"}).upsert_keys == ()


def test_raw_has_no_fields_to_key() -> None:
    with pytest.raises(ConfigurationError, match="upsert-keys needs a format with fields"):
        KafkaSourceConfig.from_properties({**BASE, "upsert-keys": "id"})


def test_debezium_json_needs_upsert_keys_and_takes_a_json_schema() -> None:
    with pytest.raises(ConfigurationError, match="format=debezium-json needs upsert-keys"):
        KafkaSourceConfig.from_properties({**BASE, "format": "debezium-json"})
    config = KafkaSourceConfig.from_properties(
        {**BASE, "format": "debezium-json", "upsert-keys": "id", "json-schema": "id:int64"})
    assert config.format is Format.DEBEZIUM_JSON and config.format.reads_json and not config.format.uses_registry
    with pytest.raises(ConfigurationError, match="json-schema is only valid with format=json or debezium-json"):
        KafkaSourceConfig.from_properties({**BASE, "format": "raw", "json-schema": "id:int64"})


def test_registry_formats_take_upsert_keys_checked_against_each_batch() -> None:
    config = KafkaSourceConfig.from_properties(
        {**BASE, "format": "avro", "schema.registry.url": "mock://x", "upsert-keys": "any_name"})
    assert config.upsert_keys == ("any_name",)


def test_upsert_keys_is_declared_once_and_the_node_passes_it_through() -> None:
    assert SOURCE_SETTINGS["upsert-keys"] is UPSERT_KEYS and UPSERT_KEYS.layer is Layer.BOTH
    assert NODE_SETTINGS["upsert-keys"] is UPSERT_KEYS
    assert SOURCE_SETTINGS["on-tombstone"].default is None  # so the node passes it only when set


def test_upsert_keys_are_part_of_the_identity_and_upsert_mode_is_not_append_only() -> None:
    keyed = {**JSON, "upsert-keys": "id"}
    assert KafkaSourceConfig.from_properties(keyed).identity_options()["upsert-keys"] == "id"
    assert "upsert-keys" not in KafkaSourceConfig.from_properties(JSON).identity_options()
    source = KafkaSource()
    assert not source.contract(ConnectorConfig(CONNECTOR_NAME, keyed)).append_only
    assert source.contract(ConnectorConfig(CONNECTOR_NAME, JSON)).append_only
