"""`pin_setting`: a create-once pipeline setting every node and every restart shares."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.layout import setting_path
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.errors import ConfigurationError


def test_local_pin_is_create_once_and_survives_a_restart(tmp_path: Path) -> None:
    config = CoordinatorConfig(pipeline="p", checkpoint_interval=60)
    first = LocalCoordinator(config, tmp_path)
    assert first.pin_setting("json.schema", "a:int64,b:string") == "a:int64,b:string"
    assert first.pin_setting("json.schema", "a:double") == "a:int64,b:string"
    assert first.pin_setting("other", "") == ""
    assert first.pin_setting("unpinned", None) is None
    restarted = LocalCoordinator(config, tmp_path)
    assert restarted.pin_setting("json.schema", None) == "a:int64,b:string"  # None only reads
    assert restarted.pin_setting("json.schema", "z:string") == "a:int64,b:string"
    assert restarted.pin_topic_ids({"t": "id"}) == {"t": "id"}  # the two records live apart
    assert restarted.pin_setting("json.schema", "") == "a:int64,b:string"


@pytest.mark.parametrize("name", ["", "A", "a/b", "..", "x" * 101, "a b"])
def test_illegal_setting_names_are_refused(tmp_path: Path, name: str) -> None:
    coordinator = LocalCoordinator(CoordinatorConfig(pipeline="p", checkpoint_interval=60), tmp_path)
    with pytest.raises(ConfigurationError):
        coordinator.pin_setting(name, "v")


def test_memory_store_pin_is_create_once() -> None:
    store = MemoryStore()
    assert store.pin_setting("json.schema", None) is None
    assert store.pin_setting("json.schema", "a:int64") == "a:int64"
    assert store.pin_setting("json.schema", None) == "a:int64"
    assert store.pin_setting("json.schema", "b:int64") == "a:int64"
    assert store.nodes[setting_path("json.schema")][0] == b"a:int64"
