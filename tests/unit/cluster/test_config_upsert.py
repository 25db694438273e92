"""Upsert mode and the lake: Iceberg only, and the keys reach the Iceberg settings."""
from __future__ import annotations

import pytest

from laminar_kafka.cluster.config import settings_from
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out", "format": "json"}


@pytest.mark.parametrize("upsert", [{"upsert-keys": "id"}, {"format": "debezium-json", "upsert-keys": "id"}])
def test_upsert_mode_on_the_parquet_tree_is_refused_naming_iceberg(upsert: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="^upsert-keys and format=debezium-json need table-format=iceberg"):
        settings_from({**BASE, **upsert}, {}, {})


def test_the_upsert_keys_are_the_iceberg_tables_keys() -> None:
    settings = settings_from({**BASE, "upsert-keys": "id, region", "table-format": "iceberg"}, {}, {})
    assert settings.iceberg_settings().upsert_keys == ("id", "region")
    target = settings.lake_target()
    assert target.iceberg is not None and target.iceberg.upsert_keys == ("id", "region")
    assert settings_from({**BASE, "table-format": "iceberg"}, {}, {}).iceberg_settings().upsert_keys == ()
