"""Iceberg tables partitioned by fields (embedded SQLite catalog, no servers): the spec of a
``partition-by``, the check of an existing table's, and data files whose partition records are
pyiceberg's transforms of their rows' values, so that scans prune by them."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import (
    BinaryType,
    DateType,
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)
from pyiceberg.utils.datetime import datetime_to_micros

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.partitions import (
    append_data_files,
    check_partitioning,
    data_files,
    partition_spec_of,
)
from laminar_kafka.cluster.lake.iceberg.tables import iceberg_schema_of
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.errors import ConfigurationError
from tests.unit.cluster.iceberg_fakes import DAY_1, DAY_2, Lake, rows

LONG_REGION = "europe-west-central-1-a"  # longer than the 16 characters statistics keep
LONG_OTHER = "europe-west-central-1-b"  # the same first 16 characters
bucket4 = BucketTransform(4).transform(LongType())


def orders(offsets: list[int], when: dt.datetime | None = DAY_1, **extra: pa.Array) -> pa.Table:
    return rows("orders", 0, offsets, when=when, **extra)


def created(tmp_path: Path, spec: str, sample: pa.Table) -> tuple[Lake, Table]:
    """A lake partitioned by ``spec`` and its table ``orders``, created for ``sample``'s schema."""
    lake = Lake(tmp_path, partitioning=PartitionSpec.parse(spec))
    output = lake.output()
    output.check(["orders"], sample.schema)
    return lake, output.table("orders")


def append(lake: Lake, table: Table, *files: pa.Table) -> tuple[Table, list[str]]:
    """Write each table as one Parquet file and append them all in one transaction."""
    paths = []
    for file in files:
        path = f"{lake.root}/f{len(list(Path(lake.root).glob('f*.parquet'))):03d}.parquet"
        pq.write_table(file, path)
        paths.append(path)
    with table.transaction() as transaction:
        append_data_files(transaction, paths, {"laminar.test": "yes"})
    return lake.output().table("orders"), paths


def partitions(table: Table, row_filter: Any = None) -> dict[str, tuple[Any, ...]]:
    """The planned data files (by path) and their partition records."""
    scan = table.scan() if row_filter is None else table.scan(row_filter=row_filter)
    return {task.file.file_path: tuple(task.file.partition[i] for i in range(len(task.file.partition)))
            for task in scan.plan_files()}


def test_bucket_partitions_are_pyicebergs_and_a_filter_on_the_column_prunes_by_them(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "bucket[4](customer_id)", orders([0], customer_id=pa.array([1], pa.int64())))
    assert [str(f) for f in table.spec().fields] == ["1000: customer_id_bucket: bucket[4](6)"]
    seven = bucket4(7)
    same = [c for c in range(-50, 50) if c != 7 and bucket4(c) == seven]
    other = [c for c in range(-50, 50) if bucket4(c) != seven]
    lows, highs = [c for c in other if c < 7], [c for c in other if c > 7]
    low, high = next((lo, hi) for lo in lows for hi in highs if bucket4(lo) == bucket4(hi))  # its range holds 7
    same_low, same_high = min(same), max(same)
    files = [
        orders([0, 1], customer_id=pa.array([7, 7], pa.int64())),
        orders([2, 3], customer_id=pa.array([low, high], pa.int64())),            # statistics cannot prune it
        orders([4, 5], customer_id=pa.array([same_low, same_high], pa.int64())),  # its bucket is 7's
        orders([6], customer_id=pa.array([high], pa.int64())),
    ]
    table, paths = append(lake, table, *files)
    assert partitions(table) == {
        paths[0]: (seven,), paths[1]: (bucket4(low),), paths[2]: (seven,), paths[3]: (bucket4(high),)}
    assert set(partitions(table, EqualTo("customer_id", 7))) == {paths[0], paths[2]}
    assert sorted(table.scan(row_filter=EqualTo("customer_id", 7)).to_arrow()["_offset"].to_pylist()) == [0, 1]
    assert table.current_snapshot().summary["laminar.test"] == "yes"
    assert table.scan().to_arrow().num_rows == 7


