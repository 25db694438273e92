"""The settings that define a pipeline are pinned at its first start; a node that disagrees is refused
in one line naming the setting, its value and the pipeline's (docs/settings.md)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from laminar_kafka.cli.exit_codes import exit_code
from laminar_kafka.cluster.config import NodeSettings
from laminar_kafka.cluster.lake.pins import (
    PINNED_AT_FIRST_START,
    PINNED_SETTINGS,
    PUBLISHED_ASSIGNMENT,
    Mismatch,
    PipelinePins,
    chain_pins,
    compare,
    mismatch_message,
    normalise_output,
    normalise_topics,
    pin_name,
    pipeline_values,
)
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.errors import ConfigurationError

BASE = NodeSettings(bootstrap="k:9092", topics=("orders",), output="/lake", pipeline="orders")
#: for each pinned setting: the flag values of a node that disagrees with BASE
OTHER: dict[str, dict[str, object]] = {
    "topic": {"topics": ("orders", "payments")},
    "output": {"output": "/elsewhere"},
    "table-format": {"table_format": "iceberg"},
    "partition-by": {"partition_by": "hour"},
    "format": {"format": "json"},
    "vnode-count": {"vnode_count": 64},
    "source-identity": {"source_identity": "kafka-eu"},
    "table-topic-regex": {"table_template": "{topic:1}", "table_topic_regex": "(o)rders"},
    "table-allowed": {"table_allowed": "orders"},
    "table-template": {"table_template": "t_{topic}"},
    "upsert-keys": {"table_format": "iceberg", "upsert_keys": "id"},
}
#: a pipeline differing from OTHER[setting] in that setting alone, where BASE differs in more
ALIKE: dict[str, dict[str, object]] = {"table-topic-regex": {"table_template": "{topic:1}", "table_topic_regex": "(.)rders"},
                                       "upsert-keys": {"table_format": "iceberg", "upsert_keys": "tenant,id"}}


def settings(**changes: object) -> NodeSettings:
    fields = {name: getattr(BASE, name) for name in ("bootstrap", "topics", "output", "pipeline")}
    return NodeSettings(**{**fields, **changes})  # type: ignore[arg-type]


class Pins:
    """The coordinator's pin_setting (create-once) and assignment, counting writes."""

    def __init__(self, snapshot: AssignmentSnapshot | None = None) -> None:
        self.values: dict[str, str] = {}
        self.writes: list[str] = []
        self.snapshot = snapshot or AssignmentSnapshot.initial(256)

    def pin_setting(self, name: str, value: str | None) -> str | None:
        if value is None:
            return self.values.get(name)
        self.writes.append(name)
        return self.values.setdefault(name, value)

    def assignment(self) -> AssignmentSnapshot:
        return self.snapshot


def test_every_defining_setting_is_pinned() -> None:
    assert set(OTHER) == set(PINNED_SETTINGS) == set(pipeline_values(BASE))


# -- the pure comparison: every setting equal, different, absent -----------------------------------


@pytest.mark.parametrize("setting", PINNED_SETTINGS)
def test_equal_pin_is_no_mismatch(setting: str) -> None:
    here = pipeline_values(BASE)
    assert compare(here, {setting: here[setting]}) == []
    assert compare(here, dict(here)) == []


@pytest.mark.parametrize("setting", PINNED_SETTINGS)
def test_different_pin_is_a_mismatch_named_in_one_line(setting: str) -> None:
    pinned = pipeline_values(settings(**ALIKE.get(setting, {})))
    here = pipeline_values(settings(**OTHER[setting]))
    mismatches = compare(here, pinned)
    assert mismatches == [Mismatch(setting, here[setting], pinned[setting], PINNED_AT_FIRST_START)]
    line = mismatch_message("orders", mismatches)
    assert "\n" not in line
    assert line.startswith(f"setting {setting} is {here[setting]} here, but pipeline orders was created with "
                           f"{pinned[setting]} (pinned at its first start); start this node with --{setting} ")


@pytest.mark.parametrize("setting", PINNED_SETTINGS)
def test_absent_pin_is_the_first_start(setting: str) -> None:
    here = pipeline_values(settings(**OTHER[setting]))
    assert compare(here, {}) == []
    assert compare(here, {setting: None}) == []


