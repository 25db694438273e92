"""Field levels of the Hive layout: each transform over each Arrow type it takes, against a reference
computed one row at a time with pyiceberg's scalar transforms (the module under test is vectorised
and uses pyiceberg-core's), the refusals, the percent-encoding and what lake readers decode of it
(Kafka-time levels: test_partitioning.py)."""
from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    TruncateTransform,
)
from pyiceberg.transforms import (
    Transform as IcebergTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec, PartitionTerm, Transform
from laminar_kafka.cluster.lake.partitioning import HIVE_DEFAULT_PARTITION, encode_value, split_by_partition
from laminar_kafka.cluster.lake.staged_names import is_valid_directory
from laminar_kafka.kafka_source.decode.required_fields import kind_of

MS_PER_DAY = 86_400_000
UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
WIDTHS = [1, 2, 3, 10, 1000]
BUCKETS = [1, 2, 7, 16, 1000]


def _seconds(year: int) -> int:
    return int((dt.datetime(year, 1, 1, tzinfo=dt.timezone.utc) - EPOCH).total_seconds())


# --- the reference: one row at a time, pyiceberg's scalar transforms --------------------------------

@dataclass(frozen=True)
class Case:
    """An Arrow type the partitioner takes: how to build a column of it from Python values, its
    Iceberg type, and each row's value in Iceberg's physical form (micros, days)."""

    name: str
    kind: str
    iceberg: IcebergType
    values: st.SearchStrategy[Any]
    build: Callable[[list[Any]], pa.Array]
    physical: Callable[[Any], Any] = lambda v: v


def _integer(arrow_type: pa.DataType, iceberg: IcebergType, bits: int) -> Case:
    # the lowest W values of an Iceberg int or long are left out: Iceberg's truncate wraps there
    # (-2**31 under truncate[10] of an int is 2147483646 in Java and pyiceberg-core, -2147483650 in
    # pyiceberg); int8 and int16 are Iceberg ints, far from it
    low, high = -(2 ** (bits - 1)) + (max(WIDTHS) if bits >= 32 else 0), 2 ** (bits - 1) - 1
    return Case(str(arrow_type), "integer", iceberg, st.integers(low, high), lambda v: pa.array(v, arrow_type))


def _timestamp(unit: str, tz: str | None) -> Case:
    # years 1000-3000 (the nanosecond range: its int64 limits), pre-epoch values included
    low, high = (_seconds(1700), _seconds(2250)) if unit == "ns" else (_seconds(1000), _seconds(3000))
    per = UNITS[unit]
    return Case(
        f"timestamp[{unit}, {tz}]", "timestamp", TimestamptzType() if tz else TimestampType(),
        st.integers(low * per, high * per),
        lambda v: pa.array(v, pa.int64()).cast(pa.timestamp(unit, tz)),
        lambda v: v * 1_000_000 // per,  # Python's // floors, like Iceberg's nanos_to_micros
    )


TEXTS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "null", "NULL", "Null", "a/b", "x=y", "100%", "a b", "é", "日本語", "~._-", ".", "..",
                     "a+b", "?#&", "\\", "\x00", "\U0001F600"]),
)
CASES = [
    _integer(pa.int8(), IntegerType(), 8),
    _integer(pa.int16(), IntegerType(), 16),
    _integer(pa.int32(), IntegerType(), 32),
    _integer(pa.int64(), LongType(), 64),
    Case("string", "string", StringType(), TEXTS, lambda v: pa.array(v, pa.string())),
    Case("large_string", "string", StringType(), TEXTS, lambda v: pa.array(v, pa.large_string())),
    Case("dictionary<string>", "string", StringType(), TEXTS, lambda v: pa.array(v, pa.string()).dictionary_encode()),
    Case("binary", "binary", BinaryType(), st.binary(max_size=6), lambda v: pa.array(v, pa.binary())),
    Case("large_binary", "binary", BinaryType(), st.binary(max_size=6), lambda v: pa.array(v, pa.large_binary())),
    Case("fixed_size_binary[3]", "binary", BinaryType(), st.binary(min_size=3, max_size=3),
         lambda v: pa.array(v, pa.binary(3))),
    Case("bool", "boolean", BooleanType(), st.booleans(), lambda v: pa.array(v, pa.bool_())),
    Case("date32", "date", DateType(), st.integers(_seconds(1000) // 86_400, _seconds(3000) // 86_400),
         lambda v: pa.array(v, pa.int32()).view(pa.date32())),
    Case("date64", "date", DateType(), st.integers(_seconds(1000) // 86_400, _seconds(3000) // 86_400),
         lambda v: pa.array([d * MS_PER_DAY for d in v], pa.int64()).view(pa.date64())),
    *(_timestamp(unit, tz) for unit in UNITS for tz in (None, "UTC", "Asia/Kolkata")),
]
TRANSFORMS = [(Transform.IDENTITY, None), (Transform.DAY, None), (Transform.HOUR, None),
              *((Transform.BUCKET, n) for n in BUCKETS), *((Transform.TRUNCATE, w) for w in WIDTHS)]
PAIRS = [(case, transform, parameter) for case in CASES for transform, parameter in TRANSFORMS
         if case.kind in transform.kinds]


def iceberg_transform(transform: Transform, parameter: int | None) -> IcebergTransform[Any, Any]:
    if transform is Transform.BUCKET:
        return BucketTransform(parameter)
    if transform is Transform.TRUNCATE:
        return TruncateTransform(parameter)
    return {Transform.IDENTITY: IdentityTransform(), Transform.DAY: DayTransform(),
            Transform.HOUR: HourTransform()}[transform]


def reference_segment(term: PartitionTerm, case: Case, value: Any) -> str:
    """``key=value`` of one row: pyiceberg's transform of Iceberg's form of the value, its human
    string (days, hours, dates, booleans, integers) or percent-encoded (text and bytes)."""
    transform = iceberg_transform(term.transform, term.parameter)
    result = transform.transform(case.iceberg)(case.physical(value))
    if isinstance(result, (str, bytes)):
        text = urllib.parse.quote(result, safe="")
        if text.lower() == "null":  # DuckDB reads a bare null as null
            text = f"%{ord(text[0]):02X}{text[1:]}"
    else:
        text = transform.to_human_string(case.iceberg, result)
    return f"{term.directory_key}={text}"


def kafka_segment(term: PartitionTerm, millis: int | None) -> str:
    if millis is None:
        hour = f"/hour={HIVE_DEFAULT_PARTITION}" if term.transform is Transform.HOUR else ""
        return f"dt={HIVE_DEFAULT_PARTITION}{hour}"
    stamp = EPOCH + dt.timedelta(milliseconds=millis)
    return f"dt={stamp:%Y-%m-%d}" + (f"/hour={stamp:%H}" if term.transform is Transform.HOUR else "")


# --- every row in its reference directory ------------------------------------------------------------

@dataclass(frozen=True)
class Level:
    term: PartitionTerm
    case: Case
    values: list[Any]


@st.composite
def levels(draw: st.DrawFn, column: str, rows: int) -> Level:
    case, transform, parameter = draw(st.sampled_from(PAIRS))
    pool = draw(st.lists(case.values, min_size=1, max_size=4))  # few values: rows share directories
    return Level(PartitionTerm(column, transform, parameter), case, [draw(st.sampled_from(pool)) for _ in range(rows)])


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_every_row_lands_once_in_its_reference_directory_in_its_order(data: st.DataObject) -> None:
    rows = data.draw(st.integers(1, 40), "rows")
    topics = data.draw(st.lists(st.sampled_from(["a", "b.c", "d-e_f"]), min_size=rows, max_size=rows), "topics")
    dictionary_topic = data.draw(st.booleans(), "dictionary topic")
    fields = [data.draw(levels("f", rows), "f")]
    if data.draw(st.booleans(), "two fields"):
        fields.append(data.draw(levels("g", rows), "g"))
    kafka = data.draw(st.sampled_from([None, Transform.DAY, Transform.HOUR]), "kafka time")
    stamps = data.draw(st.lists(st.one_of(st.none(), st.integers(-10**12, 10**13)), min_size=rows, max_size=rows))
    sliced = data.draw(st.booleans(), "sliced")  # a batch that is a slice of a bigger one (array offsets)

    kafka_terms = [] if kafka is None else [PartitionTerm("_timestamp", kafka)]
    spec = PartitionSpec(tuple(kafka_terms + [level.term for level in fields]))
    assert PartitionSpec.parse(spec.text) == spec
    extra = 1 if sliced else 0
    topic = pa.array(topics[:1] * extra + topics, pa.string())
    columns = {
        "_topic": topic.dictionary_encode() if dictionary_topic else topic,
        "_offset": pa.array(range(-extra, rows), pa.int64()),
        "_timestamp": pa.array(stamps[:1] * extra + stamps, pa.timestamp("ms")),
    }
    for level in fields:
        columns[level.term.source] = level.case.build(level.values[:1] * extra + level.values)
    batch = pa.record_batch(columns)
    batch = batch.slice(extra) if sliced else batch

    parts = split_by_partition(batch, spec)
    directories = [d for d, _ in parts]
    assert len(set(directories)) == len(directories) and all(is_valid_directory(d) for d in directories)
    seen: list[int] = []
    for directory, part in parts:
        assert part.schema == batch.schema
        offsets = part["_offset"].to_pylist()
        assert offsets == sorted(offsets)  # the batch's order, kept inside each part
        for row in offsets:
            segments = [kafka_segment(term, stamps[row]) for term in kafka_terms]
            segments += [reference_segment(level.term, level.case, level.values[row]) for level in fields]
            assert directory == "/".join([topics[row], *segments]), (row, level.case.name)
        seen += offsets
    assert sorted(seen) == list(range(rows))
    if len(parts) == 1:
        assert parts[0][1] is batch  # one directory: the batch itself, uncopied


def fixed_values(case: Case) -> list[Any]:
    values = {
        "integer": [0, -1, 1, -11, 9, 127, -128], "string": ["", "null", "a/b=c%", "日本語テキスト", "abc", "ab"],
        "binary": [b"\x00\x01\xff", b"abc", b"zzz"], "boolean": [True, False, True],
        "date": [0, -1, 19_000, -25_000],
    }.get(case.kind)
    if values is None:  # timestamps: around the epoch, in the unit's own ticks, and a recent one
        per = UNITS[case.name.split("[")[1].split(",")[0]]
        values = [0, -1, 1, per * 3_600 - 1, -per * 86_400 - 1, per * 1_700_000_000 + per // 3]
    if case.name == "fixed_size_binary[3]":
        values = [v.ljust(3, b"-")[:3] for v in values]
    return values


@pytest.mark.parametrize(("case", "transform", "parameter"), PAIRS,
                         ids=[f"{c.name}-{t.value}{p or ''}" for c, t, p in PAIRS])
def test_each_type_under_each_transform_it_takes(case: Case, transform: Transform, parameter: int | None) -> None:
    """Every accepted pair, on fixed values (the property above samples them)."""
    term = PartitionTerm("f", transform, parameter)
    values = fixed_values(case)
    batch = pa.record_batch({"_offset": pa.array(range(len(values)), pa.int64()), "f": case.build(values)})
    got = {o: d for d, part in split_by_partition(batch, PartitionSpec((term,)), "t") for o in part["_offset"].to_pylist()}
    assert got == {row: f"t/{reference_segment(term, case, value)}" for row, value in enumerate(values)}


# --- refusals --------------------------------------------------------------------------------------------

OTHER_TYPES = [
    (pa.uint8(), [1, 2]), (pa.uint64(), [2**64 - 1, 1]), (pa.float64(), [1.5, 2.5]), (pa.float32(), [1.0, 2.0]),
    (pa.decimal128(5, 2), [Decimal("1.50"), Decimal("2.25")]), (pa.time64("us"), [1, 2]), (pa.duration("ms"), [1, 2]),
    (pa.list_(pa.int64()), [[1], [2]]), (pa.struct([("a", pa.int64())]), [{"a": 1}, {"a": 2}]),
]


@pytest.mark.parametrize("transform", list(Transform))
def test_a_type_of_another_kind_is_a_sink_error_never_a_directory(transform: Transform) -> None:
    """Accepted exactly when the source's :func:`kind_of` puts the type among the transform's kinds
    (truncate of a boolean or a date, identity of a uint64 or of bytes: refused)."""
    term = PartitionTerm("f", transform, 4 if transform.takes_parameter else None)
    columns = [case.build(fixed_values(case)) for case in CASES]
    columns += [pa.array(values, arrow_type) for arrow_type, values in OTHER_TYPES]
    for column in columns:
        batch = pa.record_batch({"f": column})
        kind = kind_of(column.type)
        if kind is not None and kind.value in transform.kinds:
            assert split_by_partition(batch, PartitionSpec((term,)), "t")
        else:
            with pytest.raises(SinkError, match=rf"partition-by {re.escape(term.text)}: f is .*, which "
                                                rf"{transform.value} does not take"):
                split_by_partition(batch, PartitionSpec((term,)), "t")


@pytest.mark.parametrize("text", ["f", "bucket[4](f)", "truncate[3](f)", "day(f)"])
def test_a_null_in_a_field_level_is_a_sink_error(text: str) -> None:
    column = pa.array([dt.date(2024, 1, 1), None]) if "day" in text else pa.array(["a", None])
    with pytest.raises(SinkError, match=r"1 row\(s\) have a null f \(the source should have refused them"):
        split_by_partition(pa.record_batch({"f": column}), PartitionSpec.parse(text), "t")
    in_dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), pa.array(["a", None]))
    with pytest.raises(SinkError, match="have a null f"):  # a null among the dictionary's values
        split_by_partition(pa.record_batch({"f": in_dictionary}), PartitionSpec.parse("f"), "t")


def test_a_null_under_bucket_of_the_kafka_timestamp_is_a_sink_error() -> None:
    batch = pa.record_batch({"_timestamp": pa.array([0, None], pa.timestamp("ms"))})
    with pytest.raises(SinkError, match="null _timestamp"):
        split_by_partition(batch, PartitionSpec.parse("bucket[4](_timestamp)"), "t")
    assert PartitionSpec.parse("bucket[4](_timestamp)").required_fields().startswith("_timestamp:")


def test_a_missing_column_is_a_sink_error() -> None:
    batch = pa.record_batch({"_topic": pa.array(["t"]), "g": pa.array([1])})
    for text in ("f", "bucket[2](f)", "truncate[2](f)", "day(f)", "hour(f)", "g,f"):
        with pytest.raises(SinkError, match=r"partition-by .*\(?f\)?: the rows have no column f"):
            split_by_partition(batch, PartitionSpec.parse(text))


# --- Iceberg's semantics, spelled out ------------------------------------------------------------------

def directories(column: pa.Array, text: str) -> list[str]:
    """Each row's directory (the topic ``t`` left out)."""
    batch = pa.record_batch({"_offset": pa.array(range(len(column)), pa.int64()), "f": column})
    rows = {o: d for d, part in split_by_partition(batch, PartitionSpec.parse(text), "t")
            for o in part["_offset"].to_pylist()}
    return [rows[row].removeprefix("t/") for row in range(len(column))]


def test_truncate_of_negative_integers_floors() -> None:
    values = [-1, -10, -11, 0, 9, 10, -128, 127]
    expected = [-10, -10, -20, 0, 0, 10, -130, 120]
    assert [TruncateTransform(10).transform(LongType())(v) for v in values] == expected
    for arrow_type in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
        assert directories(pa.array(values, arrow_type), "truncate[10](f)") == [f"f_trunc={v}" for v in expected]


def test_truncate_of_strings_counts_code_points_and_of_bytes_counts_bytes() -> None:
    assert directories(pa.array(["héllo", "日本語テキスト", "ab", "\U0001F600\U0001F601"]), "truncate[3](f)") == [
        "f_trunc=h%C3%A9l", "f_trunc=%E6%97%A5%E6%9C%AC%E8%AA%9E", "f_trunc=ab", "f_trunc=%F0%9F%98%80%F0%9F%98%81"]
    assert directories(pa.array(["héllo".encode()], pa.binary()), "truncate[2](f)") == ["f_trunc=h%C3"]


def test_bucket_hashes_integers_as_longs_and_timestamps_as_micros() -> None:
    """Iceberg hashes an int as a long, a date as its days, a timestamp of any unit as micros (a
    nanosecond one floored: -1 ns is -1 us, not 0)."""
    reference = BucketTransform(16).transform(LongType())
    for arrow_type in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
        assert directories(pa.array([34, -7], arrow_type), "bucket[16](f)") == [
            f"f_bucket={reference(34)}", f"f_bucket={reference(-7)}"]
    assert directories(pa.array([17_486], pa.int32()).view(pa.date32()), "bucket[16](f)") == [
        f"f_bucket={BucketTransform(16).transform(DateType())(17_486)}"]
    stamps = BucketTransform(1000).transform(TimestampType())
    for unit, per in UNITS.items():
        ticks = [-1, 0, 1, -per - 1, 1_700_000_000 * per + per // 3]
        got = directories(pa.array(ticks, pa.int64()).cast(pa.timestamp(unit, "UTC")), "bucket[1000](f)")
        assert got == [f"f_bucket={stamps(t * 1_000_000 // per)}" for t in ticks], unit
    assert directories(pa.array([-1], pa.timestamp("ns")), "bucket[1000](f)") == [f"f_bucket={stamps(-1)}"]
    assert stamps(-1) != stamps(0)


def test_day_and_hour_of_a_field_are_utc() -> None:
    stamp = dt.datetime(2024, 3, 1, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=5)))  # 2024-02-29 20:30 UTC
    for unit in UNITS:
        column = pa.array([stamp], pa.timestamp(unit, "Asia/Karachi"))
        assert directories(column, "day(f)") == ["f_day=2024-02-29"]
        assert directories(column, "hour(f)") == ["f_hour=2024-02-29-20"]
    assert directories(pa.array([-1], pa.timestamp("ns")), "day(f),hour(f)") == [
        "f_day=1969-12-31/f_hour=1969-12-31-23"]
    assert directories(pa.array([dt.date(2024, 2, 29)], pa.date64()), "day(f)") == ["f_day=2024-02-29"]
    assert directories(pa.array([dt.date(2024, 2, 29)], pa.date32()), "f") == ["f=2024-02-29"]


