"""End to end, happy paths: `laminar-kafka run` nodes as separate processes, real Kafka and
ZooKeeper, `verify`. Each scenario ends with 0 missing and 0 duplicated rows in the published output.

The crash scenarios (SIGKILL) live in tests/faults/cluster.
"""
from __future__ import annotations

import pytest

from tests.integration.cluster.harness import Pipeline, assert_exact, embedded, pipeline  # noqa: F401 - fixtures

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_planned_leave(pipeline: Pipeline) -> None:
    pipeline.produce()
    for node_id in (1, 2, 3):
        pipeline.launch(node_id)
    pipeline.wait_spread(3)
    pipeline.nodes[3].terminate()
    assert pipeline.nodes[3].wait(60) == 0  # SIGTERM: drained away, then exit 0
    pipeline.wait_spread(2)
    assert_exact(pipeline.finish(), pipeline)
    assert "planned leave complete" in pipeline.nodes[3].log_text()


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
