"""End to end, happy paths: `laminar-kafka run` nodes as separate processes, real Kafka and
ZooKeeper, `verify`. Each scenario ends with 0 missing and 0 duplicated rows in the published output.

The crash scenarios (SIGKILL) live in tests/faults/cluster.
"""
from __future__ import annotations

import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.integration.cluster.harness import Pipeline, assert_exact, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


#: the metric families docs/settings.md lists ("Metrics") (as exported: counters with _total, histograms by their samples)
DESIGN_METRICS = (
    "laminar_records_in_total", "laminar_bytes_in_total", "laminar_batches_total", "laminar_lag_records",
    "laminar_durable_lag_records", "laminar_handoff_pause_seconds_count", "laminar_drain_seconds_count",
    "laminar_checkpoint_seconds_count", "laminar_epochs_committed_total", "laminar_epochs_aborted_total",
    "laminar_fenced_writes_rejected_total", "laminar_session_state", "laminar_node_healthy", "laminar_node_ready",
)


def sampled(body: str, family: str) -> bool:
    """Whether ``family`` has at least one sample with a node label."""
    return any(line.startswith(family + "{") and 'node="' in line for line in body.splitlines())


def samples(body: str, name: str) -> list[Sample]:
    """The samples named ``name`` of a ``/metrics`` page, parsed as Prometheus parses it."""
    return [s for family in text_string_to_metric_families(body) for s in family.samples if s.name == name]


def test_planned_leave(pipeline: Pipeline) -> None:
    port = free_port()
    pipeline.produce()
    pipeline.launch(1, "--metrics-port", str(port))
    for node_id in (2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    pipeline.nodes[3].terminate()
    assert pipeline.nodes[3].wait(60) == 0  # SIGTERM: drained away, then exit 0
    pipeline.wait_spread(2)
    assert_exact(pipeline.finish(), pipeline)
    assert "planned leave complete" in pipeline.nodes[3].log_text()
    # node 1 took part in rounds and acquired partitions: every family of DESIGN_METRICS has samples
    pipeline.wait_until(lambda: all(sampled(scrape(port), f) for f in DESIGN_METRICS), 20, "every metric exported")
    body = scrape(port)
    assert 'laminar_session_state{node="1",state="CONNECTED"} 1.0' in body
    assert [s.value for s in samples(body, "laminar_handoff_pause_seconds_count")][0] > 0  # acquired in live rounds
    lag = samples(body, "laminar_lag_records")
    assert lag and all(s.labels["topic"] == pipeline.topic and s.labels["partition"].isdigit() for s in lag)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_join_under_load(pipeline: Pipeline) -> None:
    pipeline.produce(4000)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    pipeline.wait_spread(2)
    pipeline.launch(3)
    pipeline.wait_spread(3)
    pipeline.launch(4)
    pipeline.wait_spread(4)
    assert_exact(pipeline.finish(), pipeline)
    status = pipeline.status()  # caught up: every durable (manifest) cursor is at the high watermark
    assert [(p.durable_cursor, p.high_watermark) for p in status.partitions] == [
        (p.high_watermark, p.high_watermark) for p in status.partitions
    ]
    handoffs = sum(node.log_text().count("handoff partition=") for node in pipeline.nodes.values())
    assert handoffs > 0  # partitions moved live, with a measured pause
