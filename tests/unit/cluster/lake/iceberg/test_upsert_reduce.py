"""reduce_changes: one epoch's change rows of a keyed table reduced to touched keys and new rows."""
from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.iceberg.upsert import (
    KeyConflict,
    keyed_arrow_schema,
    keyed_schema,
    reduce_changes,
    without_op,
)


def changes(ids: list[object], ops: list[str], offsets: list[int], partitions: list[int] | None = None,
            values: list[str | None] | None = None, **extra: list[object]) -> pa.Table:
    count = len(ids)
    columns: dict[str, object] = {
        "id": ids,
        "_op": ops,
        "_topic": pa.array(["t"] * count).dictionary_encode(),
        "_partition": pa.array(partitions or [0] * count, pa.int32()),
        "_offset": pa.array(offsets, pa.int64()),
        "v": values or [f"v{o}" for o in offsets],
    }
    columns.update(extra)
    return pa.table(columns)


def state(reduced_rows: pa.Table, keys: tuple[str, ...] = ("id",)) -> dict[object, str]:
    return {tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]: row["v"]
            for row in reduced_rows.to_pylist()}


def test_the_last_change_of_a_key_by_offset_wins_whatever_the_row_order() -> None:
    rows = changes([1, 2, 1, 1], ["c", "c", "u", "u"], [5, 1, 3, 9])  # offsets out of order
    reduced = reduce_changes(rows, ["id"])
    assert state(reduced.upserts) == {1: "v9", 2: "v1"}
    assert sorted(reduced.touched.column("id").to_pylist()) == [1, 2]
    assert reduced.deleted == 0
    assert "_op" not in reduced.upserts.column_names
    assert {"_topic", "_partition", "_offset", "v"} <= set(reduced.upserts.column_names)
    assert not pa.types.is_dictionary(reduced.upserts.schema.field("_topic").type)


def test_a_winning_delete_removes_the_key_and_counts() -> None:
    reduced = reduce_changes(changes([1, 2, 1], ["c", "c", "d"], [1, 2, 3], values=["a", "b", None]), ["id"])
    assert state(reduced.upserts) == {2: "b"}
    assert sorted(reduced.touched.column("id").to_pylist()) == [1, 2]
    assert reduced.deleted == 1


def test_delete_then_recreate_within_one_epoch_keeps_the_new_row() -> None:
    reduced = reduce_changes(changes([7, 7, 7], ["c", "d", "c"], [1, 2, 3], values=["old", None, "new"]), ["id"])
    assert state(reduced.upserts) == {7: "new"} and reduced.deleted == 0


def test_a_delete_of_an_unknown_key_touches_it_and_upserts_nothing() -> None:
    reduced = reduce_changes(changes([4], ["d"], [10], values=[None]), ["id"])
    assert reduced.upserts.num_rows == 0 and reduced.touched.column("id").to_pylist() == [4]


def test_keys_in_different_partitions_are_independent() -> None:
    reduced = reduce_changes(changes([1, 2, 1, 2], ["c", "c", "u", "r"], [100, 1, 101, 2], [0, 1, 0, 1]), ["id"])
    assert state(reduced.upserts) == {1: "v101", 2: "v2"}


def test_a_key_in_two_partitions_within_one_epoch_is_refused_naming_both() -> None:
    rows = changes([1, 2, 1], ["c", "c", "u"], [1, 2, 3], [0, 0, 3])
    with pytest.raises(KeyConflict, match=r"key id=1 has changes in Kafka partitions 0 and 3 within one epoch"):
        reduce_changes(rows, ["id"])
    assert issubclass(KeyConflict, SinkError)


def test_composite_keys_group_by_every_key_column() -> None:
    rows = changes([1, 1, 1, 2], ["c", "c", "u", "c"], [1, 2, 3, 4], region=["eu", "us", "eu", "eu"])
    reduced = reduce_changes(rows, ["id", "region"])
    assert state(reduced.upserts, ("id", "region")) == {(1, "eu"): "v3", (1, "us"): "v2", (2, "eu"): "v4"}
    assert reduced.touched.column_names == ["id", "region", "_partition", "_offset"] and reduced.touched.num_rows == 3