def test_the_message_of_a_vnode_count_mismatch() -> None:
    mismatches = compare(pipeline_values(settings(vnode_count=64)), pipeline_values(BASE))
    assert mismatch_message("orders", mismatches) == (
        "setting vnode-count is 64 here, but pipeline orders was created with 256 (pinned at its first start); "
        "start this node with --vnode-count 256"
    )


def test_several_mismatches_name_the_first_and_list_the_others() -> None:
    here = pipeline_values(settings(format="json", vnode_count=64, output="/elsewhere"))
    line = mismatch_message("orders", compare(here, pipeline_values(BASE)))
    assert line.startswith("setting output is /elsewhere here, but pipeline orders was created with /lake")
    assert line.endswith("--output /lake (also differing: format, vnode-count)")


def test_a_pattern_is_suggested_quoted() -> None:
    here = pipeline_values(BASE)
    line = mismatch_message("orders", compare(here, {"topic": r"re:orders\..*"}))
    assert line.endswith(r"start this node with --topic 're:orders\..*'")


def test_vnode_count_is_checked_against_the_published_assignment() -> None:
    here = pipeline_values(settings(vnode_count=64))
    assert compare(here, {}, assignment_vnodes=64) == []
    assert compare(here, {}, assignment_vnodes=256) == [Mismatch("vnode-count", "64", "256", PUBLISHED_ASSIGNMENT)]
    # a pin that already disagrees is reported once, as the pin
    assert compare(here, {"vnode-count": "256"}, assignment_vnodes=256) == [Mismatch("vnode-count", "64", "256")]


# -- normal forms --------------------------------------------------------------------------------


def test_outputs_compare_in_normal_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "lake")
    for same in ("./lake", "lake/", absolute, absolute + "/", f"file://{absolute}", f"file://{absolute}/",
                 str(tmp_path / "x" / ".." / "lake")):
        assert normalise_output(same) == absolute, same
    assert normalise_output("~/lake") == os.path.join(os.path.expanduser("~"), "lake")
    assert normalise_output("s3://bucket/lake/") == "s3://bucket/lake"
    # credentials and connection options are not the location, and never pinned
    assert normalise_output("s3://KEY:SECRET@bucket/lake?endpoint_override=localhost:8333&region=x") == "s3://bucket/lake"
    assert normalise_output("S3://bucket") == "s3://bucket"
    assert normalise_output("s3://bucket/lake") != normalise_output("s3://bucket/other")


def test_topics_compare_as_a_set_a_pattern_as_its_text() -> None:
    assert normalise_topics(("b", "a")) == normalise_topics("a,b") == "a,b"
    assert normalise_topics(r"re:orders\..*") == r"re:orders\..*"
    assert normalise_topics(("a",)) != normalise_topics("re:a")
    assert pipeline_values(settings(topics=("payments", "orders")))["topic"] == "orders,payments"


# -- the pinning callable ------------------------------------------------------------------------


def test_first_start_pins_later_starts_agree() -> None:
    pins = Pins()
    PipelinePins.of(BASE)(pins)  # type: ignore[arg-type]
    assert pins.values == {pin_name(s): v for s, v in pipeline_values(BASE).items()}
    assert pins.values["pipeline.vnode-count"] == "256"
    pins.writes.clear()
    PipelinePins.of(settings(topics=("orders",), output="/lake/"))(pins)  # type: ignore[arg-type]
    assert pins.writes == []  # every pin present: only read


@pytest.mark.parametrize("setting", PINNED_SETTINGS)
def test_a_node_that_disagrees_is_refused_before_writing(setting: str) -> None:
    pins = Pins()
    PipelinePins.of(settings(**ALIKE.get(setting, {})))(pins)  # type: ignore[arg-type]
    del pins.values[pin_name("source-identity" if setting != "source-identity" else "topic")]  # an absent pin too
    pins.writes.clear()
    with pytest.raises(ConfigurationError, match=f"^setting {setting} is ") as raised:
        PipelinePins.of(settings(**OTHER[setting]))(pins)  # type: ignore[arg-type]
    assert exit_code(raised.value) == 2
    assert pins.writes == []  # refused before anything is pinned


