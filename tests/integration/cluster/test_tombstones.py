"""A compacted topic of JSON records with tombstones (null values: deletes, as Debezium writes after
each delete event). With `--on-tombstone row` every tombstone lands as a row with null payload
columns and its key, exactly once, and `verify` finds nothing missing. Under the default, a
tombstone is a bad record, so a delete-heavy topic trips `max-error-rate`."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from laminar_kafka.devstack.producers import producer
from tests.integration.cluster.harness import PARTITIONS, Pipeline, assert_exact

RECORDS = 600
FLAGS = ("--format", "json", "--json-schema", "id:int64,name:string", "--include-key", "true")


def is_delete(index: int) -> bool:
    return index % 10 == 9  # a delete of the record written just before, on the same key


def produce_with_deletes(pipeline: Pipeline) -> None:
    kafka = producer(pipeline.bootstrap)
    failures: list[str] = []
    for index in range(RECORDS):
        key = b"k%d" % (index - 1 if is_delete(index) else index)
        value = None if is_delete(index) else b'{"id":%d,"name":"n%d"}' % (index, index)
        kafka.produce(pipeline.topic, value, key=key, partition=index // 10 % PARTITIONS,
                      on_delivery=lambda err, _msg: err is None or failures.append(str(err)))
    assert kafka.flush(30) == 0 and not failures, failures[:3]


def test_on_tombstone_row_lands_deletes_as_rows_with_their_keys_exactly_once(embedded: Pipeline) -> None:
    produce_with_deletes(embedded)
    embedded.launch(1, *FLAGS, "--on-tombstone", "row")

    report = embedded.finish()
    assert_exact(report, embedded)
    assert report.rows == RECORDS and report.rejected == 0
    fs, root = open_output(embedded.output)
    rows = pa.concat_tables([pq.read_table(f) for f in list_published(fs, root)])
    deletes = rows.filter(pa.array([i is None for i in rows["id"].to_pylist()]))
    assert deletes.num_rows == sum(map(is_delete, range(RECORDS)))
    assert sorted(deletes["_key"].to_pylist()) == sorted(b"k%d" % (i - 1) for i in range(RECORDS) if is_delete(i))
    assert deletes["name"].null_count == deletes.num_rows


def test_by_default_tombstones_are_bad_records(embedded: Pipeline) -> None:
    produce_with_deletes(embedded)
    node = embedded.launch(1, *FLAGS, "--on-bad-record", "skip")  # 10 % bad, above max-error-rate 0.01
    assert node.wait(60) != 0
    log = node.log_text()
    assert "max-error-rate" in log and "tombstone" in log, log[-3000:]