def test_identity_of_booleans_and_keys_without_leading_underscores() -> None:
    assert directories(pa.array([True, False]), "f") == ["f=true", "f=false"]
    batch = pa.record_batch({"_key": pa.array([b"k"]), "_partition": pa.array([3], pa.int32())})
    assert split_by_partition(batch, PartitionSpec.parse("_partition,truncate[1](_key)"), "t")[0][0] == \
        "t/partition=3/key_trunc=k"


def test_the_fast_path_returns_the_batch_itself() -> None:
    batch = pa.record_batch({
        "_topic": pa.array(["t"] * 3).dictionary_encode(),
        "_timestamp": pa.array([0, 1, 2], pa.timestamp("ms")),
        "region": pa.array(["eu"] * 3).dictionary_encode(),
        "customer_id": pa.array([7, 7, 7], pa.int64()),
        "name": pa.array(["abcd", "abce", "abcf"]),
    })
    spec = PartitionSpec.parse("day(_timestamp),region,bucket[16](customer_id),truncate[3](name)")
    ((directory, part),) = split_by_partition(batch, spec)
    bucket = BucketTransform(16).transform(LongType())(7)
    assert directory == f"t/dt=1970-01-01/region=eu/customer_id_bucket={bucket}/name_trunc=abc"
    assert part is batch
    two = split_by_partition(batch, PartitionSpec.parse("truncate[4](name)"))
    assert [d for d, _ in two] == ["t/name_trunc=abcd", "t/name_trunc=abce", "t/name_trunc=abcf"]