def test_truncate_partitions_and_pruning(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "truncate[3](name)", orders([0], name=pa.array(["x"])))
    truncate = TruncateTransform(3).transform(StringType())
    table, paths = append(lake, table,
                          orders([0, 1], name=pa.array(["abcdef", "abcxyz"])),
                          orders([2], name=pa.array(["abd"])),
                          orders([3], name=pa.array(["日本語テキスト"])),
                          orders([4], name=pa.array(["ab"])))
    assert partitions(table) == {paths[0]: ("abc",), paths[1]: ("abd",), paths[2]: ("日本語",), paths[3]: ("ab",)}
    assert truncate("日本語テキスト") == "日本語"
    assert set(partitions(table, EqualTo("name", "abcq"))) == {paths[0]}
    assert set(partitions(table, EqualTo("name", "日本語テキスト"))) == {paths[2]}


def test_truncate_of_negative_longs_floors(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "truncate[10](amount)", orders([0], amount=pa.array([1], pa.int64())))
    table, paths = append(lake, table, orders([0, 1], amount=pa.array([-1, -10], pa.int64())),
                          orders([2], amount=pa.array([-11], pa.int64())))
    assert partitions(table) == {paths[0]: (-10,), paths[1]: (-20,)}
    assert TruncateTransform(10).transform(LongType())(-1) == -10
    assert set(partitions(table, EqualTo("amount", -5))) == {paths[0]}


def test_identity_of_a_long_string_is_the_whole_value(tmp_path: Path) -> None:
    """Statistics keep 16 characters, so add_files would infer a prefix: the record is the value."""
    lake, table = created(tmp_path, "region", orders([0], region=pa.array(["eu"])))
    table, paths = append(lake, table, orders([0, 1], region=pa.array([LONG_REGION] * 2).dictionary_encode()),
                          orders([2], region=pa.array([LONG_OTHER])))
    assert partitions(table) == {paths[0]: (LONG_REGION,), paths[1]: (LONG_OTHER,)}
    assert IdentityTransform().transform(StringType())(LONG_REGION) == LONG_REGION
    assert set(partitions(table, EqualTo("region", LONG_REGION))) == {paths[0]}
    assert set(partitions(table, EqualTo("region", LONG_OTHER))) == {paths[1]}


