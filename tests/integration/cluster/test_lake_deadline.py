"""The lake I/O deadline on a real object store: a node whose object store falls silent mid-run stops
in one line (exit 1) within ``lake-io-timeout-ms``; started again while the store is still silent,
it stops the same way in its start-up check of the output; started again once the store answers, it
reconciles with the lake and lands every record exactly once.

The node reaches SeaweedFS (the session's `s3_server`) only through a
:class:`~laminar_kafka.devstack.netfaults.proxy.FaultProxy`, cut to a black hole while the node lands
(connections freeze: nothing forwarded, nothing closed, as behind a partition). Its bound is 3 s,
below what pyarrow's S3 client takes to give up on a silent store by itself (3 s without a byte,
three attempts: about 9 s per request), so the line is the deadline's, not a sink error's.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.devstack.netfaults.proxy import FaultProxy
from laminar_kafka.devstack.objectstore.access import S3Access
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer
from laminar_kafka.devstack.processes import NodeProcess
from laminar_kafka.devstack.topics import create_topic
from tests.conftest import KafkaHandle
from tests.integration.cluster.harness import PARTITIONS, assert_exact
from tests.integration.cluster.test_s3_sink import S3Pipeline
from tests.s3_fixtures import TEST_BUCKET

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BOUND_S = 3.0
#: after the cut: the next lake call starts within an epoch (500 ms) and is seen overdue a tenth of
#: the bound after the bound; the rest is slack for a loaded machine
EXIT_WITHIN_S = BOUND_S + 12.0


def stopped_by_the_deadline(node: NodeProcess, since: float, log_from: int) -> str:
    """Wait for ``node`` to exit; assert it stopped 1 with exactly one line, the deadline's, within
    :data:`EXIT_WITHIN_S` of ``since`` (its log from ``log_from`` on); returns that line."""
    code = node.wait(120)
    elapsed = time.monotonic() - since
    log = node.log_text()[log_from:]
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    print(f"exit {code} {elapsed:.1f} s after the store fell silent: {errors}")
    assert code == 1, log[-3000:]
    assert len(errors) == 1, log[-3000:]
    line = errors[0]
    assert line.startswith(f"error: lake I/O did not return within {BOUND_S:g} s ("), line
    assert line.endswith("start the node again: it reconciles with the lake"), line
    assert "Traceback" not in log
    assert elapsed < EXIT_WITHIN_S, f"the node stopped {elapsed:.1f} s after the store fell silent"
    return line


def test_a_node_whose_object_store_falls_silent_stops_in_one_line_and_restarted_lands_exactly_once(
    s3_server: SeaweedServer, kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path,
) -> None:
    name = unique("lake-deadline")
    create_topic(kafka.bootstrap, name, PARTITIONS)
    direct_fs, root = open_output(s3_server.uri(TEST_BUCKET, name))  # the test's own way in: no proxy
    with FaultProxy(s3_server.port, label="s3") as proxy:
        output = S3Access(proxy.port, s3_server.region).uri(TEST_BUCKET, name)
        pipeline = S3Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path,
                              s3_output=output)
        flags = ("--state-dir", str(tmp_path / "state"), "--lake-io-timeout-ms", str(int(BOUND_S * 1000)))
        try:
            node = pipeline.launch(1, *flags)
            pipeline.produce(rate=1000)
            pipeline.wait_until(lambda: len(list_published(direct_fs, root)) >= 2, 90, "files published on S3")

            proxy.cut("blackhole")
            stopped_by_the_deadline(node, time.monotonic(), 0)

            # started again while the store is still silent: its check of the output is bounded too
            log_from = len(node.log_text())
            node = pipeline.launch(1, *flags)
            line = stopped_by_the_deadline(node, time.monotonic(), log_from)
            assert "(checking that the output is writable, running for" in line

            proxy.heal()
            node = pipeline.launch(1, *flags)  # as its supervisor would: it reconciles with the lake
            pipeline.wait_until(lambda: len(list_published(direct_fs, root)) >= 4, 90, "files published after")
            assert_exact(pipeline.finish(), pipeline)
            node.terminate()
            assert node.wait(60) == 0, node.log_text()[-3000:]
        finally:
            pipeline.stop_all()
