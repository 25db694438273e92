"""`partition-by` over payload fields through the CLI against real Kafka, in both lake formats.

JSON records carry ``customer_id``, ``region`` and ``event_time``; some lack a field or hold null
there. The pipeline partitions by the event's own day, a bucket of the customer and the region (and,
for Iceberg, a truncation): every row lands in the directory (or Iceberg partition) the transforms of
*its own* values give (checked against pyiceberg's scalar transforms, row by row), every record
without a partition value goes to the bad-record policy (``_rejected/``, with the reason), the lake
is exact, DuckDB reads the partition columns back, an Iceberg scan on the customer prunes to its
bucket, and a node started with another spec is refused in one line while one spelling the same spec
otherwise starts.
"""
from __future__ import annotations

import datetime as dt
import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.transforms import BucketTransform, TruncateTransform
from pyiceberg.types import LongType, StringType

from laminar_kafka.cluster.lake.parquet.sink import REJECTED_DIR, list_published, open_output
from laminar_kafka.cluster.lake.settings import TableFormat
from tests import support
from tests.integration.cluster.harness import Pipeline, assert_exact
from tests.integration.cluster.test_cli_commands import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

COUNT = 1200
BUCKETS = 4
SCHEMA = "customer_id:int64,region:string,event_time:timestamp[ms],amount:double"
START = dt.datetime(2026, 11, 28, 22, 0, 0)
REGIONS = ("eu-west", "us/east", "ap south", "é=1%")  # a slash, a blank, non-ASCII, '=' and '%' in values


def record(index: int) -> dict[str, object]:
    """Record ``index``: 7 % miss a partition field (absent or null), each kind in turn."""
    body: dict[str, object] = {
        "customer_id": index % 13 - 3,  # negative ids too
        "region": REGIONS[index % len(REGIONS)],
        "event_time": (START + dt.timedelta(minutes=7 * index)).strftime("%Y-%m-%d %H:%M:%S"),
        "amount": index / 4,
    }
    if index % 14 == 3:
        del body["customer_id"]
    elif index % 14 == 10:
        body["region"] = None
    return body


def is_bad(index: int) -> bool:
    return index % 14 in (3, 10)


@pytest.fixture(params=[TableFormat.PARQUET, TableFormat.ICEBERG], ids=lambda f: f.value)
def landed(request: pytest.FixtureRequest, pipeline: Pipeline) -> Iterator[tuple[Pipeline, str]]:
    """The pipeline after one node landed every record under the format's spec."""
    pipeline.table_format = request.param
    spec = ("day(event_time), bucket[4](customer_id), region" if request.param is TableFormat.PARQUET
            else "day(event_time),bucket[4](customer_id),truncate[2](region)")
    support.produce(pipeline.bootstrap, pipeline.topic, [json.dumps(record(i)).encode() for i in range(COUNT)])
    node = pipeline.launch(1, "--format", "json", "--json-schema", SCHEMA, "--on-bad-record", "skip",
                           "--max-error-rate", "0.5", "--partition-by", spec)
    report = pipeline.finish()
    assert_exact(report, pipeline)
    bad = sum(1 for i in range(COUNT) if is_bad(i))
    assert report.rejected == bad and report.rows == COUNT - bad, report.table()
    node.terminate()
    assert node.wait(60) == 0, node.log_text()[-3000:]
    yield pipeline, spec


def rejected_rows(output: str) -> pa.Table:
    fs, root = open_output(output)
    return pa.concat_tables([pq.read_table(f) for f in list_published(fs, f"{root}/{REJECTED_DIR}")])


def bucket(customer_id: int) -> int:
    return BucketTransform(BUCKETS).transform(LongType())(customer_id)


def check_rejected(output: str) -> None:
    """Every record without a partition value is in ``_rejected/`` with the field named, and only those."""
    rejected = rejected_rows(output)
    values = [json.loads(v) for v in rejected["value"].to_pylist()]
    assert sorted(v["amount"] for v in values) == sorted(i / 4 for i in range(COUNT) if is_bad(i))
    for value, error in zip(values, rejected["error"].to_pylist(), strict=True):
        field = "customer_id" if "customer_id" not in value else "region"
        assert error == f"field {field} is null or absent", (value, error)


