"""Schema versions mixed in one epoch through IcebergOutput.publish: one evolution to the union,
every file added, every value read back by pyiceberg and by DuckDB (promoted by field id)."""
from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.commit import committed_epoch
from laminar_kafka.cluster.lake.iceberg.tables import data_file_count
from tests.duckdb_queries import ICEBERG, connect
from tests.unit.cluster.iceberg_fakes import Lake, rows

D = decimal.Decimal


def _required(table: pa.Table, *names: str) -> pa.Table:
    return table.cast(pa.schema([f.with_nullable(False) if f.name in names else f for f in table.schema]))


def v1(offsets: list[int]) -> pa.Table:
    """Writer version 1: id int, amount float, price decimal(5,2), all required."""
    count = len(offsets)
    return _required(rows(
        "orders", 0, offsets, id=pa.array(offsets, pa.int32()), amount=pa.array([1.5] * count, pa.float32()),
        price=pa.array([D("123.45")] * count, pa.decimal128(5, 2)),
    ), "id", "amount", "price")


def v2(offsets: list[int]) -> pa.Table:
    """Version 2: id long, amount double, price decimal(9,2), note optional string."""
    count = len(offsets)
    return _required(rows(
        "orders", 0, offsets, id=pa.array([2**40 + o for o in offsets], pa.int64()),
        amount=pa.array([1e300] * count, pa.float64()), price=pa.array([D("1234567.89")] * count, pa.decimal128(9, 2)),
        note=pa.array([f"n{o}" for o in offsets]),
    ), "id", "amount", "price")


EXPECTED_V1 = {"id": 0, "amount": 1.5, "price": D("123.45"), "note": None}


def _rows_of(lake: Lake, output: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[str, str]]]:
    """The rows as pyiceberg and DuckDB read them (payload columns by ``_offset``), and DuckDB's types."""
    columns = ["_offset", "id", "amount", "price", "note"]
    table = output.table("orders")
    by_pyiceberg = table.scan(selected_fields=tuple(columns)).to_arrow().sort_by("_offset").to_pylist()
    extensions = Path(lake.root) / "_duckdb_extensions"
    extensions.mkdir()
    with connect(extensions, ICEBERG) as connection:
        scan = f"FROM iceberg_scan('{table.metadata_location}')"
        cursor = connection.execute(f"SELECT {', '.join(columns)} {scan} ORDER BY _offset")
        by_duckdb = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        types = [(name, kind) for name, kind, *_ in connection.execute(f"DESCRIBE SELECT {', '.join(columns)} {scan}").fetchall()]
    return by_pyiceberg, by_duckdb, types


@pytest.mark.parametrize("order", ["v1 first", "v2 first"])
def test_two_versions_in_one_epoch_evolve_the_table_once_and_read_back_through_both_readers(
        tmp_path: Path, order: str) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, v1([0]))
    output = lake.output()
    assert lake.publish(output, 1) == 1
    files = [v1([1, 2]), v2([3, 4])]
    for node, table in enumerate(files if order == "v1 first" else files[::-1], start=1):
        lake.stage(2, table, node=node)
    assert lake.publish(output, 2) == 1
    table = output.table("orders")
    fields = [table.schema().find_field(name) for name in ("id", "amount", "price", "note")]
    assert [(f.name, str(f.field_type), f.required) for f in fields] == [
        ("id", "long", True), ("amount", "double", True), ("price", "decimal(9, 2)", True), ("note", "string", False)]
    assert len(table.snapshots()) == 2 and data_file_count(table) == 3
    assert len(table.metadata.schemas) == 2  # one evolution for the epoch
    by_pyiceberg, by_duckdb, types = _rows_of(lake, output)
    expected = [{**EXPECTED_V1, "_offset": o, "id": o} for o in (0, 1, 2)] + [
        {"_offset": o, "id": 2**40 + o, "amount": 1e300, "price": D("1234567.89"), "note": f"n{o}"} for o in (3, 4)]
    assert by_pyiceberg == expected
    assert by_duckdb == expected
    assert types == [("_offset", "BIGINT"), ("id", "BIGINT"), ("amount", "DOUBLE"), ("price", "DECIMAL(9,2)"),
                     ("note", "VARCHAR")]


def test_a_new_table_takes_mixed_versions_in_its_first_epoch(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, v2([3]), node=1)
    lake.stage(1, v1([0]), node=2)
    output = lake.output()
    assert lake.publish(output, 1) == 1
    by_pyiceberg, by_duckdb, _ = _rows_of(lake, output)
    assert by_pyiceberg == by_duckdb == [
        {**EXPECTED_V1, "_offset": 0},
        {"_offset": 3, "id": 2**40 + 3, "amount": 1e300, "price": D("1234567.89"), "note": "n3"},
    ]


def test_a_version_that_drops_a_required_field_makes_it_optional(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, v1([0]))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, v1([1]).drop_columns(["price"]))
    assert lake.publish(output, 2) == 1
    table = output.table("orders")
    assert table.schema().find_field("price").optional and table.schema().find_field("id").required
    read = table.scan(selected_fields=("_offset", "price")).to_arrow().sort_by("_offset").to_pylist()
    assert read == [{"_offset": 0, "price": D("123.45")}, {"_offset": 1, "price": None}]


@pytest.mark.parametrize(("column", "table_type", "file_type"), [
    (pa.array(["x"]), "long", "string"),
    (pa.array([1.0], pa.float64()), "long", "double"),
])
def test_an_incompatible_version_in_a_mixed_epoch_commits_nothing_in_one_line(
        tmp_path: Path, column: pa.Array, table_type: str, file_type: str) -> None:
    lake = Lake(tmp_path)
    lake.stage(1, v1([0]))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, v2([1]), node=1)
    bad = lake.stage(2, rows("orders", 0, [2], id=column), node=2)
    with pytest.raises(SinkError) as raised:
        lake.publish(output, 2)
    message = str(raised.value)
    assert "\n" not in message
    assert message == (f"iceberg table pipe.orders cannot take file {bad[len('_staging/'):]}: column id is "
                       f"{table_type} in the table as this epoch's other files evolve it but {file_type} in "
                       "the file")
    table = output.table("orders")
    assert committed_epoch(table, "pipe") == 1 and len(table.snapshots()) == 1
    assert str(table.schema().find_field("id").field_type) == "int"  # nothing evolved either


def test_a_narrowing_version_is_refused_only_when_it_is_not_a_promotion(tmp_path: Path) -> None:
    """A file narrower than the table (an older writer version: int into long) is added as it is and
    reads back widened; decimal(9,2) into decimal(9,3) (a scale change) is refused."""
    lake = Lake(tmp_path)
    lake.stage(1, v2([0]))
    output = lake.output()
    lake.publish(output, 1)
    lake.stage(2, v1([1]))
    assert lake.publish(output, 2) == 1
    by_pyiceberg, by_duckdb, _ = _rows_of(lake, output)
    assert by_pyiceberg[1] == by_duckdb[1] == {**EXPECTED_V1, "_offset": 1, "id": 1}
    lake.stage(3, rows("orders", 0, [2], price=pa.array([D("1.234")], pa.decimal128(9, 3))))
    with pytest.raises(SinkError, match=r"column price is decimal\(9, 2\) in the table but decimal\(9, 3\)"):
        lake.publish(output, 3)
