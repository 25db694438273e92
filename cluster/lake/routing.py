"""Rows routed to tables by the ``table-template`` (:mod:`laminar_kafka.cluster.lake.routing_template`).

Pure and batched, no I/O: :func:`route` maps a decoded batch to ``(table, rows)`` groups, each
keeping its rows' order, and the rows it cannot route with the reason of each:

- the topic does not match ``table-topic-regex`` (a ``{topic:N}`` template);
- a ``{field:NAME}`` column is missing, of a type that cannot name a table, or null (the node asks
  the source to refuse such records first, ``required-fields``, so they normally never get here);
- the name made is not a table name, or ``table-allowed`` refuses it.

The work per row is done by ``pyarrow.compute`` (one string join, one dictionary encoding, one
stable sort and one ``take``); Python visits only the distinct topics and the distinct names.
:class:`Router` applies the ``on-bad-record`` policy to what :func:`route` refuses: ``fail`` raises
:class:`~laminar_kafka.cluster.errors.SinkError` naming the first such record, ``skip`` hands the
rows to the rejected stream (:func:`rejected_rows`: ``_rejected/``, the reason in ``error``; the raw
value is not at hand after decoding, so ``value`` is null and ``_key`` is the raw key when the
rows carry it as bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.partition_spec import PartitionSpec
from laminar_kafka.cluster.lake.partitioning import split_by_partition
from laminar_kafka.cluster.lake.routing_template import FieldPart, Literal, TableTemplate, TopicPart, as_name_part
from laminar_kafka.kafka_source.decode.rejected import REJECTED_SCHEMA

__all__ = ["Routed", "Router", "rejected_rows", "route"]

_TOPIC = "_topic"
_KEY = "_key"
_FIELD_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean)


@dataclass(frozen=True)
class Routed:
    """What :func:`route` made of a batch: ``groups`` of ``(table, rows)`` in table-name order, and
    the rows it refused (``refused``, None when none) with one reason each (``reasons``)."""

    groups: tuple[tuple[str, pa.RecordBatch], ...]
    refused: pa.RecordBatch | None = None
    reasons: tuple[str, ...] = ()


def route(batch: pa.RecordBatch, template: TableTemplate) -> Routed:
    """Route ``batch``'s rows by ``template`` (see the module docstring). An empty batch gives no
    group. Raises :class:`SinkError` when the batch has no ``_topic`` column and the template
    reads the topic."""
    rows = batch.num_rows
    if rows == 0:
        return Routed(())
    reason = pa.nulls(rows, pa.string())
    pieces: list[pa.Array | pa.Scalar] = []
    topic_names, topic_codes = _topics(batch, template)
    for part in template.parts:
        if isinstance(part, Literal):
            pieces.append(pa.scalar(part.text))
        elif isinstance(part, TopicPart):
            values = pa.array([template.topic_value(t, part) for t in topic_names], pa.string())
            pieces.append(values.take(topic_codes))
        else:
            column, problem = _field(batch, part)
            pieces.append(column)
            reason = _first(reason, column.is_null(), problem)
    if topic_names:
        problems = pa.array([template.topic_problem(t) or None for t in topic_names], pa.string())
        reason = pc.coalesce(problems.take(topic_codes), reason)
    names = pc.binary_join_element_wise(*pieces, "")
    if isinstance(names, pa.Scalar):  # literal text alone: one table for every row
        names = pa.repeat(names, rows)
    encoded = names.dictionary_encode()
    distinct = [as_name_part(str(n)) for n in encoded.dictionary.to_pylist()]
    tables = sorted(set(distinct))
    problems = pa.array([template.name_problem(n) or None for n in distinct], pa.string())
    reason = pc.coalesce(reason, problems.take(encoded.indices))
    refused_mask = reason.is_valid()
    refused = int(pc.sum(refused_mask).as_py() or 0)
    group_of = np.array([tables.index(n) for n in distinct], np.int64)
    codes = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    keys = group_of[codes] if len(group_of) else np.zeros(rows, np.int64)
    if refused == 0:
        return Routed(_groups(batch, keys, tables))
    kept = pc.invert(refused_mask)
    groups = _groups(batch.filter(kept), keys[kept.to_numpy(zero_copy_only=False)], tables) if refused < rows else ()
    return Routed(groups, batch.filter(refused_mask), tuple(reason.filter(refused_mask).to_pylist()))


def _topics(batch: pa.RecordBatch, template: TableTemplate) -> tuple[list[str], pa.Array]:
    """The distinct topics and each row's index into them (no topics when the template reads none)."""
    reads_topic = any(isinstance(p, TopicPart) for p in template.parts) or template.topic_regex is not None
    index = batch.schema.get_field_index(_TOPIC)
    if index < 0:
        if reads_topic:
            raise SinkError(f"table-template {template.text} reads the topic, but the rows have no {_TOPIC} column")
        return [], pa.array([], pa.int32())
    column = batch.column(index)
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    if column.null_count:
        raise SinkError(f"{_TOPIC} has {column.null_count} null value(s)")
    return [str(t) for t in column.dictionary.to_pylist()], column.indices


