"""A node's death never rewinds the survivors: three `laminar-kafka run` nodes over
an 8-partition topic under load, one SIGKILLed (a follower, or the leader); the survivors acquire its
partitions in place and keep their source generations: no generation started or retired, no ack
rejected, and no row read twice (each survivor's `laminar_records_in` equals the rows of the lake's
files it wrote), over a window of several epochs committed after the kill; the lake exact.
"""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families

from laminar_kafka.devstack.processes import free_port
from tests.integration.cluster.harness import Pipeline, assert_exact, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: the counters read from each survivor's /metrics
COUNTERS = ("laminar_records_in_total", "laminar_epochs_committed_total", "laminar_source_generations_retired_total",
            "laminar_acks_rejected_total")


def counters(port: int) -> dict[str, float]:
    """This node's counters of :data:`COUNTERS` (raises while /metrics does not answer)."""
    body = scrape(port)
    assert body, f"no /metrics on port {port}"
    found = {sample.name: sample.value for family in text_string_to_metric_families(body)
             for sample in family.samples if sample.name in COUNTERS}
    assert set(found) == set(COUNTERS), f"missing {set(COUNTERS) - set(found)}"
    return found


def generation_starts(log: str) -> int:
    return len(re.findall(r"source generation started from ", log))


def in_place_acquisitions(log: str) -> int:
    return len(re.findall(r"partition\(s\) owned, \d+ acquired in place", log))


def landed_rows_by_node(output: str) -> dict[int, int]:
    """Published rows per writing node, from the published files' names (`epoch-E.node-N....`)."""
    rows: dict[int, int] = {}
    for path in Path(output).glob("[!_]*/**/epoch-*.parquet"):  # not _staging/ nor _rejected/
        match = re.search(r"\.node-(\d+)\.", path.name)
        assert match, path
        node = int(match.group(1))
        rows[node] = rows.get(node, 0) + pq.ParquetFile(path).metadata.num_rows
    return rows


@pytest.mark.parametrize("victim", ["follower", "leader"])
def test_a_death_never_rewinds_the_survivors(pipeline: Pipeline, victim: str) -> None:
    ports = {node_id: free_port() for node_id in (1, 2, 3)}
    pipeline.produce(2000)
    for node_id in (1, 2, 3):
        pipeline.launch(node_id, "--metrics-port", str(ports[node_id]))
    pipeline.wait_spread(3)
    settled = {n: counters(ports[n])["laminar_epochs_committed_total"] for n in ports}
    pipeline.wait_until(lambda: all(counters(ports[n])["laminar_epochs_committed_total"] >= settled[n] + 3 for n in ports),
                        30, "3 epochs committed on every node after the spread")

    leader = pipeline.status().leader
    assert leader in ports
    dead = leader if victim == "leader" else next(n for n in (3, 2, 1) if n != leader)
    survivors = sorted(set(ports) - {dead})
    before = {n: (generation_starts(pipeline.nodes[n].log_text()), in_place_acquisitions(pipeline.nodes[n].log_text()),
                  counters(ports[n])) for n in survivors}
    assert all(starts >= 1 for starts, _, _ in before.values())

    pipeline.nodes[dead].kill()
    pipeline.wait_spread(2)  # the survivors own every partition (the session expired, 4 s)
    # the window: rows keep coming and several epochs commit on each survivor after the move
    after_move = {n: counters(ports[n])["laminar_epochs_committed_total"] for n in survivors}
    pipeline.wait_until(
        lambda: all(counters(ports[n])["laminar_epochs_committed_total"] >= after_move[n] + 4 for n in survivors),
        30, "4 epochs committed on each survivor after the move")
    report = pipeline.finish()
    assert_exact(report, pipeline)

    for n in survivors:
        log = pipeline.nodes[n].log_text()
        starts, acquisitions, was = before[n]
        now = counters(ports[n])
        assert generation_starts(log) == starts, f"node {n} started a source generation after the kill:\n{log[-3000:]}"
        assert now["laminar_source_generations_retired_total"] == was["laminar_source_generations_retired_total"]
        assert now["laminar_acks_rejected_total"] == was["laminar_acks_rejected_total"]
        assert in_place_acquisitions(log) > acquisitions, f"node {n} acquired nothing in place:\n{log[-3000:]}"

    # no re-read: each survivor read exactly the rows it landed (a rewound survivor reads its
    # unsealed rows again: they count twice in its laminar_records_in, once in the lake)
    by_node = landed_rows_by_node(pipeline.output)
    assert sum(by_node.values()) == sum(p.expected for p in report.partitions), by_node
    assert by_node.get(dead, 0) > 0 and all(by_node.get(n, 0) > 0 for n in survivors), by_node
    read = {n: int(counters(ports[n])["laminar_records_in_total"]) for n in survivors}
    assert read == {n: by_node[n] for n in survivors}, (read, by_node)