# --- the encoding and what readers decode -------------------------------------------------------------

@pytest.mark.parametrize(("value", "encoded"), [
    (0, "0"), (-12, "-12"), (True, "true"), (False, "false"),
    ("eu-west_1.~", "eu-west_1.~"), ("", ""), ("a b", "a%20b"), ("a/b", "a%2Fb"), ("k=v", "k%3Dv"),
    ("100%", "100%25"), ("é", "%C3%A9"), ("a+b", "a%2Bb"), (".", "."), ("..", ".."),
    ("null", "%6Eull"), ("NULL", "%4EULL"), ("nUlL", "%6EUlL"), ("nullx", "nullx"),
    (b"\x00\xff/", "%00%FF%2F"), (b"null", "%6Eull"),
])
def test_encode_value(value: object, encoded: str) -> None:
    assert encode_value(value) == encoded


@pytest.mark.parametrize("value", [1.5, None, dt.date(2024, 1, 1), [1]])
def test_encode_value_refuses_what_cannot_name_a_directory(value: object) -> None:
    with pytest.raises(SinkError, match="cannot name a directory"):
        encode_value(value)


READ_BACK = ["", "a b", "a/b", "k=v", "100%", "%41", "é日本", "\U0001F600", "~._-", "a+b", "?#&;", "\\", "null",
             "NULL", "Null", "nan", "none", "1", "01", "-3", ".", "..", "'", '"', "a\tb", "x\ny"]


