"""A pipeline resumes from its manifest, never from its consumer group: the group's committed
offsets are advisory (copied there once an epoch is durable). With every node stopped cleanly, the
group's offsets are moved AHEAD of the manifest's cursors, or BEHIND them; started again, the nodes
read from the manifest (the lake exact: nothing skipped up to the moved offsets, nothing read twice
from them), and the advisory commits move on from there: behind, the group is the manifest's at the
next committed epoch; ahead, the group is never moved backwards (docs/connector-guide.md,
`advisory-commits`) and is the manifest's again once the manifest passed the moved offsets.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from laminar_kafka.cluster.config import NodeSettings
from tests import support
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: records per partition before the stop, then after it in two steps
FIRST, SECOND, THIRD = 250, 50, 250
#: how far the group's offsets are moved from the manifest's cursors
MOVE = {"ahead": +100, "behind": -150}


def group_id(p: Pipeline) -> str:
    """The consumer group the nodes commit to: the node's own derivation (no `group-id` set)."""
    return NodeSettings(bootstrap=p.bootstrap, topics=(p.topic,), output=p.output, pipeline=p.pipeline).effective_group_id


@pytest.fixture
def group(pipeline: Pipeline) -> Iterator[Consumer]:
    """A client of the pipeline's consumer group that never joins it (assign-free: reads and
    commits offsets only)."""
    consumer = Consumer({"bootstrap.servers": pipeline.bootstrap, "group.id": group_id(pipeline),
                         "enable.auto.commit": False})
    try:
        yield consumer
    finally:
        consumer.close()


def committed(group: Consumer, topic: str) -> dict[int, int]:
    """Partition -> the group's committed offset (-1001: none)."""
    return {tp.partition: tp.offset
            for tp in group.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}


def manifest_cursors(p: Pipeline) -> dict[int, int | None]:
    """Partition -> the latest manifest's cursor (next offset to read), from the control state."""
    return {int(s.partition.rsplit(":", 1)[1]): s.durable_cursor for s in p.status().partitions}


def produce_each(p: Pipeline, start: int, per_partition: int) -> None:
    for partition in range(PARTITIONS):
        support.produce(p.bootstrap, p.topic, [b"%d-%d" % (partition, start + i) for i in range(per_partition)],
                        partition=partition)


def starts_from_manifest(log: str) -> list[str]:
    return re.findall(r"source generation started from (manifest \d+|the initial position)", log)


@pytest.mark.parametrize("where", ["ahead", "behind"])
def test_a_restart_reads_from_the_manifest_whatever_the_group_offsets_say(
    pipeline: Pipeline, group: Consumer, where: str
) -> None:
    pipeline.extra = (*pipeline.extra, "--quiet-checkpoint-interval-ms", "0")  # an epoch every 500 ms, idle or not
    topic = pipeline.topic

    def group_is_manifest(expected: int) -> bool:
        return committed(group, topic) == manifest_cursors(pipeline) == {p: expected for p in range(PARTITIONS)}

    # 1. land FIRST records per partition with two nodes; the group follows the manifest; stop cleanly
    produce_each(pipeline, 0, FIRST)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    assert_exact(pipeline.finish(), pipeline)
    pipeline.wait_until(lambda: group_is_manifest(FIRST), 30, "the group's offsets at the manifest's cursors")
    for node_id in (2, 1):
        pipeline.nodes[node_id].terminate()
        assert pipeline.nodes[node_id].wait(60) == 0, pipeline.tail_logs()
    before = {node_id: len(starts_from_manifest(node.log_text())) for node_id, node in pipeline.nodes.items()}

    # 2. no node runs: move the group's offsets away from the manifest
    moved = FIRST + MOVE[where]
    group.commit(offsets=[TopicPartition(topic, p, moved) for p in range(PARTITIONS)], asynchronous=False)
    assert committed(group, topic) == {p: moved for p in range(PARTITIONS)}
    assert manifest_cursors(pipeline) == {p: FIRST for p in range(PARTITIONS)}

    # 3. SECOND more records (the high watermark stays below an ahead offset); start again
    produce_each(pipeline, FIRST, SECOND)
    for node_id in (1, 2):
        pipeline.launch(node_id)
    report = pipeline.finish()
    # (a) read from the manifest: ahead, offsets FIRST..moved-1 would be missing; behind, moved..FIRST-1 twice
    assert_exact(report, pipeline)
    assert [(p.expected, p.present) for p in report.partitions] == [(FIRST + SECOND, FIRST + SECOND)] * PARTITIONS
    for node_id, node in pipeline.nodes.items():
        restarted = starts_from_manifest(node.log_text())[before[node_id]:]
        assert restarted and all(s.startswith("manifest ") for s in restarted), (node_id, restarted)

    # (b) the advisory commits move on from the manifest
    if where == "behind":  # forward to the manifest at the next committed epoch
        pipeline.wait_until(lambda: group_is_manifest(FIRST + SECOND), 30, "the group at the manifest's cursors")
    else:  # never moved backwards: over a window of several committed epochs, still above the manifest
        caught_up = pipeline.status().last_epoch
        pipeline.wait_until(lambda: pipeline.status().last_epoch >= caught_up + 4, 30, "4 more epochs committed")
        assert manifest_cursors(pipeline) == {p: FIRST + SECOND for p in range(PARTITIONS)} and FIRST + SECOND < moved
        assert committed(group, topic) == {p: moved for p in range(PARTITIONS)}

    # 4. past the moved offsets: the group is the manifest's again, ahead or behind
    produce_each(pipeline, FIRST + SECOND, THIRD)
    assert_exact(pipeline.finish(), pipeline)
    total = FIRST + SECOND + THIRD
    assert total > moved
    pipeline.wait_until(lambda: group_is_manifest(total), 30, "the group's offsets at the manifest's cursors again")
