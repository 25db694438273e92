"""Upsert mode: the change rows of one epoch of a keyed table reduced to the table's new rows.

In upsert mode (``upsert-keys`` set, or ``format=debezium-json``) every decoded row carries a string
column ``_op`` (``c`` create, ``u`` update, ``r`` snapshot read, ``d`` delete) and the key columns
filled on every row, deletes included. One epoch's change rows of a table (every node's files) are
reduced here, pure and batched (pyarrow.compute, no per-row Python):

- the last change of each key wins, by ``_offset`` (a key lives in one Kafka partition, so its
  offsets order its changes);
- a key seen in two Kafka partitions within one epoch has no order: the epoch is refused
  (:class:`KeyConflict`, one line naming the key and both partitions), never a silent race;
- a key column holding a null is refused too (a row that cannot be keyed cannot be applied);
- a winning ``d`` removes the key; any other winner is the key's new row, without ``_op``.

The result (:class:`Reduced`) is what the commit applies (:mod:`laminar_kafka.cluster.lake.iceberg.upsert_commit`):
every touched key's old row leaves the table, the upserted rows enter it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.errors import ConfigurationError

__all__ = ["OP_COLUMN", "POSITION", "KeyConflict", "Reduced", "check_keys", "keyed_arrow_schema", "keyed_schema", "reduce_changes",
           "plain", "row_numbers", "without_op"]

#: the change kind column of upsert mode (never a column of the table)
OP_COLUMN = "_op"
DELETE = "d"
#: where a change was read: its Kafka partition and offset
POSITION = ("_partition", "_offset")
_ROW = "__laminar_row"
_SOURCE = "__laminar_source"


class KeyConflict(SinkError):
    """An epoch's change rows cannot be applied: a key in two Kafka partitions, or a null key."""


@dataclass(frozen=True)
class Reduced:
    """One epoch of a keyed table, reduced: ``touched`` holds the key columns of every key the epoch
    changed (each once) with the ``_partition`` and ``_offset`` of its last change, ``upserts`` the
    rows those keys now have (a deleted key has none; no ``_op`` column), ``deleted`` how many touched
    keys the epoch deleted."""

    touched: pa.Table
    upserts: pa.Table
    deleted: int


def without_op(schema: pa.Schema) -> pa.Schema:
    """``schema`` without the ``_op`` column (the table's columns of a change file's schema)."""
    index = schema.get_field_index(OP_COLUMN)
    return schema.remove(index) if index >= 0 else schema


def keyed_arrow_schema(schema: pa.Schema, keys: Sequence[str]) -> pa.Schema:
    """``schema`` without ``_op``, its ``keys`` columns not nullable (Iceberg identifier fields are
    required). Raises :class:`SinkError` naming a key column the schema lacks."""
    schema = without_op(schema)
    for key in keys:
        index = schema.get_field_index(key)
        if index < 0:
            raise SinkError(f"upsert key {key} is not a column of the rows (columns: {', '.join(schema.names)})")
        schema = schema.set(index, schema.field(index).with_nullable(False))
    return schema


def keyed_schema(schema: Schema, keys: Sequence[str]) -> Schema:
    """The Iceberg ``schema`` with ``keys`` as its identifier fields (required). Raises
    :class:`SinkError` for a key that is not a top-level primitive column."""
    ids = []
    fields = []
    by_name = {field.name: field for field in schema.fields}
    for key in keys:
        field = by_name.get(key)
        if field is None or not field.field_type.is_primitive:
            raise SinkError(f"upsert key {key} must be a top-level column of a primitive type")
        ids.append(field.field_id)
    for field in schema.fields:
        if field.field_id in ids and not field.required:
            field = NestedField(field.field_id, field.name, field.field_type, required=True, doc=field.doc)
        fields.append(field)
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=ids)