def test_composite_key_delete_removes_only_that_pair() -> None:
    rows = changes([1, 1, 1], ["c", "c", "d"], [1, 2, 3], region=["eu", "us", "us"])
    reduced = reduce_changes(rows, ["id", "region"])
    assert state(reduced.upserts, ("id", "region")) == {(1, "eu"): "v1"} and reduced.deleted == 1


@pytest.mark.parametrize("keys", [["id"], ["id", "region"]])
def test_a_null_key_is_refused(keys: list[str]) -> None:
    rows = changes([1, None], ["c", "c"], [1, 2], region=["eu", "eu"])
    with pytest.raises(KeyConflict, match="1 change row\\(s\\) have a null upsert key id"):
        reduce_changes(rows, keys)
    rows = changes([1, 2], ["c", "c"], [1, 2], region=["eu", None])
    if len(keys) > 1:
        with pytest.raises(KeyConflict, match="null upsert key region"):
            reduce_changes(rows, keys)


def test_missing_columns_are_named() -> None:
    rows = changes([1], ["c"], [1]).drop_columns(["_op"])
    with pytest.raises(SinkError, match="lack column\\(s\\) _op"):
        reduce_changes(rows, ["id"])
    with pytest.raises(SinkError, match="lack column\\(s\\) sku"):
        reduce_changes(changes([1], ["c"], [1]), ["sku"])


def test_an_empty_epoch_reduces_to_nothing() -> None:
    reduced = reduce_changes(changes([], [], []).cast(changes([1], ["c"], [1]).schema), ["id"])
    assert reduced.touched.num_rows == 0 and reduced.upserts.num_rows == 0 and reduced.deleted == 0


def test_many_keys_reduce_batched() -> None:
    count = 100_000
    ids = [i % 1000 for i in range(count)]
    reduced = reduce_changes(changes(ids, ["u"] * count, list(range(count))), ["id"])
    assert reduced.upserts.num_rows == 1000
    assert state(reduced.upserts)[999] == f"v{count - 1}"


def test_keyed_schemas_drop_op_and_require_the_keys() -> None:
    schema = changes([1], ["c"], [1]).schema
    assert without_op(schema).names == ["id", "_topic", "_partition", "_offset", "v"]
    keyed = keyed_arrow_schema(schema, ["id"])
    assert "_op" not in keyed.names and not keyed.field("id").nullable and keyed.field("v").nullable
    with pytest.raises(SinkError, match="upsert key sku is not a column"):
        keyed_arrow_schema(schema, ["sku"])
    iceberg = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False),
                     NestedField(3, "s", StructType(NestedField(4, "x", LongType())), required=False))
    table_schema = keyed_schema(iceberg, ["id"])
    assert table_schema.identifier_field_names() == {"id"} and table_schema.find_field("id").required
    assert not table_schema.find_field("v").required
    with pytest.raises(SinkError, match="upsert key s must be a top-level column of a primitive type"):
        keyed_schema(iceberg, ["s"])


def test_a_key_in_two_topics_within_one_epoch_is_refused_naming_both() -> None:
    """Two topics routed into one table: the same partition number of two topics is two partitions."""
    rows = changes([1, 1], ["c", "u"], [5, 1], [0, 0])
    rows = rows.set_column(rows.schema.get_field_index("_topic"), "_topic", pa.array(["a", "b"]))
    with pytest.raises(KeyConflict, match=r"key id=1 has changes in Kafka partitions a:0 and b:0 within one epoch"):
        reduce_changes(rows, ["id"])


def test_one_topic_of_several_keeps_its_keys_order() -> None:
    rows = changes([1, 2, 1], ["c", "c", "u"], [1, 1, 2], [0, 0, 0])
    rows = rows.set_column(rows.schema.get_field_index("_topic"), "_topic", pa.array(["a", "b", "a"]))
    assert state(reduce_changes(rows, ["id"]).upserts) == {1: "v2", 2: "v1"}
