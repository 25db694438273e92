"""The node's `/metrics` keeps Prometheus's naming conventions, exports exactly the names operators'
dashboards and alerts are written against, and docs/settings.md lists exactly those families.

The conventions are checked on a scrape of a registry with every family populated (partition-labelled
gauges set, histograms observed, labelled counters counted), parsed as Prometheus parses it."""
from __future__ import annotations

import re
from pathlib import Path

import confluent_kafka
import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from laminar_kafka.cluster.lake.commits import CommitListener
from laminar_kafka.cluster.metrics import LakeCommitMetrics, NodeMetrics
from laminar_kafka.cluster.ops.audit_watch import AuditMetrics
from laminar_kafka.cluster.runtime.probes import Verdict
from laminar_kafka.coordinator.base import CoordinatorMetrics
from laminar_kafka.coordinator.versioning import installed_version

SETTINGS_DOC = Path(__file__).resolve().parents[3] / "docs" / "settings.md"

#: every laminar family a node exports, as exported (counters with _total; histograms by their base name)
NODE_FAMILIES = {
    "laminar_build_info", "laminar_node_healthy", "laminar_node_ready",
    "laminar_records_in_total", "laminar_bytes_in_total", "laminar_batches_total",
    "laminar_lag_records", "laminar_durable_lag_records", "laminar_handoff_pause_seconds",
    "laminar_freshness_seconds", "laminar_visibility_seconds",
    "laminar_drain_seconds", "laminar_checkpoint_seconds", "laminar_publish_seconds", "laminar_lake_commit_seconds",
    "laminar_epochs_committed_total", "laminar_epoch_asks_total", "laminar_epochs_aborted_total",
    "laminar_source_generations_retired_total", "laminar_rounds_total",
    "laminar_fenced_writes_rejected_total", "laminar_stale_acks_rejected_total", "laminar_session_state",
    "laminar_owned_partitions", "laminar_assignment_version", "laminar_lake_epoch", "laminar_lake_call_seconds",
    "laminar_partitions_discovered_total", "laminar_acks_rejected_total", "laminar_records_rejected_total",
    "laminar_offsets_lost_total", "laminar_kafka_clients_replaced_total", "laminar_lake_commits_total",
    "laminar_lake_commit_conflicts_total", "laminar_lake_commits_found_done_total",
    "laminar_ack_cursors_total", "laminar_lake_reconciliations_total",
    "laminar_writer_memory_bytes", "laminar_writer_early_flushes_total", "laminar_writer_early_closes_total",
}
HISTOGRAMS = {"laminar_handoff_pause_seconds", "laminar_visibility_seconds", "laminar_drain_seconds", "laminar_checkpoint_seconds",
              "laminar_publish_seconds", "laminar_lake_commit_seconds"}
#: the labels of each family beyond ``node`` (absent: none)
EXTRA_LABELS = {
    "laminar_build_info": {"version", "python", "librdkafka"},
    "laminar_lag_records": {"topic", "partition"}, "laminar_durable_lag_records": {"topic", "partition"},
    "laminar_freshness_seconds": {"topic", "partition"},
    "laminar_rounds_total": {"outcome"}, "laminar_session_state": {"state"},
    "laminar_ack_cursors_total": {"kind"}, "laminar_lake_reconciliations_total": {"decision"},
}
AUDIT_FAMILIES = {
    "laminar_audit_missing", "laminar_audit_duplicated", "laminar_audit_unexpected", "laminar_audit_high_water",
    "laminar_audit_passes_total", "laminar_audit_full_audits_total", "laminar_audit_last_pass_timestamp_seconds",
}
NAME = re.compile(r"^laminar_[a-z0-9_]+$")
#: unit words that are not base units, as name components
NOT_BASE_UNITS = {"ms", "milliseconds", "millis", "us", "microseconds", "ns", "nanoseconds", "minutes", "hours",
                  "days", "kb", "kib", "mb", "mib", "kilobytes", "megabytes", "gigabytes", "percent"}


class Verdicts:
    def health(self) -> Verdict:
        return Verdict(True, "ok")

    def readiness(self) -> Verdict:
        return Verdict(False, "starting: joining the pipeline")


