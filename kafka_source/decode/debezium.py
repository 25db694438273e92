"""``format=debezium-json``: Debezium's JSON change events decoded into rows of a table's changes.

An event is ``{"before": row|null, "after": row|null, "op": "c"|"u"|"r"|"d"|"t", ...}``, or the same
inside ``{"schema": ..., "payload": {...}}`` (Kafka Connect's JsonConverter with
``schemas.enable=true``); both may come in one batch. Every other field (``source``, ``ts_ms``,
``schema``...) is ignored. A row's columns are those of :attr:`DebeziumDecoder.row_schema`
(``json-schema``, or inferred from the ``after``/``before`` rows of a sample, typed by Debezium's
``schema`` when the sample carries it: :func:`infer_row_schema`); Debezium's logical types arrive
as their JSON base types (a timestamp as its integer, a decimal as its base64 string).

Rows: ``c``, ``u``, ``r`` are the ``after`` row; ``d`` is a delete whose payload columns are null but
its key fields, taken from ``before`` (else from the record key: :func:`~.changes.fill_keys`). A
tombstone (null value, as Debezium writes after each delete) is a delete keyed by its record key, so
a delete followed by its tombstone deletes the key twice (idempotent). Bad records, each with its
reason: an event without ``op``, an unknown ``op``, ``c``/``u``/``r`` without ``after``, and
``t`` (truncate): a truncate event names no key, so it cannot be applied as changes of keys.

Parsing is batched (:class:`~.json_lines.JsonLines`), as ``format=json`` parses; Python runs over
the bad events only. Pure: no I/O.
"""
from __future__ import annotations

import io
import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.choices import CHANGE_OPS
from laminar_kafka.kafka_source.decode.json_lines import JsonLines

__all__ = ["DebeziumDecoder", "infer_row_schema"]

#: the event a tombstone reads as: a delete with no row (its key comes from the record key)
_TOMBSTONE = b'{"op":"d"}'
_ROW_OPS = pa.array(["c", "u", "r"], type=pa.string())
_ALL_OPS = pa.array(list(CHANGE_OPS), type=pa.string())


class DebeziumDecoder:
    """Decodes Debezium JSON values into the columns of :attr:`row_schema` plus ``_op``."""

    def __init__(self, row_schema: pa.Schema, keys: Sequence[str]) -> None:
        missing = [name for name in keys if name not in row_schema.names]
        if missing:
            raise ConfigurationError(
                f"upsert-keys: {missing[0]} is not a field of the rows (fields: {', '.join(row_schema.names)})"
            )
        self.row_schema = row_schema
        self._keys = tuple(keys)
        self._row = pa.struct([pa.field(f.name, f.type, nullable=True) for f in row_schema])
        change = [pa.field("op", pa.string()), pa.field("before", self._row), pa.field("after", self._row)]
        self._lines = JsonLines(pa.schema([*change, pa.field("payload", pa.struct(change))]))

    def decode(self, values: list[bytes | None]) -> tuple[list[pa.Array], dict[int, str]]:
        """The row columns and the ``_op`` column (last) of the good events, in order, and the bad
        ones by index with their reason. A delete's key fields are ``before``'s (null without it)."""
        if None in values:
            values = [_TOMBSTONE if value is None else value for value in values]
        table, bad = self._lines.parse(values)
        ops, before, after = _unwrapped(table)
        problems = _problems(ops, after)
        if problems:
            kept = [i for i in range(len(values)) if i not in bad]
            bad = {**bad, **{kept[row]: reason for row, reason in problems.items()}}
            keep = pa.array([row not in problems for row in range(len(ops))], type=pa.bool_())
            ops, before, after = ops.filter(keep), before.filter(keep), after.filter(keep)
        deletes = pc.equal(ops, "d")
        columns = pc.if_else(deletes, pa.scalar(None, self._row), after).flatten()
        before_columns = before.flatten()
        for name in self._keys:
            index = self.row_schema.get_field_index(name)
            columns[index] = pc.if_else(deletes, before_columns[index], columns[index])
        return [c.cast(f.type) for c, f in zip(columns, self.row_schema, strict=True)] + [ops], dict(sorted(bad.items()))