def _field(batch: pa.RecordBatch, part: FieldPart) -> tuple[pa.Array, str]:
    """A ``{field:NAME}`` column as strings (null where it cannot name a table) and the reason of
    its nulls."""
    index = batch.schema.get_field_index(part.name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.string()), f"table-template: field {part.name} is missing"
    column = batch.column(index)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if not any(test(column.type) for test in _FIELD_TYPES):
        return (pa.nulls(batch.num_rows, pa.string()),
                f"table-template: field {part.name} is {column.type}, which cannot name a table "
                "(integer, string or boolean)")
    return column.cast(pa.string()), f"table-template: field {part.name} is null"


def _first(reason: pa.Array, mask: pa.Array, text: str) -> pa.Array:
    """``reason``, with ``text`` where ``mask`` holds and no reason was given yet."""
    if not pc.any(mask).as_py():
        return reason
    return pc.coalesce(reason, pc.if_else(mask, pa.scalar(text), pa.scalar(None, pa.string())))


def _groups(batch: pa.RecordBatch, keys: np.ndarray, tables: list[str]) -> tuple[tuple[str, pa.RecordBatch], ...]:
    """Cut ``batch`` by ``keys`` (an index into ``tables`` per row) with one stable sort and one take."""
    rows = batch.num_rows
    if rows == 0:
        return ()
    low, high = int(keys.min()), int(keys.max())
    if low == high:
        return ((tables[low], batch),)
    small = keys.astype(np.int16) if len(tables) <= np.iinfo(np.int16).max else keys  # numpy radix-sorts 16 bits
    order = np.argsort(small, kind="stable")
    ordered = keys[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(ordered)) + 1, [rows]))
    grouped = batch.take(pa.array(order))
    return tuple((tables[int(ordered[start])], grouped.slice(start, end - start))
                 for start, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True))


def rejected_rows(refused: pa.RecordBatch, reasons: tuple[str, ...]) -> pa.RecordBatch:
    """The refused rows as rejected records (:data:`REJECTED_SCHEMA`): where each was in Kafka, its
    key when the rows carry it as bytes, a null value, and the reason. Raises :class:`SinkError`
    when the rows lack ``_topic``, ``_partition`` or ``_offset`` (nothing would say which record)."""
    count = refused.num_rows
    columns = []
    for field in REJECTED_SCHEMA:
        index = refused.schema.get_field_index(field.name)
        if field.name == "error":
            columns.append(pa.array(reasons, pa.string()))
        elif index >= 0 and (field.name != _KEY or pa.types.is_binary(refused.column(index).type)):
            column = refused.column(index)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            columns.append(column.cast(field.type, safe=False))
        elif field.nullable:
            columns.append(pa.nulls(count, field.type))
        else:
            raise SinkError(f"rows refused by the table-template have no {field.name} column to name them by")
    return pa.RecordBatch.from_arrays(columns, schema=REJECTED_SCHEMA)


class Router:
    """The sink's routing: :func:`route` with the ``on-bad-record`` policy (``fail_on_bad``)."""

    def __init__(self, template: TableTemplate, *, fail_on_bad: bool) -> None:
        self.template = template
        self.fail_on_bad = fail_on_bad

    def route(self, batch: pa.RecordBatch) -> tuple[tuple[tuple[str, pa.RecordBatch], ...], pa.RecordBatch | None]:
        """The groups of ``batch`` and its refused rows as rejected records (None: none refused).
        Raises :class:`SinkError` in one line naming the first refused record under ``fail``."""
        routed = route(batch, self.template)
        if routed.refused is None:
            return routed.groups, None
        rejected = rejected_rows(routed.refused, routed.reasons)
        if self.fail_on_bad:
            first = rejected.slice(0, 1).to_pylist()[0]
            raise SinkError(f"record {first['_topic']}:{first['_partition']}@{first['_offset']} cannot be routed: "
                            f"{first['error']} (on-bad-record=fail; skip lands it in _rejected/)")
        return routed.groups, rejected

    def split(self, batch: pa.RecordBatch, spec: PartitionSpec, rejected: pa.RecordBatch | None = None,
              ) -> tuple[list[tuple[str, pa.RecordBatch]], pa.RecordBatch | None]:
        """``(directory, rows)`` pairs of ``batch`` (each under its table, partitioned by ``spec``),
        and the batch's ``rejected`` records (the source's) with its refused rows (see :meth:`route`)
        in one batch ordered by topic, partition and offset, as the records were read. Raises
        :class:`SinkError`."""
        groups, refused = self.route(batch)
        parts = [part for table, rows in groups for part in split_by_partition(rows, spec, table=table)]
        if refused is None or rejected is None or rejected.num_rows == 0:
            return parts, refused if refused is not None else rejected
        both = pa.Table.from_batches([rejected, refused]).sort_by([("_topic", "ascending"), ("_partition", "ascending"),
                                                                   ("_offset", "ascending")])
        return parts, both.combine_chunks().to_batches()[0]
