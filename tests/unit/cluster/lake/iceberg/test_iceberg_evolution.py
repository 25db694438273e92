"""Schema evolution per Iceberg's rules: the pure plan (every widening, every refusal, nested,
optional, mixed versions) and its steps applied to a real table on an embedded SQLite catalog."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from laminar_kafka.cluster.lake.iceberg.evolution import (
    AddField,
    Conflict,
    Evolution,
    MakeOptional,
    WidenField,
    apply_evolution,
    plan_evolution,
    widens,
)
from laminar_kafka.cluster.lake.iceberg.tables import iceberg_schema_of


def arrow(*fields: pa.Field | tuple[str, pa.DataType]) -> Schema:
    """The Iceberg schema of Arrow fields (nullable unless given as a non-nullable ``pa.field``)."""
    return iceberg_schema_of(pa.schema(list(fields)))


def required(name: str, data_type: pa.DataType) -> pa.Field:
    return pa.field(name, data_type, nullable=False)


def plan(table: Schema, *files: Schema) -> Evolution:
    return plan_evolution(table, list(files))


# --- widening and narrower files --------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "widened"), [
    (pa.int32(), pa.int64(), (IntegerType(), LongType())),
    (pa.float32(), pa.float64(), (FloatType(), DoubleType())),
    (pa.decimal128(5, 2), pa.decimal128(9, 2), (DecimalType(5, 2), DecimalType(9, 2))),
    (pa.decimal128(9, 2), pa.decimal128(38, 2), (DecimalType(9, 2), DecimalType(38, 2))),
])
def test_a_wider_type_widens_the_column_and_a_narrower_file_changes_nothing(
        old: pa.DataType, new: pa.DataType, widened: tuple[object, object]) -> None:
    assert plan(arrow(("n", old)), arrow(("n", new))) == Evolution(steps=(WidenField(("n",), *widened),))  # type: ignore[arg-type]
    assert plan(arrow(("n", new)), arrow(("n", old))) == Evolution()  # an older writer's file: read widened


def test_the_same_schema_changes_nothing() -> None:
    schema = arrow(required("id", pa.int64()), ("s", pa.struct([("x", pa.string())])), ("l", pa.list_(pa.int32())))
    assert plan(schema, schema, schema) == Evolution()


@pytest.mark.parametrize(("old", "new", "table_type", "file_type"), [
    (pa.string(), pa.int32(), "string", "int"),
    (pa.int32(), pa.string(), "int", "string"),
    (pa.int64(), pa.string(), "long", "string"),
    (pa.int32(), pa.float64(), "int", "double"),  # not an Iceberg promotion
    (pa.int64(), pa.float64(), "long", "double"),
    (pa.float64(), pa.decimal128(9, 2), "double", "decimal(9, 2)"),
    (pa.bool_(), pa.int32(), "boolean", "int"),
    (pa.string(), pa.binary(), "string", "binary"),  # pyiceberg's reader allows it; the spec does not
    (pa.binary(), pa.string(), "binary", "string"),
    (pa.date32(), pa.timestamp("us"), "date", "timestamp"),
    (pa.decimal128(5, 2), pa.decimal128(9, 3), "decimal(5, 2)", "decimal(9, 3)"),  # a scale change
    (pa.decimal128(9, 3), pa.decimal128(5, 2), "decimal(9, 3)", "decimal(5, 2)"),
    (pa.decimal128(9, 2), pa.decimal128(9, 4), "decimal(9, 2)", "decimal(9, 4)"),
])
def test_any_other_primitive_change_is_one_conflict(old: pa.DataType, new: pa.DataType, table_type: str,
                                                    file_type: str) -> None:
    assert plan(arrow(("n", old)), arrow(("n", new))) == Evolution(conflict=Conflict("n", table_type, file_type, 0))


def test_widens_is_exactly_icebergs_promotions() -> None:
    assert widens(IntegerType(), LongType()) and widens(FloatType(), DoubleType())
    assert widens(DecimalType(5, 2), DecimalType(6, 2))
    assert not widens(LongType(), IntegerType()) and not widens(DoubleType(), FloatType())
    assert not widens(DecimalType(5, 2), DecimalType(5, 2)) and not widens(DecimalType(5, 2), DecimalType(9, 3))
    assert not widens(IntegerType(), IntegerType()) and not widens(StringType(), LongType())


# --- nesting -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "path", "file_type"), [
    (pa.struct([("x", pa.int32())]), pa.string(), "s", "string"),
    (pa.list_(pa.list_(pa.int32())), pa.list_(pa.int32()), "s.element", "int"),
    (pa.string(), pa.struct([("x", pa.int32())]), "s", "struct<x: int>"),
    (pa.list_(pa.int32()), pa.map_(pa.string(), pa.int32()), "s", "map<string, int>"),
    (pa.struct([("x", pa.int32())]), pa.struct([("x", pa.string())]), "s.x", "string"),
    (pa.list_(pa.int64()), pa.list_(pa.string()), "s.element", "string"),
    (pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.string()), "s.value", "string"),
    (pa.map_(pa.int32(), pa.int32()), pa.map_(pa.int64(), pa.int32()), "s.key", "long"),  # a key never changes
    (pa.list_(pa.struct([("y", pa.int32())])), pa.list_(pa.struct([("y", pa.bool_())])), "s.element.y", "boolean"),
])
def test_a_nested_conflict_names_the_fields_full_path(old: pa.DataType, new: pa.DataType, path: str,
                                                      file_type: str) -> None:
    conflict = plan(arrow(("s", old)), arrow(("s", new))).conflict
    assert conflict is not None
    assert (conflict.path, conflict.file_type) == (path, file_type)


def test_a_nesting_change_shows_both_types_without_field_ids() -> None:
    conflict = plan(arrow(("s", pa.struct([("x", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.int64()))]))),
                    arrow(("s", pa.string()))).conflict
    assert conflict == Conflict("s", "struct<x: list<int>, m: map<string, long>>", "string", 0)


def test_nested_fields_widen_at_any_depth() -> None:
    table = arrow(("s", pa.struct([("x", pa.int32()), ("t", pa.struct([("f", pa.float32())]))])),
                  ("l", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.decimal128(4, 1))))
    file = arrow(("s", pa.struct([("x", pa.int64()), ("t", pa.struct([("f", pa.float64())]))])),
                 ("l", pa.list_(pa.int64())), ("m", pa.map_(pa.string(), pa.decimal128(10, 1))))
    assert plan(table, file).steps == (
        WidenField(("s", "x"), IntegerType(), LongType()),
        WidenField(("s", "t", "f"), FloatType(), DoubleType()),
        WidenField(("l", "element"), IntegerType(), LongType()),
        WidenField(("m", "value"), DecimalType(4, 1), DecimalType(10, 1)),
    )
    assert plan(file, table) == Evolution()


def test_new_fields_are_added_optional_at_any_depth_with_their_whole_subtree() -> None:
    table = arrow(required("id", pa.int32()), required("s", pa.struct([required("x", pa.int32())])),
                  ("l", pa.list_(pa.struct([("y", pa.int32())]))))
    file = arrow(required("id", pa.int32()),
                 required("s", pa.struct([required("x", pa.int32()), required("z", pa.string())])),
                 ("l", pa.list_(pa.struct([("y", pa.int32()), ("w", pa.bool_())]))),
                 required("c", pa.struct([required("a", pa.int32())])))
    steps = plan(table, file).steps
    assert [step.path for step in steps] == [("s", "z"), ("l", "element", "w"), ("c",)]
    added = steps[-1]
    assert isinstance(added, AddField) and isinstance(added.field_type, StructType)
    assert added.field_type.fields[0].optional  # the whole new subtree is optional
    assert all(isinstance(step, AddField) for step in steps)


# --- optional ----------------------------------------------------------------------------------


def test_a_field_made_nullable_or_dropped_becomes_optional() -> None:
    table = arrow(required("id", pa.int32()), required("name", pa.string()), required("gone", pa.int32()),
                  required("s", pa.struct([required("x", pa.int32()), required("y", pa.int32())])),
                  required("l", pa.field("l", pa.list_(pa.field("item", pa.int32(), nullable=False))).type))
    file = arrow(required("id", pa.int32()), ("name", pa.string()),
                 required("s", pa.struct([required("x", pa.int32())])), required("l", pa.list_(pa.int32())))
    assert plan(table, file).steps == (
        MakeOptional(("name",)), MakeOptional(("gone",)), MakeOptional(("s", "y")), MakeOptional(("l", "element")),
    )


def test_widened_and_made_optional_in_one_step_each() -> None:
    assert plan(arrow(required("id", pa.int32())), arrow(("id", pa.int64()))).steps == (
        WidenField(("id",), IntegerType(), LongType()), MakeOptional(("id",)),
    )


def test_an_identifier_field_stays_required() -> None:
    table = Schema(NestedField(1, "k", LongType(), required=True), NestedField(2, "v", StringType(), required=True),
                   identifier_field_ids=[1])
    assert plan(table, arrow(("k", pa.int64()), ("v", pa.string()))).steps == (MakeOptional(("v",)),)
    assert plan(table, arrow(("v", pa.string()))).steps == (MakeOptional(("v",)),)


# --- several schema versions in one epoch ------------------------------------------------------


V1 = arrow(required("id", pa.int32()), required("amount", pa.float32()), required("price", pa.decimal128(5, 2)))
V2 = arrow(required("id", pa.int64()), required("amount", pa.float64()), required("price", pa.decimal128(9, 2)),
           ("note", pa.string()))
V2_STEPS = (
    WidenField(("id",), IntegerType(), LongType()),
    WidenField(("amount",), FloatType(), DoubleType()),
    WidenField(("price",), DecimalType(5, 2), DecimalType(9, 2)),
    AddField(("note",), StringType()),
)


def test_mixed_versions_evolve_once_to_their_union_in_any_order() -> None:
    assert plan(V1, V1, V2).steps == V2_STEPS
    assert plan(V1, V2, V1, V2).steps == V2_STEPS
    assert plan(V1, V2).steps == V2_STEPS


def test_a_new_field_of_two_versions_takes_the_wider_type() -> None:
    evolution = plan(V1, arrow(("extra", pa.int32())), arrow(("extra", pa.int64())))
    assert AddField(("extra",), LongType()) in evolution.steps


def test_a_conflict_between_two_files_names_the_second_file_and_says_the_epoch_evolved_it() -> None:
    evolution = plan(V1, V2, arrow(required("id", pa.string())))
    assert evolution == Evolution(conflict=Conflict("id", "long", "string", 1, evolved=True))
    assert evolution.conflict is not None
    assert evolution.conflict.describe("pipe.orders", "file orders/f.parquet", "the file") == (
        "iceberg table pipe.orders cannot take file orders/f.parquet: column id is long in the table as "
        "this epoch's other files evolve it but string in the file")
    conflict = plan(V1, arrow(("extra", pa.int32())), arrow(("extra", pa.string()))).conflict
    assert conflict == Conflict("extra", "int", "string", 1, evolved=True)


def test_a_conflict_line_names_table_column_and_both_types() -> None:
    conflict = plan(V2, arrow(("id", pa.string()))).conflict
    assert conflict is not None
    assert conflict.describe("pipe.orders", "the records", "the records") == (
        "iceberg table pipe.orders cannot take the records: column id is long in the table but string in the records")


# --- applied to a real table -------------------------------------------------------------------


def _table_of(tmp_path: Path, schema: Schema):  # type: ignore[no-untyped-def]
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=str(tmp_path))
    catalog.create_namespace("n")
    return catalog.create_table("n.t", schema=schema, location=str(tmp_path / "t"))


def test_the_steps_apply_in_one_schema_update_and_then_the_table_takes_every_file(tmp_path: Path) -> None:
    table_schema = arrow(
        required("id", pa.int32()), ("s", pa.struct([required("x", pa.int32())])),
        ("l", pa.list_(pa.field("item", pa.struct([("y", pa.float32())]), nullable=False))),
        ("m", pa.map_(pa.string(), pa.decimal128(5, 2))),
    )
    file = arrow(("id", pa.int64()), ("s", pa.struct([("x", pa.int64()), ("z", pa.string())])),
                 ("l", pa.list_(pa.struct([("y", pa.float64()), ("w", pa.int32())]))),
                 ("m", pa.map_(pa.string(), pa.decimal128(9, 2))), ("note", pa.string()))
    table = _table_of(tmp_path, table_schema)
    evolution = plan(table.schema(), file)
    assert evolution.conflict is None and len(evolution.steps) == 10
    with table.update_schema() as update:
        apply_evolution(update, evolution.steps)
    schema = table.schema()
    assert str(schema.find_field("id")) == "1: id: optional long"
    assert schema.find_field("s.x").optional and str(schema.find_field("s.x").field_type) == "long"
    assert schema.find_field("s.z").optional
    assert isinstance(schema.find_field("l").field_type, ListType)
    assert schema.find_field("l.element").optional and str(schema.find_field("l.element.y").field_type) == "double"
    assert schema.find_field("l.element.w").optional
    assert str(schema.find_field("m.value").field_type) == "decimal(9, 2)"
    assert schema.find_field("note").optional
    assert plan(schema, file, table_schema) == Evolution()  # every version is taken as it is now