def _unwrapped(table: pa.Table) -> tuple[pa.Array, pa.StructArray, pa.StructArray]:
    """``op``, ``before`` and ``after`` of each event, from its ``payload`` when it has one."""
    payload = table.column("payload").combine_chunks()
    wrapped = payload.is_valid()
    ops = pc.if_else(wrapped, payload.field("op"), table.column("op").combine_chunks())
    before = pc.if_else(wrapped, payload.field("before"), table.column("before").combine_chunks())
    after = pc.if_else(wrapped, payload.field("after"), table.column("after").combine_chunks())
    return ops, before, after


def _problems(ops: pa.Array, after: pa.StructArray) -> dict[int, str]:
    """The events (by row) that are no change of a key, with the reason."""
    unknown = pc.invert(pc.fill_null(pc.is_in(ops, value_set=_ALL_OPS), False))
    no_row = pc.and_(pc.fill_null(pc.is_in(ops, value_set=_ROW_OPS), False), pc.is_null(after))
    bad = pc.or_(unknown, no_row)
    if not pc.any(bad).as_py():
        return {}
    problems: dict[int, str] = {}
    for row in pc.indices_nonzero(bad).to_pylist():
        op = ops[row].as_py()
        if op is None:
            problems[row] = "debezium: the event has no op (not a Debezium change event)"
        elif op == "t":
            problems[row] = "debezium: op 't' (truncate) is not supported: it names no key to delete"
        elif op in CHANGE_OPS:
            problems[row] = f"debezium: op {op!r} without after"
        else:
            problems[row] = f"debezium: unknown op {op!r}"
    return problems


#: Kafka Connect's primitive schema types, as JSON carries their values (``bytes`` is base64 text:
#: left to inference, a string)
_CONNECT_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
}


def infer_row_schema(sample: Sequence[bytes]) -> pa.Schema:
    """The row schema of Debezium events ``sample``: the fields of their ``after`` and ``before``
    rows, typed as the newest ``schema`` wrapper of the sample declares them when it does with a
    primitive Connect type (its logical types as their base types), else inferred as
    ``format=json`` infers them (every field nullable). Runs once per pipeline on a sample (Python
    per event). Raises :class:`ConfigurationError` when no event of the sample has a row."""
    rows: list[bytes] = []
    declared: dict[str, pa.DataType] = {}
    for value in sample:
        try:
            event = json.loads(value)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("payload"), dict):
            declared.update(_declared_types(event.get("schema")))
            event = event["payload"]
        if isinstance(event, dict):
            rows += [json.dumps(event[side]).encode() for side in ("after", "before") if isinstance(event.get(side), dict)]
    if not rows:
        raise ConfigurationError("cannot infer the rows of debezium-json: no event of the sample has after or before")
    try:
        table = pa_json.read_json(io.BytesIO(b"\n".join(rows)))
    except pa.ArrowInvalid as exc:
        raise ConfigurationError(f"cannot infer the rows of debezium-json: {exc}", cause=exc) from exc
    inferred = {f.name: declared.get(f.name, f.type) for f in table.schema}
    extra = {name: kind for name, kind in declared.items() if name not in inferred}  # null in every sampled row
    return pa.schema([pa.field(name, kind, nullable=True) for name, kind in {**inferred, **extra}.items()])


def _declared_types(schema: object) -> dict[str, pa.DataType]:
    """The row fields' Arrow types a Connect envelope schema declares (``{"type": "struct", "fields":
    [{"field": "after", "type": "struct", "fields": [{"field": "id", "type": "int64"}, ...]}, ...]}``):
    the primitive ones only."""
    sides = schema.get("fields") if isinstance(schema, dict) else None
    for side in sides if isinstance(sides, list) else []:
        fields = side.get("fields") if isinstance(side, dict) and side.get("field") in ("after", "before") else None
        if isinstance(fields, list):
            return {
                f["field"]: _CONNECT_TYPES[f["type"]] for f in fields
                if isinstance(f, dict) and isinstance(f.get("field"), str) and f.get("type") in _CONNECT_TYPES
            }
    return {}
