"""A producer with a broken clock, here one that sends microseconds where Kafka expects milliseconds,
writes timestamps past the year 9999. Such a `_timestamp` is a bad record. The default policy stops the
node in one line naming the record. With `--on-bad-record skip`, those records land in `_rejected/`
and every other record lands exactly once, in a Parquet tree and in an Iceberg table. Before this,
the Parquet tree got a `dt=56886-...` directory, and an Iceberg node failed every commit with an
`OverflowError` from pyiceberg's statistics.

Kafka 4 brokers refuse timestamps more than an hour ahead by default
(`message.timestamp.after.max.ms`, KIP-937); Kafka 3 brokers, and topics configured like the one
here, accept them."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published, open_output
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.devstack.producers import producer
from laminar_kafka.devstack.topics import create_topic
from tests.conftest import KafkaHandle
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact

RECORDS = 400
NOW_MS = int(time.time() * 1000)


def is_bad(index: int) -> bool:
    return index % 50 == 7


@pytest.fixture
def embedded(kafka: KafkaHandle, unique: Callable[[str], str], tmp_path: Path) -> Iterator[Pipeline]:
    """An embedded pipeline on a fresh topic that takes timestamps however far ahead."""
    name = unique("clock")
    create_topic(kafka.bootstrap, name, PARTITIONS, config={"message.timestamp.after.max.ms": str(2**63 - 1)})
    pipeline = Pipeline(bootstrap=kafka.bootstrap, zk=None, topic=name, pipeline=name, base=tmp_path)
    try:
        yield pipeline
    finally:
        pipeline.stop_all()


def produce_with_clocks(pipeline: Pipeline) -> None:
    """RECORDS records over every partition; every 50th has a timestamp in microseconds."""
    kafka = producer(pipeline.bootstrap)
    failures: list[str] = []
    for index in range(RECORDS):
        timestamp = NOW_MS * 1000 if is_bad(index) else NOW_MS
        kafka.produce(pipeline.topic, b"v%d" % index, partition=index % PARTITIONS, timestamp=timestamp,
                      on_delivery=lambda err, _msg: err is None or failures.append(str(err)))
    assert kafka.flush(30) == 0 and not failures, failures[:3]


def test_the_default_policy_stops_the_node_naming_the_record(embedded: Pipeline) -> None:
    produce_with_clocks(embedded)
    node = embedded.launch(1)
    assert node.wait(60) != 0
    log = node.log_text()
    assert "after 9999-12-31" in log and "microseconds sent as milliseconds" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    fs, root = open_output(embedded.output)
    assert not list_published(fs, root), "nothing lands past a record the policy stops on"


@pytest.mark.parametrize("table_format", [TableFormat.PARQUET, TableFormat.ICEBERG], ids=lambda f: f.value)
def test_skip_rejects_them_and_lands_every_other_record_exactly_once(
        embedded: Pipeline, table_format: TableFormat) -> None:
    embedded.table_format = table_format
    produce_with_clocks(embedded)
    embedded.launch(1, "--on-bad-record", "skip", "--max-error-rate", "0.5")

    report = embedded.finish()
    assert_exact(report, embedded)
    bad = sum(map(is_bad, range(RECORDS)))
    assert report.rejected == bad and report.rows == RECORDS - bad
    fs, root = open_output(embedded.output)
    rejected = pa.concat_tables([pq.read_table(f) for f in list_published(fs, f"{root}/{REJECTED_DIR}")])
    assert sorted(rejected["value"].to_pylist()) == sorted(b"v%d" % i for i in range(RECORDS) if is_bad(i))
    assert all("after 9999-12-31" in error for error in rejected["error"].to_pylist())
    assert rejected["_timestamp"].cast(pa.int64()).to_pylist() == [NOW_MS * 1000] * bad  # kept as sent
    directories = {f.split("/")[-2] for f in list_published(fs, root) if f"/{REJECTED_DIR}/" not in f}
    assert all(d.startswith("dt=") and len(d) == len("dt=2026-12-04") for d in directories), directories