def _write_partitioned(tmp_path: Path, batch: pa.RecordBatch, spec: PartitionSpec, drop: list[str]) -> Path:
    root = tmp_path / "lake"
    for directory, part in split_by_partition(batch, spec):
        (root / directory).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_batches([part]).drop_columns(drop), root / directory / "part.parquet")
    return root / "t"


def test_pyarrow_and_duckdb_read_the_encoded_values_back(tmp_path: Path) -> None:
    batch = pa.record_batch({
        "_topic": pa.array(["t"] * len(READ_BACK)).dictionary_encode(),
        "row": pa.array(range(len(READ_BACK)), pa.int64()),
        "f": pa.array(READ_BACK),
        "n": pa.array(range(-3, len(READ_BACK) - 3), pa.int64()),
        "d": pa.array([dt.date(1969, 12, 31)] * len(READ_BACK)),
    })
    root = _write_partitioned(tmp_path, batch, PartitionSpec.parse("f,truncate[2](n),d"), ["_topic", "f", "n", "d"])
    expected = sorted(zip(range(len(READ_BACK)), READ_BACK, [v - v % 2 for v in range(-3, len(READ_BACK) - 3)],
                          [dt.date(1969, 12, 31)] * len(READ_BACK), strict=True))

    hive = ds.partitioning(pa.schema([("f", pa.string()), ("n_trunc", pa.int64()), ("d", pa.date32())]), flavor="hive")
    table = ds.dataset(root, format="parquet", partitioning=hive).to_table()
    assert sorted(zip(*(table[c].to_pylist() for c in ("row", "f", "n_trunc", "d")), strict=True)) == expected

    read = duckdb.sql(
        f"select row, f, n_trunc, d from read_parquet('{root}/**/*.parquet', hive_partitioning=true, "
        "hive_types={'f': 'VARCHAR', 'n_trunc': 'BIGINT', 'd': 'DATE'}) order by row").fetchall()
    assert read == expected


