"""The metrics table of docs/settings.md names exactly the families `/metrics` exports (counters with `_total`)."""
from __future__ import annotations

import re
from pathlib import Path

from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.metrics import LakeCommitMetrics, NodeMetrics

SETTINGS_DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def exported_names() -> set[str]:
    names = set()
    for family in NodeMetrics(1).registry.collect():
        if family.name.startswith("laminar_"):  # the standard process_* / python_info families are not listed
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def documented_names() -> set[str]:
    text = SETTINGS_DOC.read_text()
    section = text[text.index("## Metrics"):]
    return set(re.findall(r"`(laminar_[a-z_]+)`", section))


def test_the_settings_doc_lists_exactly_the_exported_metric_families() -> None:
    assert documented_names() == exported_names()


def test_the_lake_commit_listener_counts_commits_conflicts_and_no_ops() -> None:
    metrics = NodeMetrics(7)
    listener: CommitListener = LakeCommitMetrics(metrics)
    listener.committed("pipe.orders", 0.2)
    listener.committed("pipe.orders", 3.0)
    listener.lost_race("pipe.orders")
    for _ in range(3):
        listener.found_done("pipe.orders")
    sample = metrics.registry.get_sample_value
    assert sample("laminar_lake_commit_seconds_count", {"node": "7"}) == 2
    assert sample("laminar_lake_commit_seconds_sum", {"node": "7"}) == 3.2
    assert sample("laminar_lake_commit_seconds_bucket", {"node": "7", "le": "0.25"}) == 1
    assert sample("laminar_lake_commit_conflicts_total", {"node": "7"}) == 1
    assert sample("laminar_lake_commits_found_done_total", {"node": "7"}) == 3


def test_partition_gauges_are_set_and_updated_through_their_cached_children() -> None:
    metrics = NodeMetrics(3)
    metrics.set_partition_gauge(metrics.lag, {"t:0": 5, "t:1": 2})
    metrics.set_partition_gauge(metrics.lag, {"t:0": 1})
    metrics.set_partition_gauge(metrics.durable_lag, {"t:0": 9})
    sample = metrics.registry.get_sample_value
    assert sample("laminar_lag_records", {"node": "3", "partition": "t:0"}) == 1
    assert sample("laminar_lag_records", {"node": "3", "partition": "t:1"}) == 2
    assert sample("laminar_durable_lag_records", {"node": "3", "partition": "t:0"}) == 9
