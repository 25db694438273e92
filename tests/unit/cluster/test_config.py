"""Node settings: precedence file < env < flags, validation, nearest-name errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.cluster.config import (
    SETTING_NAMES,
    TOOLING_ENV,
    NodeSettings,
    env_name,
    load_settings,
    settings_from,
)
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}


def test_defaults_and_derived_values() -> None:
    s = settings_from(BASE, {}, {})
    assert s.topics == ("orders",) and s.node_id == 1 and s.embedded
    assert s.effective_group_id == "laminar-default"
    assert s.effective_state_dir == "/tmp/out/_coordinator"
    props = s.source_properties()
    assert "_offset" in props["include-metadata"]
    assert "bootstrap.servers" not in props  # the client configuration reaches the source as a value
    assert s.source_config().kafka == s.kafka_client() and s.kafka_client().bootstrap == "k:9092"
    assert props["max-fetched-bytes"] == str(32 * 1024 * 1024)


def test_max_fetched_bytes_reaches_the_source() -> None:
    s = settings_from(BASE, {"LAMINAR_MAX_FETCHED_BYTES": "8388608"}, {})
    assert s.source_properties()["max-fetched-bytes"] == "8388608"
    with pytest.raises(ConfigurationError, match="max-fetched-bytes"):
        settings_from(BASE, {}, {"max-fetched-bytes": "0"})


def test_precedence_file_then_env_then_flags() -> None:
    file = {**BASE, "node_id": 2, "pipeline": "p-file", "checkpoint-interval-ms": 500}
    env = {"LAMINAR_NODE_ID": "3", "LAMINAR_PIPELINE": "p-env", "PATH": "/bin"}
    flags = {"node-id": "4", "pipeline": None}
    s = settings_from(file, env, flags)
    assert (s.node_id, s.pipeline, s.checkpoint_interval_ms) == (4, "p-env", 500)


def test_kafka_passthrough_from_file_and_env() -> None:
    s = settings_from({**BASE, "kafka": {"fetch.min.bytes": 1}}, {"LAMINAR_KAFKA__SECURITY_PROTOCOL": "SSL"}, {})
    assert s.kafka == {"fetch.min.bytes": "1", "security.protocol": "SSL"}
    assert s.source_config().kafka.properties["security.protocol"] == "SSL"
    assert not any(key.startswith("kafka.") for key in s.source_properties())


def test_topics_list_and_comma_string() -> None:
    assert settings_from({**BASE, "topic": ["a", "b"]}, {}, {}).topics == ("a", "b")
    assert settings_from(BASE, {}, {"topic": "a, b"}).topics == ("a", "b")


@pytest.mark.parametrize("bad, message", [
    ({"nod-id": 1}, "did you mean 'node-id'"),
    ({"node-id": "x"}, "not an integer"),
    ({"node-id": 0}, "node-id must be >= 1"),
    ({"metrics-port": 70000}, "metrics-port"),
    ({"format": "xml"}, "format='xml': expected one of raw, json"),
    ({"pipeline": "a/b"}, "pipeline"),
])
def test_invalid_values_are_rejected_with_the_setting_named(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        settings_from({**BASE, **bad}, {}, {})


def test_missing_required_settings_name_all_three_sources() -> None:
    with pytest.raises(ConfigurationError, match="LAMINAR_BOOTSTRAP"):
        settings_from({}, {}, {})


def test_misspelt_environment_variable_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="LAMINAR_NODE_ID"):
        settings_from(BASE, {"LAMINAR_NODE_IDD": "2"}, {})


def test_remote_output_in_embedded_mode_needs_a_state_dir() -> None:
    with pytest.raises(ConfigurationError, match="state-dir"):
        _ = settings_from({**BASE, "output": "s3://bucket/x"}, {}, {}).effective_state_dir


def test_load_settings_reads_toml(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('bootstrap = "k:1"\ntopic = "t"\noutput = "/o"\nnode-id = 5\n[kafka]\n"client.id" = "c"\n')
    s = load_settings(path, {}, {"metrics-port": "9100"})
    assert (s.node_id, s.metrics_port, s.kafka["client.id"]) == (5, 9100, "c")


def test_load_settings_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read config file"):
        load_settings(tmp_path / "missing.toml", {}, {})
    bad = tmp_path / "bad.toml"
    bad.write_text("bootstrap = ")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings(bad, {}, {})


def test_every_setting_has_an_env_name_and_a_field() -> None:
    fields = set(NodeSettings.__dataclass_fields__)
    for name in SETTING_NAMES:
        assert env_name(name).startswith("LAMINAR_")
        assert name.replace("-", "_") in fields or name == "topic"


def test_a_topic_pattern_is_one_setting_and_reaches_the_source() -> None:
    s = settings_from(BASE, {}, {"topic": r"re:orders\.(eu|us){1,2}"})
    assert s.topics == (r"re:orders\.(eu|us){1,2}",) and s.selector.is_pattern
    props = s.source_properties()
    assert props["topic"] == r"re:orders\.(eu|us){1,2}" and props["partition-discovery-interval-ms"] == "0"
    with pytest.raises(ConfigurationError, match="regular expression"):
        settings_from(BASE, {}, {"topic": "re:("})


def test_every_startup_mode_and_its_parameter() -> None:
    ts = settings_from(BASE, {}, {"startup-mode": "timestamp", "startup-timestamp-ms": "1700000000000"})
    assert ts.source_properties()["startup-timestamp-ms"] == "1700000000000"
    so = settings_from(BASE, {}, {"startup-mode": "specific-offsets", "startup-specific-offsets": "t:0:5"})
    assert so.source_properties()["startup-specific-offsets"] == "t:0:5"
    with pytest.raises(ConfigurationError, match="startup-timestamp-ms"):
        settings_from(BASE, {}, {"startup-mode": "timestamp"})
    with pytest.raises(ConfigurationError, match="startup-specific-offsets"):
        settings_from(BASE, {}, {"startup-specific-offsets": "t:0:5"})
    with pytest.raises(ConfigurationError, match="startup-mode"):
        settings_from(BASE, {}, {"startup-mode": "middle"})
    assert settings_from(BASE, {}, {"topology-interval-ms": "0"}).topology_interval_ms == 0
    with pytest.raises(ConfigurationError, match="topology-interval-ms"):
        settings_from(BASE, {}, {"topology-interval-ms": "-1"})


@pytest.mark.parametrize("name", sorted(TOOLING_ENV))
def test_the_tooling_environment_variables_are_not_node_settings(name: str) -> None:
    # LAMINAR_CACHE_DIR is close to no setting, LAMINAR_CONTAINERS_REQUIRED... all must pass untouched
    assert settings_from(BASE, {name: "1"}, {}) == settings_from(BASE, {}, {})


def test_manifest_deltas_default_on_and_reach_the_coordinator() -> None:
    from laminar_kafka.cluster.node import coordinator_config

    zk = {**BASE, "zk": "z:2181"}
    assert coordinator_config(settings_from(zk, {}, {})).manifest_deltas is True
    off = settings_from(zk, {"LAMINAR_MANIFEST_DELTAS": "false"}, {})
    assert off.manifest_deltas is False and coordinator_config(off).manifest_deltas is False
    with pytest.raises(ConfigurationError, match="manifest-deltas"):
        settings_from(zk, {}, {"manifest-deltas": "sometimes"})


def test_the_quiet_checkpoint_interval_reaches_the_coordinator_and_the_runtime() -> None:
    from laminar_kafka.cluster.node import coordinator_config, epoch_ask_after_s

    s = settings_from(BASE, {}, {})
    assert coordinator_config(s).quiet_checkpoint_interval == 10.0 and epoch_ask_after_s(s) == 3.0
    off = settings_from(BASE, {}, {"quiet-checkpoint-interval-ms": "0"})
    assert coordinator_config(off).quiet_checkpoint_interval == 0.0 and epoch_ask_after_s(off) is None
    for bad, message in (("1999", "must be 0 .off. or at least"), ("-1", "must be >= 0")):
        with pytest.raises(ConfigurationError, match=f"quiet-checkpoint-interval-ms {message}"):
            settings_from(BASE, {}, {"quiet-checkpoint-interval-ms": bad})
