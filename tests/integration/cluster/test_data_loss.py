"""Records deleted by retention before the node read them (it was down too long, or it lags behind
while it runs). By default the node stops, naming the partition and the offsets, and nothing is
skipped. With `--fail-on-data-loss false` it resumes (or reads on) at the oldest offset Kafka still
holds, logs what was lost, and the output is exact for what the topic still holds."""
from __future__ import annotations

import os
import signal

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.devstack.processes import NodeProcess, free_port
from laminar_kafka.devstack.producers import produce
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact, scrape

BEFORE, AFTER, DELETED_UP_TO = 400, 400, 90  # per partition: DELETED_UP_TO is past the node's cursor (50)


def test_records_deleted_before_they_were_read_stop_the_node_unless_the_loss_is_accepted(embedded: Pipeline) -> None:
    produce(embedded.bootstrap, embedded.topic, [b"a%d" % i for i in range(BEFORE)])
    first = embedded.launch(1)
    fs, root = open_output(embedded.output)
    embedded.wait_until(lambda: sum(1 for _ in list_published(fs, root)) > 0 and embedded.finish(30).ok, 60,
                        "the first records landed")
    first.terminate()
    assert first.wait(30) == 0
    produce(embedded.bootstrap, embedded.topic, [b"b%d" % i for i in range(AFTER)])
    admin = AdminClient({"bootstrap.servers": embedded.bootstrap})  # held: its futures die with it
    deleted = admin.delete_records([TopicPartition(embedded.topic, p, DELETED_UP_TO) for p in range(PARTITIONS)])
    for future in deleted.values():
        future.result(30)

    refused = embedded.launch(1)
    assert refused.wait(60) == 1
    log = refused.log_text()
    assert f"offset {BEFORE // PARTITIONS} of {embedded.topic}:" in log and "below the low watermark 90" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]

    port = free_port()
    resumed = embedded.launch(1, "--fail-on-data-loss", "false", "--metrics-port", str(port))
    report = embedded.finish()
    assert_exact(report, embedded)
    assert report.rows == (BEFORE + AFTER) - DELETED_UP_TO * PARTITIONS + BEFORE  # what was landed before stays
    log = resumed.log_text()
    assert log.count("were deleted by retention before they were read and are lost") == PARTITIONS, log[-3000:]
    lost = (DELETED_UP_TO - BEFORE // PARTITIONS) * PARTITIONS
    assert f'laminar_offsets_lost_total{{node="1"}} {lost:.1f}' in scrape(port)


def _stop_produce_delete_resume(embedded: Pipeline, node: NodeProcess) -> None:
    """With every record of the first BEFORE landed: freeze the node (its client stops fetching at
    the partitions' ends), produce AFTER more, delete each partition's records up to
    DELETED_UP_TO (past where it will fetch next: retention overtaking a node that lags), resume."""
    fs, root = open_output(embedded.output)
    embedded.wait_until(lambda: sum(1 for _ in list_published(fs, root)) > 0 and embedded.finish(30).ok, 60,
                        "the first records landed")
    os.kill(node.pid, signal.SIGSTOP)
    try:
        produce(embedded.bootstrap, embedded.topic, [b"b%d" % i for i in range(AFTER)])
        admin = AdminClient({"bootstrap.servers": embedded.bootstrap})  # held: its futures die with it
        deleted = admin.delete_records([TopicPartition(embedded.topic, p, DELETED_UP_TO) for p in range(PARTITIONS)])
        for future in deleted.values():
            future.result(30)
    finally:
        os.kill(node.pid, signal.SIGCONT)


def test_records_deleted_ahead_of_a_running_node_stop_it_unless_the_loss_is_accepted(embedded: Pipeline) -> None:
    produce(embedded.bootstrap, embedded.topic, [b"a%d" % i for i in range(BEFORE)])
    node = embedded.launch(1)
    _stop_produce_delete_resume(embedded, node)
    assert node.wait(60) == 1
    log = node.log_text()
    assert f"read offset {BEFORE // PARTITIONS} of {embedded.topic}:" in log, log[-3000:]
    assert "below the low watermark 90" in log and "fail-on-data-loss=false resumes" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_with_the_loss_accepted_a_running_node_reads_on_at_the_oldest_offset(embedded: Pipeline) -> None:
    produce(embedded.bootstrap, embedded.topic, [b"a%d" % i for i in range(BEFORE)])
    port = free_port()
    node = embedded.launch(1, "--fail-on-data-loss", "false", "--metrics-port", str(port))
    _stop_produce_delete_resume(embedded, node)
    report = embedded.finish()
    assert_exact(report, embedded)
    assert report.rows == BEFORE + (BEFORE + AFTER) - DELETED_UP_TO * PARTITIONS
    assert node.alive()
    lost = (DELETED_UP_TO - BEFORE // PARTITIONS) * PARTITIONS
    assert f'laminar_offsets_lost_total{{node="1"}} {lost:.1f}' in scrape(port)
    log = node.log_text()
    assert log.count(f"offsets {BEFORE // PARTITIONS}..{DELETED_UP_TO - 1} were deleted by retention before "
                     "they were read and are lost") == PARTITIONS, log[-3000:]
