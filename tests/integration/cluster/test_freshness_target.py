"""A node with `--freshness-target-ms 1000` on real Kafka and ZooKeeper: trickled rows become visible
within 1.5 s p99 (each row's Kafka timestamp to the moment its published file is seen), and once the
trickle stops and every row is visible, no epoch opens while the pipeline stays idle."""
from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.waiting import wait_until
from tests.integration.cluster.harness import Pipeline, assert_exact, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TARGET_S = 1.0
TRICKLE_S = 12.0


def counter(body: str, name: str) -> float:
    """The value of counter ``name`` (one series) on a /metrics page, -1 when absent."""
    for line in body.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


class Visibility:
    """Polls the published files: each new one's rows are visible from the poll that first saw it."""

    def __init__(self, output: str) -> None:
        self.fs, self.root = open_output(output)
        self.seen: set[str] = set()
        self.latencies_s: list[float] = []

    def poll(self) -> bool:
        now = time.time()
        for path in list_published(self.fs, self.root):
            if path in self.seen:
                continue
            self.seen.add(path)
            stamps = pq.read_table(path, columns=["_timestamp"]).column("_timestamp")
            millis = stamps.cast(pa.timestamp("ms")).cast(pa.int64()).to_numpy(zero_copy_only=False)
            self.latencies_s.extend((now - millis / 1000.0).tolist())
        return False  # polled until the deadline (a wait_until predicate)


def test_trickled_rows_are_visible_within_the_target_and_an_idle_pipeline_holds_no_epochs(pipeline: Pipeline) -> None:
    port = free_port()
    pipeline.launch(1, "--freshness-target-ms", str(int(TARGET_S * 1000)), "--metrics-port", str(port))
    pipeline.wait_until(lambda: counter(scrape(port), "laminar_records_in_total") >= 0, 60, "the node serving metrics")
    visibility = Visibility(pipeline.output)
    producer = pipeline.produce(rate=200)
    try:
        wait_until(visibility.poll, TRICKLE_S, "the trickle's end", interval=0.02)
    except WaitTimeout:
        pass  # the trickle ran its time
    producer.stop()
    pipeline.wait_until(lambda: visibility.poll() or len(visibility.latencies_s) >= producer.acked, 30,
                        "every row seen")
    assert_exact(pipeline.finish(), pipeline)
    ordered = sorted(visibility.latencies_s)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    assert len(ordered) >= producer.acked > 1_000
    assert p99 <= 1.5 * TARGET_S, f"p99 visibility {p99:.3f} s, max {ordered[-1]:.3f} s"

    # idle: no ask, so no epoch (the clock would open one every 500 ms, --checkpoint-interval-ms)
    epochs = counter(scrape(port), "laminar_epochs_committed_total")
    assert epochs > 0
    with pytest.raises(WaitTimeout):
        wait_until(lambda: counter(scrape(port), "laminar_epochs_committed_total") != epochs, 4 * TARGET_S,
                   "an epoch while idle", interval=0.1)