def test_readers_read_bytes_and_time_levels_back(tmp_path: Path) -> None:
    stamps = [dt.datetime(2024, 2, 29, 23, 59), dt.datetime(1969, 12, 31, 0, 1)]
    batch = pa.record_batch({
        "_topic": pa.array(["t", "t"]),
        "row": pa.array([0, 1], pa.int64()),
        "b": pa.array([b"a/b", b"%zz"], pa.binary()),
        "ts": pa.array(stamps, pa.timestamp("us", "UTC")),
    })
    root = _write_partitioned(tmp_path, batch, PartitionSpec.parse("truncate[8](b),day(ts)"), ["_topic", "b", "ts"])
    hive = ds.partitioning(pa.schema([("b_trunc", pa.string()), ("ts_day", pa.date32())]), flavor="hive")
    table = ds.dataset(root, format="parquet", partitioning=hive).to_table().sort_by("row")
    assert table["b_trunc"].to_pylist() == ["a/b", "%zz"]
    assert table["ts_day"].to_pylist() == [dt.date(2024, 2, 29), dt.date(1969, 12, 31)]
    read = duckdb.sql(
        f"select b_trunc, ts_day from read_parquet('{root}/**/*.parquet', hive_partitioning=true, "
        "hive_types={'b_trunc': 'VARCHAR', 'ts_day': 'DATE'}) order by row").fetchall()
    assert read == [("a/b", dt.date(2024, 2, 29)), ("%zz", dt.date(1969, 12, 31))]


def test_a_directory_name_past_what_a_file_system_takes_is_a_sink_error() -> None:
    """Identity values are bounded by the source (required-fields <=N); a wide truncate of
    multi-byte text is not, and must stop with a line saying what to change, not an OSError."""
    wide = PartitionSpec.parse("truncate[40](name)")
    batch = pa.record_batch({"_topic": pa.array(["t"]), "name": pa.array(["€" * 40])})
    with pytest.raises(SinkError, match=r"is 371 bytes, more than the 255 a file name may have: partition by a "
                                        r"narrower truncate\[W\] or a bucket\[N\]"):
        split_by_partition(batch, wide)
    narrow = PartitionSpec.parse("truncate[20](name)")  # 20 characters of at most 4 bytes, encoded: always fits
    assert [d for d, _ in split_by_partition(batch, narrow)] == ["t/name_trunc=" + "%E2%82%AC" * 20]