def populated_node() -> NodeMetrics:
    """A node's metrics with every family holding samples, as a busy node's would."""
    metrics = NodeMetrics(2)
    node = metrics.node
    metrics.watch_probes(Verdicts())
    metrics.watch_coordinator(lambda: CoordinatorMetrics(fenced_writes_rejected=2, stale_acks_rejected=3))
    metrics.watch_lake_calls(lambda: 1.5)
    metrics.observe_batch(100, 4096, rejected=1)
    metrics.set_partition_gauge(metrics.lag, {("orders", 3): 5, ("orders.eu", 0): 1})
    metrics.set_partition_gauge(metrics.durable_lag, {("orders", 3): 9})
    metrics.set_partition_gauge(metrics.freshness, {("orders", 3): 1.5})
    metrics.observe_visibility(np.asarray([0.3]))
    metrics.set_session_state("CONNECTED")
    for histogram in (metrics.handoff_pause, metrics.drain_seconds, metrics.checkpoint_seconds, metrics.publish_seconds):
        histogram.labels(node).observe(0.3)
    LakeCommitMetrics(metrics).committed("pipe.orders", 0.2)
    for counter in (metrics.epochs_committed, metrics.epoch_asks, metrics.epochs_aborted, metrics.generations_retired,
                    metrics.partitions_discovered, metrics.acks_rejected, metrics.offsets_lost,
                    metrics.kafka_clients_replaced, metrics.lake_commits, metrics.lake_commit_conflicts,
                    metrics.lake_commits_found_done):
        counter.labels(node).inc()
    metrics.rounds.labels(node, "committed").inc()
    metrics.ack_cursors.labels(node, "sent").inc(4)
    metrics.lake_reconciliations.labels(node, "continue").inc()
    for gauge, value in ((metrics.owned_partitions, 4), (metrics.assignment_version, 7), (metrics.lake_epoch, 12)):
        gauge.labels(node).set(value)
    return metrics


def populated_audit() -> AuditMetrics:
    audit = AuditMetrics()
    for gauge in (audit.missing, audit.duplicated, audit.unexpected):
        gauge.labels("orders").set(0)
    audit.high_water.labels("orders", "3").set(100)
    audit.passes.inc()
    audit.full_audits.labels("orders").inc()
    audit.last_pass.set(1.7e9)
    return audit


def scraped(registry_text: bytes) -> dict[str, Metric]:
    """The laminar families of a scrape, by exported name (counters with ``_total``, as Prometheus sees them)."""
    families = {}
    for family in text_string_to_metric_families(registry_text.decode()):
        if family.name.startswith("laminar_"):
            families[f"{family.name}_total" if family.type == "counter" else family.name] = family
    return families


def convention_breaks(families: dict[str, Metric]) -> list[str]:
    """Every break of Prometheus's naming conventions in ``families`` (empty: none)."""
    broken = []
    for name, family in families.items():
        components = set(name.split("_"))
        help_text = family.documentation.lower()
        if not NAME.match(name):
            broken.append(f"{name}: not ^laminar_[a-z0-9_]+$")
        if family.type == "counter":
            if not all(s.name == name for s in family.samples):
                broken.append(f"{name}: a counter sample not named <name>_total")
        elif name.endswith("_total"):
            broken.append(f"{name}: a {family.type} named _total (only counters are)")
        if family.type not in ("counter", "gauge", "histogram"):
            broken.append(f"{name}: type {family.type}")
        if family.type == "histogram" and "seconds" not in components:
            broken.append(f"{name}: a histogram without its unit")
        for unit in ("seconds", "bytes"):
            if re.search(rf"\b{unit}\b", help_text) and unit not in components:
                broken.append(f"{name}: its help counts {unit}, its name has no _{unit}")
        if components & NOT_BASE_UNITS:
            broken.append(f"{name}: not in base units ({sorted(components & NOT_BASE_UNITS)})")
        if not family.samples:
            broken.append(f"{name}: no sample (the check needs every family populated)")
        for sample in family.samples:
            labels = sample.labels
            if "partition" in labels and (":" in labels["partition"] or "topic" not in labels):
                broken.append(f"{name}{labels}: a partition label with a colon, or without its topic")
    return broken


def test_every_node_family_is_exported_under_its_name_with_its_labels() -> None:
    families = scraped(generate_latest(populated_node().registry))
    assert set(families) == NODE_FAMILIES
    for name, family in families.items():
        assert family.type == ("histogram" if name in HISTOGRAMS else family.type), name
        labels = {key for sample in family.samples for key in sample.labels} - {"le"}
        assert labels == {"node"} | EXTRA_LABELS.get(name, set()), name


def test_the_node_keeps_the_conventions() -> None:
    assert convention_breaks(scraped(generate_latest(populated_node().registry))) == []


def test_the_audit_watch_keeps_the_conventions() -> None:
    families = scraped(generate_latest(populated_audit().registry))
    assert set(families) == AUDIT_FAMILIES
    assert convention_breaks(families) == []