def test_a_pipeline_created_before_the_pins_is_pinned_by_its_first_node_checked_by_its_assignment() -> None:
    pins = Pins(AssignmentSnapshot.initial(256).next(1, (1,) * 256))
    with pytest.raises(ConfigurationError, match=r"^setting vnode-count is 64 here, but pipeline orders was created with 256 "
                                          r"\(the vnode count of its published assignment\)"):
        PipelinePins.of(settings(vnode_count=64))(pins)  # type: ignore[arg-type]
    assert pins.writes == []
    PipelinePins.of(BASE)(pins)  # type: ignore[arg-type]
    assert pins.values[pin_name("vnode-count")] == "256"


def test_a_race_lost_to_another_node_with_other_values_is_refused() -> None:
    pins = Pins()
    real_pin = pins.pin_setting

    def racing(name: str, value: str | None) -> str | None:
        if value is not None and name == pin_name("format"):
            pins.values.setdefault(name, "json")  # another node pinned between our read and our write
        return real_pin(name, value)

    pins.pin_setting = racing  # type: ignore[method-assign]
    with pytest.raises(ConfigurationError, match="^setting format is raw here, but pipeline orders was created with json"):
        PipelinePins.of(BASE)(pins)  # type: ignore[arg-type]


def test_chain_runs_in_order_and_stops_at_a_refusal() -> None:
    calls: list[str] = []
    chain_pins(lambda c: calls.append("a"), None, lambda c: calls.append("b"))(Pins())  # type: ignore[arg-type]
    assert calls == ["a", "b"]
    pins = Pins()
    PipelinePins.of(BASE)(pins)  # type: ignore[arg-type]
    calls.clear()
    with pytest.raises(ConfigurationError):
        chain_pins(PipelinePins.of(settings(format="json")), lambda c: calls.append("schema"))(pins)  # type: ignore[arg-type]
    assert calls == []  # the schema pin never samples for a node that is refused


def test_embedded_pins_survive_a_restart_and_refuse_another_vnode_count(tmp_path: Path) -> None:
    config = CoordinatorConfig(pipeline="orders", checkpoint_interval=60, vnode_count=256)
    first = LocalCoordinator(config, tmp_path)
    first.start(10)
    try:
        PipelinePins.of(BASE)(first)
    finally:
        first.stop()
    assert first.pin_setting("pipeline.vnode-count", None) == "256"
    second = LocalCoordinator(CoordinatorConfig(pipeline="orders", checkpoint_interval=60, vnode_count=64), tmp_path)
    second.start(10)
    try:
        with pytest.raises(ConfigurationError) as raised:
            PipelinePins.of(settings(vnode_count=64))(second)
    finally:
        second.stop()
    assert str(raised.value) == ("setting vnode-count is 64 here, but pipeline orders was created with 256 "
                                 "(pinned at its first start); start this node with --vnode-count 256")


def test_upsert_keys_are_pinned_as_a_set_and_append_mode_as_empty() -> None:
    assert pipeline_values(BASE)["upsert-keys"] == ""
    keyed = pipeline_values(settings(table_format="iceberg", upsert_keys="tenant, id"))
    assert keyed["upsert-keys"] == "id,tenant"
    assert compare(pipeline_values(settings(table_format="iceberg", upsert_keys="id,tenant")), keyed) == []
    appended = pipeline_values(settings(table_format="iceberg"))
    line = mismatch_message("orders", compare(appended, keyed))
    assert line == ("setting upsert-keys is  here, but pipeline orders was created with id,tenant (pinned at its "
                    "first start); start this node with --upsert-keys id,tenant")


def test_a_debezium_node_is_refused_by_a_json_pipeline() -> None:
    json = pipeline_values(settings(table_format="iceberg", format="json", upsert_keys="id"))
    debezium = pipeline_values(settings(table_format="iceberg", format="debezium-json", upsert_keys="id"))
    assert [m.setting for m in compare(debezium, json)] == ["format"]