def test_every_row_lands_in_the_partition_of_its_own_values_and_the_spec_is_pinned(
    landed: tuple[Pipeline, str],
) -> None:
    pipeline, spec = landed
    check_rejected(pipeline.output)
    if pipeline.table_format is TableFormat.PARQUET:
        check_parquet_directories(pipeline)
    else:
        check_iceberg_partitions(pipeline)

    verify = cli("verify", "--output", pipeline.output, "--bootstrap", pipeline.bootstrap, "--topic", pipeline.topic,
                 "--pipeline", pipeline.pipeline, "--table-format", pipeline.table_format.value, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"], verify.stdout + verify.stderr
    # one landing per format serves both checks (CI time): the pins after the layout
    check_another_spec_refused_and_the_same_spelled_otherwise_starts(pipeline, spec)


def check_parquet_directories(pipeline: Pipeline) -> None:
    import urllib.parse

    import duckdb

    fs, root = open_output(pipeline.output)
    files = list_published(fs, f"{root}/{pipeline.topic}")
    assert files
    seen = 0
    for path in files:
        levels = Path(path).relative_to(Path(root) / pipeline.topic).parts[:-1]
        keys = dict(level.split("=", 1) for level in levels)
        assert list(keys) == ["event_time_day", "customer_id_bucket", "region"], path
        rows = pq.read_table(path)
        seen += rows.num_rows
        for row in rows.select(["customer_id", "region", "event_time"]).to_pylist():
            assert keys["event_time_day"] == row["event_time"].strftime("%Y-%m-%d"), (path, row)
            assert int(keys["customer_id_bucket"]) == bucket(row["customer_id"]), (path, row)
            assert urllib.parse.unquote(keys["region"]) == row["region"], (path, row)
    assert seen == COUNT - sum(1 for i in range(COUNT) if is_bad(i))

    # DuckDB reads the Hive levels as columns, the encoded values decoded
    glob = f"{root}/{pipeline.topic}/*/*/*/*.parquet"
    mismatches = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false) "
        "WHERE strftime(event_time, '%Y-%m-%d') <> event_time_day").fetchone()
    assert mismatches == (0,)
    regions = duckdb.sql(f"SELECT DISTINCT region FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()
    assert sorted(r for (r,) in regions) == sorted(REGIONS)


def check_iceberg_partitions(pipeline: Pipeline) -> None:
    from pyiceberg.expressions import EqualTo

    from laminar_kafka.cluster.lake.iceberg.tables import open_catalog

    fs, root = open_output(pipeline.output)
    assert pipeline.lake.iceberg is not None
    catalog = open_catalog(pipeline.lake.iceberg, fs, root)
    table = catalog.load_table((pipeline.lake.iceberg.namespace, pipeline.lake.iceberg.table_of(pipeline.topic)))
    assert [f.name for f in table.spec().fields] == ["event_time_day", "customer_id_bucket", "region_trunc"]
    tasks = list(table.scan().plan_files())
    for task in tasks:  # each data file's partition record is the transforms of every one of its rows
        rows = pq.read_table(task.file.file_path.removeprefix("file://")).to_pylist()
        day, customer_bucket, region_trunc = (task.file.partition[i] for i in range(3))
        for row in rows:
            assert day == (row["event_time"].date() - dt.date(1970, 1, 1)).days, (task.file.file_path, row)
            assert customer_bucket == bucket(row["customer_id"]), (task.file.file_path, row)
            assert region_trunc == TruncateTransform(2).transform(StringType())(row["region"])
    one = 4  # a customer id present: a scan for it plans only its bucket's files and returns only its rows
    pruned = list(table.scan(row_filter=EqualTo("customer_id", one)).plan_files())
    assert 0 < len(pruned) < len(tasks)
    assert {t.file.partition[1] for t in pruned} == {bucket(one)}
    found = table.scan(row_filter=EqualTo("customer_id", one)).to_arrow()
    assert found.num_rows == sum(1 for i in range(COUNT) if not is_bad(i) and i % 13 - 3 == one)


def check_another_spec_refused_and_the_same_spelled_otherwise_starts(pipeline: Pipeline, spec: str) -> None:
    canonical = spec.replace(" ", "")
    other = cli("run", "--bootstrap", pipeline.bootstrap, "--topic", pipeline.topic, "--zk", pipeline.zk or "",
                "--pipeline", pipeline.pipeline, "--output", pipeline.output, "--node-id", "2",
                "--table-format", pipeline.table_format.value, "--format", "json", "--json-schema", SCHEMA,
                "--partition-by", "day(event_time),bucket[8](customer_id)", "--log-level", "warning")
    assert other.returncode == 2, other.stderr[-3000:]
    lines = [line for line in other.stderr.splitlines() if line.strip()]
    if pipeline.table_format is TableFormat.ICEBERG:  # the table's own spec is checked first
        table = f"{pipeline.lake.iceberg.namespace}.{pipeline.lake.iceberg.table_of(pipeline.topic)}"
        assert lines == [f"error: iceberg table {table} is partitioned by {spec.replace(',', ', ')}, but setting "
                         "partition-by is day(event_time),bucket[8](customer_id) here "
                         "(day(event_time), bucket[8](customer_id))"], other.stderr
    else:
        assert lines == [f"error: setting partition-by is day(event_time),bucket[8](customer_id) here, but pipeline "
                         f"{pipeline.pipeline} was created with {canonical} (pinned at its first start); start this "
                         f"node with --partition-by {shlex.quote(canonical)}"], other.stderr

    spelled = canonical.replace("region", "identity(region)") if "truncate" not in canonical else \
        canonical.replace(",", " , ")
    again = pipeline.launch(1, "--format", "json", "--json-schema", SCHEMA, "--on-bad-record", "skip",
                            "--max-error-rate", "0.5", "--partition-by", spelled)
    pipeline.wait_until(lambda: "settings agree with the pinned ones" in again.log_text(), 60, "the node agreed")
    assert_exact(pipeline.finish(), pipeline)
    again.terminate()
    assert again.wait(60) == 0