@pytest.mark.parametrize(("exposition", "broken"), [
    ("# TYPE laminar_x_total gauge\nlaminar_x_total 1\n", "a gauge named _total"),
    ("# TYPE laminar_x_seconds gauge\n# HELP laminar_x_seconds x\nlaminar_x_seconds{partition=\"t:3\"} 1\n",
     "a partition label with a colon"),
    ("# TYPE laminar_x gauge\nlaminar_x{partition=\"3\"} 1\n", "without its topic"),
    ("# TYPE laminar_wait_ms gauge\nlaminar_wait_ms 1\n", "not in base units"),
    ("# HELP laminar_wait Seconds waited\n# TYPE laminar_wait gauge\nlaminar_wait 1\n", "its help counts seconds"),
    ("# HELP laminar_read_total Bytes read\n# TYPE laminar_read_total counter\nlaminar_read_total 1\n",
     "its help counts bytes"),
    ("# TYPE laminar_Mixed gauge\nlaminar_Mixed 1\n", "not ^laminar_"),
    ("# TYPE laminar_pause histogram\nlaminar_pause_bucket{le=\"+Inf\"} 1\nlaminar_pause_count 1\nlaminar_pause_sum 1\n",
     "a histogram without its unit"),
])
def test_the_check_catches_each_break(exposition: str, broken: str) -> None:
    breaks = convention_breaks(scraped(exposition.encode()))
    assert any(broken in line for line in breaks), breaks


def test_build_info_names_the_versions() -> None:
    sample = populated_node().registry.get_sample_value
    assert sample("laminar_build_info", {"node": "2", "version": installed_version(),
                                         "python": __import__("platform").python_version(),
                                         "librdkafka": confluent_kafka.libversion()[0]}) == 1.0


def test_the_coordinators_counts_are_counters_read_at_each_scrape() -> None:
    metrics = NodeMetrics(3)
    sample = metrics.registry.get_sample_value
    assert sample("laminar_fenced_writes_rejected_total", {"node": "3"}) == 0  # nothing wired yet
    counts = CoordinatorMetrics()
    metrics.watch_coordinator(lambda: counts)
    counts.fenced_writes_rejected, counts.stale_acks_rejected = 1, 4
    assert sample("laminar_fenced_writes_rejected_total", {"node": "3"}) == 1
    assert sample("laminar_stale_acks_rejected_total", {"node": "3"}) == 4


def exported_names() -> set[str]:
    return set(scraped(generate_latest(NodeMetrics(1).registry)))


def documented_names() -> set[str]:
    text = SETTINGS_DOC.read_text()
    section = text[text.index("## Metrics"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    return set(re.findall(r"`(laminar_[a-z_]+)`", section)) - AUDIT_FAMILIES


def test_the_settings_doc_lists_exactly_the_exported_metric_families() -> None:
    assert documented_names() == exported_names() == NODE_FAMILIES


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


def test_partition_gauges_are_labelled_by_topic_and_partition_through_their_cached_children() -> None:
    metrics = NodeMetrics(3)
    metrics.set_partition_gauge(metrics.lag, {("t", 0): 5, ("t", 1): 2})
    metrics.set_partition_gauge(metrics.lag, {("t", 0): 1})
    metrics.set_partition_gauge(metrics.durable_lag, {("app:events", 0): 9})  # a Redis stream name may hold a colon
    sample = metrics.registry.get_sample_value
    assert sample("laminar_lag_records", {"node": "3", "topic": "t", "partition": "0"}) == 1
    # partition 1 is no longer read: its series is gone, not frozen at its last value
    assert sample("laminar_lag_records", {"node": "3", "topic": "t", "partition": "1"}) is None
    assert sample("laminar_durable_lag_records", {"node": "3", "topic": "app:events", "partition": "0"}) == 9


def test_a_partition_no_longer_read_stops_being_exported_and_comes_back_when_read_again() -> None:
    metrics = NodeMetrics(3)
    sample = metrics.registry.get_sample_value
    metrics.set_partition_gauge(metrics.durable_lag, {("t", 0): 5, ("t", 1): 7})
    metrics.set_partition_gauge(metrics.durable_lag, {("t", 1): 8})  # t/0 handed off
    assert sample("laminar_durable_lag_records", {"node": "3", "topic": "t", "partition": "0"}) is None
    assert sample("laminar_durable_lag_records", {"node": "3", "topic": "t", "partition": "1"}) == 8
    metrics.set_partition_gauge(metrics.durable_lag, {("t", 0): 2, ("t", 1): 1})  # t/0 back
    assert sample("laminar_durable_lag_records", {"node": "3", "topic": "t", "partition": "0"}) == 2
    metrics.clear_partition_gauge(metrics.durable_lag)
    exported = [s for m in metrics.registry.collect() if m.name == "laminar_durable_lag_records" for s in m.samples]
    assert exported == []
