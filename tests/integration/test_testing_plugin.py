"""laminar_kafka.testing's fixtures beyond docs/testing.md's examples: a three-broker cluster keeps
taking writes with a broker killed or paused, `consume_records` with a count waits for records
produced after the call, and an interrupted run (Ctrl-C, SIGTERM) leaves no server behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

from laminar_kafka.devstack.processes import pid_cmdline, port_accepts
from laminar_kafka.devstack.waiting import wait_until
from laminar_kafka.testing.handles import KafkaTestCluster
from laminar_kafka.testing.records import Record

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]


def test_three_brokers_take_writes_with_one_killed_then_one_paused(
    kafka_cluster_3: KafkaTestCluster, unique_topic: Callable[..., str], produce_records: Callable[..., int],
    consume_records: Callable[..., list[Record]],
) -> None:
    topic = unique_topic(partitions=3, cluster=kafka_cluster_3)  # replication 3, min.insync.replicas 2
    assert kafka_cluster_3.replication == 3 and len(kafka_cluster_3.brokers) == 3
    produce_records(topic, [b"all up"], partition=0, cluster=kafka_cluster_3)
    victim = kafka_cluster_3.brokers[1]
    victim.kill()
    try:
        assert produce_records(topic, [b"one killed"], partition=0, cluster=kafka_cluster_3) == 1
    finally:
        victim.start()
    kafka_cluster_3.wait_in_sync(topic)  # else pausing another leaves one replica, under min.insync.replicas
    kafka_cluster_3.brokers[2].pause()
    try:
        assert produce_records(topic, [b"one paused"], partition=0, cluster=kafka_cluster_3) == 1
    finally:
        kafka_cluster_3.brokers[2].resume()
    values = [r.value for r in consume_records(topic, cluster=kafka_cluster_3, timeout=60)]
    assert values == [b"all up", b"one killed", b"one paused"]


def test_consume_records_with_a_count_waits_for_records_produced_later(
    unique_topic: Callable[..., str], produce_records: Callable[..., int], consume_records: Callable[..., list[Record]],
) -> None:
    topic = unique_topic(partitions=2)
    with ThreadPoolExecutor(1) as pool:
        produced = pool.submit(produce_records, topic, [b"x", b"y", b"z"])
        records = consume_records(topic, 3, timeout=60)
        assert produced.result(60) == 3
    assert sorted(r.value or b"" for r in records) == [b"x", b"y", b"z"]
    assert all(records[i].partition <= records[i + 1].partition for i in range(2))
    with pytest.raises(TimeoutError, match=r"3 records after 1s, wanted 4"):
        consume_records(topic, 4, timeout=1)


WAITS_FOREVER = '''
import time


def test_waits(kafka_cluster, tmp_path_factory):
    with open("bootstrap.txt", "w") as out:
        out.write(kafka_cluster.bootstrap)
    time.sleep(600)
'''


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_stops_its_servers(signum: int, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) or a SIGTERM while a test runs: pytest ends, and no server process of the run
    is left (none whose command line names the run's temporary directory)."""
    (tmp_path / "test_wait.py").write_text(WAITS_FOREVER)
    basetemp = tmp_path / "basetemp"
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={basetemp}"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (tmp_path / "bootstrap.txt").exists() or run.poll() is not None, 120, "the broker up")
        assert run.poll() is None, run.communicate()[0]
        port = int((tmp_path / "bootstrap.txt").read_text().rsplit(":", 1)[1])
        assert port_accepts(port)
        run.send_signal(signum)
        output = run.communicate(timeout=90)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert "KeyboardInterrupt" in output or "Interrupted" in output, output[-2000:]
    assert not port_accepts(port)
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and str(basetemp) in pid_cmdline(int(pid))]
    assert left == []


def test_kafka_producer_is_a_producer_of_the_session_cluster(
    kafka_producer: Any, unique_topic: Callable[..., str], consume_records: Callable[..., list[Record]],
) -> None:
    topic = unique_topic()
    errors: list[object] = []
    kafka_producer.produce(topic, b"v", key=b"k", on_delivery=lambda error, message: errors.append(error))
    assert kafka_producer.flush(30) == 0 and errors == [None]
    assert [(r.key, r.value) for r in consume_records(topic)] == [(b"k", b"v")]


def test_a_partition_from_one_broker_cuts_only_that_broker(
    kafka_cluster_3: KafkaTestCluster, unique_topic: Callable[..., str], network_partition: Callable[..., Any],
) -> None:
    from confluent_kafka import Producer

    topic = unique_topic(partitions=6, cluster=kafka_cluster_3)
    leaders = {p: meta.leader for p, meta in kafka_cluster_3.admin().list_topics(topic, timeout=10).topics[topic]
               .partitions.items()}
    cut_node = 2  # broker index 1
    on_cut = next(p for p, leader in leaders.items() if leader == cut_node)
    elsewhere = next(p for p, leader in leaders.items() if leader != cut_node)
    partition = network_partition(kafka_cluster_3, broker=1)
    producer = partition.inside(lambda: Producer(kafka_cluster_3.config(message_timeout_ms=5000, acks="all")))
    outcomes: dict[int, object] = {}

    def deliver(target: int) -> None:
        producer.produce(topic, b"x", partition=target,
                         on_delivery=lambda error, message: outcomes.__setitem__(target, error))

    deliver(elsewhere)  # the client knows every broker before the cut
    producer.flush(10)
    assert outcomes == {elsewhere: None}
    partition.cut()
    deliver(on_cut)
    deliver(elsewhere)
    producer.flush(15)
    assert outcomes[elsewhere] is None
    assert getattr(outcomes[on_cut], "name", lambda: None)() == "_MSG_TIMED_OUT"
    partition.heal()