def row_numbers(count: int) -> pa.Array:
    """``0 .. count-1`` as an int64 array (built without a Python loop)."""
    return pa.array(np.arange(count, dtype=np.int64))


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded (files of several nodes may differ in that)."""
    schema = pa.schema([field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
                        for field in table.schema])
    return table if schema == table.schema else table.cast(schema)


def reduce_changes(changes: pa.Table, keys: Sequence[str]) -> Reduced:
    """Reduce one epoch's change rows of a table (columns: ``keys``, ``_op``, ``_partition``,
    ``_offset`` and the payload) to the touched keys and their new rows. Raises :class:`KeyConflict`
    for a null key value or a key in two Kafka partitions (the message names it), :class:`SinkError`
    when a needed column is missing."""
    missing = [name for name in (*keys, OP_COLUMN, "_partition", "_offset") if name not in changes.column_names]
    if missing:
        raise SinkError(f"change rows lack column(s) {', '.join(missing)} (upsert keys: {', '.join(keys)})")
    changes = plain(changes)
    for key in keys:
        nulls = changes.column(key).null_count
        if nulls:
            raise KeyConflict(f"{nulls} change row(s) have a null upsert key {key}: they cannot be applied")
    if changes.num_rows == 0:
        empty = changes.schema.empty_table()
        return Reduced(empty.select([*keys, *POSITION]), empty.drop_columns([OP_COLUMN]), 0)
    ordered = changes.sort_by([("_offset", "ascending")])
    topics, sources = _sources(ordered)
    ordered = ordered.append_column(_ROW, row_numbers(ordered.num_rows)).append_column(_SOURCE, sources)
    groups = ordered.group_by(list(keys), use_threads=False).aggregate(
        [(_ROW, "max"), (_SOURCE, "min"), (_SOURCE, "max")])
    split = pc.not_equal(groups.column(f"{_SOURCE}_min"), groups.column(f"{_SOURCE}_max"))
    if pc.any(split).as_py():
        first = groups.filter(split).slice(0, 1).to_pylist()[0]
        shown = ", ".join(f"{key}={first[key]!r}" for key in keys)
        raise KeyConflict(f"key {shown} has changes in {_two_partitions(topics, first[f'{_SOURCE}_min'], first[f'{_SOURCE}_max'])} "
                          "within one epoch: their order is unknown, so the epoch is not applied (a key must live in "
                          "one partition)")
    ordered = ordered.drop_columns([_SOURCE])
    last = groups.column(f"{_ROW}_max")
    winners = ordered.take(pc.take(last, pc.sort_indices(last))).drop_columns([_ROW])  # in offset order
    deletes = pc.equal(winners.column(OP_COLUMN), DELETE)
    upserts = winners.filter(pc.invert(deletes)).drop_columns([OP_COLUMN])
    return Reduced(winners.select([*keys, *POSITION]), upserts, pc.sum(deletes).as_py() or 0)


def _sources(changes: pa.Table) -> tuple[list[str], pa.Array]:
    """The topics of ``changes`` and each row's Kafka partition as one int64, ``(topic index << 32) |
    partition`` (rows of several topics may share a table: a key's order holds within one partition
    of one topic only)."""
    partitions = changes.column("_partition").to_numpy().astype(np.int64)
    if "_topic" not in changes.column_names:
        return [], pa.array(partitions)
    topics = changes.column("_topic").combine_chunks().dictionary_encode()
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return topics.dictionary.to_pylist(), pa.array((codes << 32) | partitions)


def _two_partitions(topics: list[str], a: int, b: int) -> str:
    """The two Kafka partitions of a key conflict, as the message names them."""
    if a >> 32 == b >> 32:
        return f"Kafka partitions {a & 0xFFFFFFFF} and {b & 0xFFFFFFFF}"
    first, second = sorted(((topics[a >> 32], a & 0xFFFFFFFF), (topics[b >> 32], b & 0xFFFFFFFF)))
    return f"Kafka partitions {first[0]}:{first[1]} and {second[0]}:{second[1]}"


def check_keys(name: str, identifier_fields: set[str], keys: Sequence[str]) -> None:
    """Raise :class:`ConfigurationError` unless a table's identifier fields are exactly ``keys``
    (none in append mode): a keyed table takes only upserts by its keys, an append-only one none."""
    if identifier_fields == set(keys):
        return
    have = ",".join(sorted(identifier_fields)) or "nothing (append-only)"
    want = ",".join(keys) or "nothing (append mode)"
    raise ConfigurationError(f"iceberg table {name} is keyed by {have}, but setting upsert-keys is {want} here")
