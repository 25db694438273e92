"""Each setting declared once: docs/settings.md's tables, the source's keys, the node's settings and
the run command's flags all come from the declarations, and nothing drifts from them."""
from __future__ import annotations

import argparse
import warnings

import pytest

from laminar_kafka.cli.settings_doc import DOC, generated, main, node_table, source_table
from laminar_kafka.cluster.config import SETTING_NAMES, NodeSettings, settings_from
from laminar_kafka.cluster.settings_def import NODE_SETTINGS, env_name
from laminar_kafka.connector.settings import Layer
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.definitions import SOURCE_SETTINGS, VALID_KEYS
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig

BASE = {"bootstrap.servers": "k:9092", "topic": "t", "group.id": "g"}
NODE = {"bootstrap": "k:9092", "topic": "t", "output": "/tmp/out"}


def test_docs_settings_tables_are_generated_from_the_declarations() -> None:
    text = DOC.read_text()
    assert generated(text) == text, "run: python -m laminar_kafka.cli.settings_doc"
    assert source_table() in text and node_table() in text
    assert main(["--check"]) == 0


def test_the_drift_check_fails_on_a_hand_edited_table(tmp_path: pytest.TempPathFactory) -> None:
    text = DOC.read_text()
    edited = text.replace("| `batch-wait-ms` | `250` |", "| `batch-wait-ms` | `500` |", 1)
    assert edited != text
    assert generated(edited) == text
    path = tmp_path / "settings.md"  # type: ignore[operator]
    path.write_text(edited)
    assert main(["--check", "--path", str(path)]) == 1
    assert main(["--path", str(path)]) == 0 and path.read_text() == text


def test_the_source_keys_are_its_declarations() -> None:
    assert VALID_KEYS == tuple(SOURCE_SETTINGS)
    config = KafkaSourceConfig.from_properties(BASE)
    for name, attr in (("batch-wait-ms", "batch_wait_ms"), ("max-fetched-bytes", "max_fetched_bytes"),
                       ("format", "format"), ("startup-mode", "startup_mode"), ("on-tombstone", "on_tombstone")):
        assert getattr(config, attr) == SOURCE_SETTINGS[name].default


def test_the_node_passes_the_sources_declarations_through_never_declaring_them_again() -> None:
    both = [name for name, setting in NODE_SETTINGS.items() if setting.layer is Layer.BOTH]
    assert "batch-wait-ms" in both and "on-bad-record" in both
    for name in both:
        assert NODE_SETTINGS[name] is SOURCE_SETTINGS[name]
    for name, setting in NODE_SETTINGS.items():
        if setting.layer is Layer.NODE:
            assert name not in SOURCE_SETTINGS


def test_the_node_defaults_are_the_declared_ones() -> None:
    settings = NodeSettings(bootstrap="k:9092", topics=("t",), output="/tmp/out")
    assert settings.batch_wait_ms == NODE_SETTINGS["batch-wait-ms"].default == 250
    assert settings.session_timeout_ms == NODE_SETTINGS["session-timeout-ms"].default == 6000
    assert settings.table_format == NODE_SETTINGS["table-format"].default.value


def test_source_properties_are_read_by_the_source_without_warnings() -> None:
    settings = settings_from(NODE, {}, {"batch-wait-ms": "40", "on-bad-record": "skip", "max-error-rate": "0.5",
                                        "fail-on-data-loss": "false", "startup-mode": "timestamp",
                                        "startup-timestamp-ms": "0"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = settings.source_config()
    assert config.batch_wait_ms == 40 and config.max_error_rate == 0.5 and not config.fail_on_data_loss
    assert config.on_bad_record is not None and config.on_bad_record.value == "skip"
    assert config.startup_timestamp_ms == 0


def test_a_startup_timestamp_is_one_rule_everywhere() -> None:
    """>= 0 in the source and in the node (0, the epoch, is a time; Kafka's negative ones are sentinels)."""
    with pytest.raises(ConfigurationError, match=">= 0"):
        KafkaSourceConfig.from_properties({**BASE, "startup-mode": "timestamp", "startup-timestamp-ms": "-1"})
    with pytest.raises(ConfigurationError, match=">= 0"):
        settings_from(NODE, {}, {"startup-mode": "timestamp", "startup-timestamp-ms": "-1"})
    assert settings_from(NODE, {}, {"startup-mode": "timestamp", "startup-timestamp-ms": "0"}).startup_timestamp_ms == 0
    with pytest.raises(ConfigurationError, match="goes with startup-mode=timestamp"):
        settings_from(NODE, {}, {"startup-timestamp-ms": "5"})


def test_an_old_dotted_spelling_is_read_with_one_warning_naming_the_new_key() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        config = KafkaSourceConfig.from_properties({**BASE, "batch.wait.ms": "7", "on.bad.record": "skip"})
    assert config.batch_wait_ms == 7 and config.on_bad_record is not None
    messages = sorted(str(w.message) for w in caught if issubclass(w.category, DeprecationWarning))
    assert messages == ["property 'batch.wait.ms' is deprecated: use 'batch-wait-ms'",
                        "property 'on.bad.record' is deprecated: use 'on-bad-record'"]
    with pytest.raises(ConfigurationError, match="same setting"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        KafkaSourceConfig.from_properties({**BASE, "batch.wait.ms": "7", "batch-wait-ms": "8"})


def test_run_flags_and_help_come_from_the_declarations() -> None:
    from laminar_kafka.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = subparsers.choices["run"]
    flags = {action.option_strings[0][2:]: action for action in run._actions if action.option_strings}
    assert set(SETTING_NAMES) <= set(flags)
    for name, setting in NODE_SETTINGS.items():
        action = flags[name]
        assert action.help == f"{setting.help()} [env {env_name(name)}]"
        assert tuple(action.choices or ()) == setting.choices
    assert "(default 250)" in flags["batch-wait-ms"].help


def test_the_readmes_short_table_shows_the_declared_defaults() -> None:
    """The README lists the settings people change most by hand; each single-setting row with a
    value default must show the declared one (``on-bad-record``: the node's, fail)."""
    readme = (DOC.parents[1] / "README.md").read_text()
    rows = [line.split("|") for line in readme.splitlines() if line.startswith("| `")]
    checked = 0
    for row in rows:
        name, default = row[1].strip().strip("`"), row[2].strip().split(" ")[0].strip("`")
        if name in NODE_SETTINGS and "`" not in name and default:
            expected = NODE_SETTINGS[name].default_text.split(" ")[0]
            assert default == expected, f"README: {name} default {default}, declared {expected}"
            checked += 1
    assert checked >= 4