@pytest.mark.parametrize(("unit", "tz"), [("ms", None), ("us", None), ("s", "UTC"), ("us", "UTC")])
def test_day_of_a_timestamp_field(tmp_path: Path, unit: str, tz: str | None) -> None:
    utc = dt.timezone.utc
    late = dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=utc)
    early = dt.datetime(1969, 12, 31, 12, 0, tzinfo=utc)

    def stamps(*values: dt.datetime) -> pa.Array:
        return pa.array([v if tz else v.replace(tzinfo=None) for v in values], pa.timestamp(unit, tz))

    lake, table = created(tmp_path, "day(event_time)", orders([0], event_time=stamps(late)))
    assert isinstance(table.schema().find_field("event_time").field_type, TimestamptzType if tz else TimestampType)
    table, paths = append(lake, table, orders([0, 1], event_time=stamps(late, late.replace(hour=0))),
                          orders([2], event_time=stamps(early)))
    day = DayTransform().transform(TimestampType())
    assert partitions(table) == {paths[0]: (day(datetime_to_micros(late)),), paths[1]: (-1,)}
    assert partitions(table)[paths[0]] == ((dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,)
    start = late.replace(hour=0, minute=0, second=0) if tz else late.replace(hour=0, minute=0, second=0, tzinfo=None)
    in_day = And(GreaterThanOrEqual("event_time", start.isoformat()),
                 LessThan("event_time", (start + dt.timedelta(days=1)).isoformat()))
    assert set(partitions(table, in_day)) == {paths[0]}


def test_day_of_a_date_field(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "day(d)", orders([0], d=pa.array([dt.date(2024, 1, 1)])))
    table, paths = append(lake, table, orders([0], d=pa.array([dt.date(2024, 1, 2)], pa.date64())),
                          orders([1], d=pa.array([dt.date(1969, 12, 31)])))
    assert partitions(table) == {paths[0]: (19_724,), paths[1]: (-1,)}


def test_kafka_day_with_a_bucket(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "day(_timestamp),bucket[4](customer_id)",
                          orders([0], customer_id=pa.array([1], pa.int64())))
    eight = next(c for c in range(8, 100) if bucket4(c) != bucket4(7))  # another bucket
    assert [f.name for f in table.spec().fields] == ["_timestamp_day", "customer_id_bucket"]
    table, paths = append(lake, table,
                          orders([0, 1], when=DAY_1, customer_id=pa.array([7, 7], pa.int64())),
                          orders([2], when=DAY_2, customer_id=pa.array([7], pa.int64())),
                          orders([3], when=None, customer_id=pa.array([7], pa.int64())),
                          orders([4], when=DAY_1, customer_id=pa.array([eight], pa.int64())))
    day_1, day_2 = (DayTransform().transform(TimestampType())(datetime_to_micros(d)) for d in (DAY_1, DAY_2))
    assert partitions(table) == {paths[0]: (day_1, bucket4(7)), paths[1]: (day_2, bucket4(7)),
                                 paths[2]: (None, bucket4(7)), paths[3]: (day_1, bucket4(eight))}
    in_day_1 = And(GreaterThanOrEqual("_timestamp", DAY_1.replace(hour=0).isoformat()),
                   LessThan("_timestamp", DAY_2.replace(hour=0).isoformat()))
    assert set(partitions(table, And(in_day_1, EqualTo("customer_id", 7)))) == {paths[0]}
    assert set(partitions(table, EqualTo("customer_id", eight))) == {paths[3]}


def test_bucket_of_strings_binary_and_dates(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "bucket[16](s),bucket[16](b),bucket[16](d)",
                          orders([0], s=pa.array(["x"]), b=pa.array([b"x"]), d=pa.array([dt.date(2024, 1, 1)])))
    table, (path,) = append(lake, table, orders([0], s=pa.array(["iceberg"]), b=pa.array([b"\x00\x01"]),
                                                d=pa.array([dt.date(2017, 11, 16)])))
    assert partitions(table)[path] == (BucketTransform(16).transform(StringType())("iceberg"),
                                       BucketTransform(16).transform(BinaryType())(b"\x00\x01"),
                                       BucketTransform(16).transform(DateType())(17_486))
    assert BucketTransform(16).transform(DateType())(17_486) == BucketTransform(16).transform(LongType())(17_486)


def test_data_files_refuse_a_file_without_a_partition(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "bucket[4](customer_id)", orders([0], customer_id=pa.array([1], pa.int64())))
    metadata, io = table.metadata, table.io
    empty = f"{lake.root}/empty.parquet"
    pq.write_table(orders([0], customer_id=pa.array([1], pa.int64())).slice(0, 0), empty)
    with pytest.raises(SinkError, match="empty.parquet holds no rows to read its partition from"):
        data_files(io, metadata, [empty])
    null_first = f"{lake.root}/null.parquet"
    pq.write_table(orders([0, 1], customer_id=pa.array([None, 7], pa.int64())), null_first)
    with pytest.raises(SinkError, match=r"null.parquet: the first row's customer_id is null \(partition field "
                                        r"customer_id_bucket\)"):
        data_files(io, metadata, [null_first])
    without = f"{lake.root}/without.parquet"
    pq.write_table(orders([0]), without)
    with pytest.raises(SinkError, match="without.parquet has no column for partition field customer_id_bucket"):
        data_files(io, metadata, [without])
    assert table.current_snapshot() is None


def test_a_null_kafka_timestamp_has_a_null_day(tmp_path: Path) -> None:
    lake, table = created(tmp_path, "day", orders([0]))
    path = f"{lake.root}/null.parquet"
    pq.write_table(orders([0], when=None), path)
    (data_file,) = data_files(table.io, table.metadata, [path])
    assert data_file.partition[0] is None and data_file.record_count == 1


# --- the spec and the check ---------------------------------------------------------------------------

SCHEMA = Schema(
    NestedField(1, "_timestamp", TimestampType(), required=False),
    NestedField(2, "customer_id", LongType(), required=False),
    NestedField(3, "name", StringType(), required=False),
    NestedField(4, "price", DoubleType(), required=False),
    NestedField(5, "d", DateType(), required=False),
)


def test_partition_spec_of() -> None:
    spec = partition_spec_of(PartitionSpec.parse("day(_timestamp),bucket[8](customer_id),truncate[2](name),d"),
                             SCHEMA)
    assert [(f.source_id, f.field_id, str(f.transform), f.name) for f in spec.fields] == [
        (1, 1000, "day", "_timestamp_day"), (2, 1001, "bucket[8]", "customer_id_bucket"),
        (3, 1002, "truncate[2]", "name_trunc"), (5, 1003, "identity", "d")]
    assert partition_spec_of(PartitionSpec(), SCHEMA) == UNPARTITIONED_PARTITION_SPEC
    assert [f.name for f in partition_spec_of(PartitionSpec.parse("hour"), SCHEMA).fields] == ["_timestamp_hour"]


@pytest.mark.parametrize(("spec", "message"), [
    ("bucket[4](nope)", r"partition-by bucket\[4\]\(nope\) needs a nope column"),
    ("day", r"partition-by day\(_timestamp\) needs a _timestamp column"),
    ("day(name)", r"partition-by day\(name\): name is string, which day does not take"),
    ("hour(d)", r"partition-by hour\(d\): d is date, which hour does not take"),
    ("bucket[4](price)", r"partition-by bucket\[4\]\(price\): price is double, which bucket does not take"),
    ("truncate[2](_timestamp_x)", "needs a _timestamp_x column"),
    ("truncate[2](d)", "d is date, which truncate does not take"),
])
def test_partition_spec_of_refuses(spec: str, message: str) -> None:
    schema = SCHEMA if spec != "day" else Schema(NestedField(2, "customer_id", LongType(), required=False))
    with pytest.raises(ConfigurationError, match=message):
        partition_spec_of(PartitionSpec.parse(spec), schema)


def test_the_spec_of_the_sinks_own_schema() -> None:
    schema = iceberg_schema_of(orders([0], customer_id=pa.array([1], pa.int32())).schema)
    spec = partition_spec_of(PartitionSpec.parse("bucket[4](_partition),truncate[4](value),customer_id"), schema)
    assert [f.name for f in spec.fields] == ["_partition_bucket", "value_trunc", "customer_id"]


def test_check_partitioning_takes_the_same_spec_and_refuses_another_naming_both(tmp_path: Path) -> None:
    _, table = created(tmp_path, "region, bucket[4](customer_id)",
                       orders([0], region=pa.array(["eu"]), customer_id=pa.array([1], pa.int64())))
    check_partitioning(table, PartitionSpec.parse("identity(region),bucket[4](customer_id)"))
    for other, wanted in [
        ("region,bucket[8](customer_id)", "identity(region), bucket[8](customer_id)"),
        ("bucket[4](customer_id),region", "bucket[4](customer_id), identity(region)"),
        ("region", "identity(region)"),
        ("none", "unpartitioned"),
        ("day(_timestamp),region,bucket[4](customer_id)",
         "day(_timestamp), identity(region), bucket[4](customer_id)"),
    ]:
        spec = PartitionSpec.parse(other)
        with pytest.raises(ConfigurationError) as refused:
            check_partitioning(table, spec)
        assert str(refused.value) == (
            f"iceberg table pipe.orders is partitioned by identity(region), bucket[4](customer_id), but setting "
            f"partition-by is {spec.text} here ({wanted})")
        assert "\n" not in str(refused.value)


def test_check_partitioning_of_an_unpartitioned_table(tmp_path: Path) -> None:
    _, table = created(tmp_path, "none", orders([0], customer_id=pa.array([1], pa.int64())))
    check_partitioning(table, PartitionSpec())
    with pytest.raises(ConfigurationError, match=r"is partitioned by nothing, but setting partition-by is "
                                          r"bucket\[2\]\(customer_id\) here \(bucket\[2\]\(customer_id\)\)$"):
        check_partitioning(table, PartitionSpec.parse("bucket[2](customer_id)"))
