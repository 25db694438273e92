"""Upsert mode's rows (``upsert-keys``): each row a change of its key, told by its ``_op`` column.

The contract every decoded batch of upsert mode (and of ``format=debezium-json``) keeps:

- a string column ``_op``, never null: ``c`` create, ``u`` update, ``r`` snapshot read, ``d`` delete.
  Under json and the registry formats a record with a value is ``u``, a tombstone ``d``;
- the key fields named by ``upsert-keys`` are filled on every row, deletes included. A delete whose
  row lacks them (a tombstone; a Debezium delete without ``before``) takes them from its Kafka
  record key: a JSON object holding the key fields (Debezium's key, with or without its
  ``schema``/``payload`` wrapper) or, for a single key field, a JSON scalar (for a string field
  also plain UTF-8 text). A row whose key fields are still missing is a bad record
  (:func:`missing_keys`);
- the payload columns of a delete are null except its key fields.

Column work is batched (``pyarrow.compute``); Python runs only over the deletes that need their
record key, and over the rows found bad. Pure: no I/O.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from laminar_kafka.kafka_source.config.choices import OP_COLUMN
from laminar_kafka.kafka_source.decode.json_lines import JsonLines, one_line

__all__ = ["OP_FIELD", "fill_keys", "missing_keys", "record_key_columns", "update_or_delete"]

#: the ``_op`` column's field
OP_FIELD = pa.field(OP_COLUMN, pa.string(), nullable=False)

_UPDATE = pa.scalar("u", pa.string())
_DELETE = pa.scalar("d", pa.string())


def update_or_delete(values: Sequence[bytes | None]) -> pa.Array:
    """The ``_op`` column of records of json or a registry format: ``d`` for a tombstone (a null
    value), ``u`` for the others."""
    if None not in values:  # one C-level scan: the common case costs no Python per record
        return pa.repeat(_UPDATE, len(values))
    tombstones = pa.array([value is None for value in values], type=pa.bool_())
    return pc.if_else(tombstones, _DELETE, _UPDATE)


def fill_keys(
    schema: pa.Schema, columns: list[pa.Array], ops: pa.Array, keys: Sequence[bytes | None], names: Sequence[str]
) -> list[pa.Array]:
    """``columns`` (of ``schema``, one row per record) with the key fields ``names`` of each delete
    (``ops`` ``d``) that lacks one filled from the record's Kafka key (``keys``): the values the row
    has are kept, the missing ones taken from the record key. Key fields not in ``schema`` are left
    to :func:`missing_keys`."""
    present = [name for name in names if name in schema.names]
    if not present or not len(ops):
        return columns
    lacking = pc.is_null(columns[schema.get_field_index(present[0])])
    for name in present[1:]:
        lacking = pc.or_(lacking, pc.is_null(columns[schema.get_field_index(name)]))
    need = pc.and_(pc.equal(ops, _DELETE), lacking)
    if not pc.any(need).as_py():
        return columns
    rows = pc.indices_nonzero(need).to_pylist()
    from_keys = record_key_columns([keys[row] for row in rows], [schema.field(name) for name in present])
    filled = list(columns)
    for name, from_key in zip(present, from_keys, strict=True):
        index = schema.get_field_index(name)
        column = filled[index]
        filled[index] = pc.replace_with_mask(column, need, pc.coalesce(column.filter(need), from_key))
    return filled


def record_key_columns(keys: Sequence[bytes | None], fields: Sequence[pa.Field]) -> list[pa.Array]:
    """The key ``fields`` read from Kafka record ``keys``, one array per field, null where a key
    lacks the field or does not decode (``None`` keys included)."""
    row = [pa.field(f.name, f.type, nullable=True) for f in fields]
    lines = JsonLines(pa.schema([*row, pa.field("payload", pa.struct(row))]))
    texts: list[bytes | None] = [_key_object(key, fields) for key in keys]
    table = lines.parse_fast(texts)
    if table is None:  # some key is no JSON of the fields: read each alone, an unreadable one as {}
        fixed: list[bytes | None] = []
        for key, text in zip(keys, texts, strict=True):
            if lines.find_bad([text]):
                text = _text_key_object(key, fields) or b"{}"
                text = b"{}" if lines.find_bad([text]) else text
            fixed.append(text)
        table, _ = lines.parse(fixed)
    payload = table.column("payload").combine_chunks()
    unwrapped = payload.flatten() if len(fields) else []
    return [
        pc.coalesce(table.column(f.name).combine_chunks(), inner).cast(f.type)
        for f, inner in zip(fields, unwrapped, strict=True)
    ]


def _key_object(key: bytes | None, fields: Sequence[pa.Field]) -> bytes:
    """A record key as one JSON object line: the key itself when it is an object, a scalar wrapped
    as the value of a single key field, else ``{}`` (no key fields)."""
    if key is None:
        return b"{}"
    line = one_line(key) or b""
    if line.lstrip().startswith(b"{"):
        return line
    if len(fields) == 1:
        return b'{' + json.dumps(fields[0].name).encode() + b":" + line + b"}"
    return b"{}"


def _text_key_object(key: bytes | None, fields: Sequence[pa.Field]) -> bytes | None:
    """A key that is not JSON, read as the text of a single string key field; else ``None``."""
    if key is None or len(fields) != 1 or not pa.types.is_string(fields[0].type):
        return None
    return json.dumps({fields[0].name: key.decode("utf-8", "replace")}).encode()


def missing_keys(batch: pa.RecordBatch, names: Sequence[str]) -> dict[int, str]:
    """The rows of ``batch`` (by index) missing a key field of ``names``, with the reason: a bad
    record each (a key field the batch has no column for makes every row bad)."""
    absent = [name for name in names if name not in batch.schema.names]
    if absent:
        reason = f"upsert key {absent[0]!r} is not a field of the records"
        return dict.fromkeys(range(batch.num_rows), reason)
    nulls = [pc.is_null(batch.column(name)) for name in names]
    lacking = nulls[0]
    for more in nulls[1:]:
        lacking = pc.or_(lacking, more)
    if not pc.any(lacking).as_py():
        return {}
    problems: dict[int, str] = {}
    for row in pc.indices_nonzero(lacking).to_pylist():
        missing = ", ".join(name for name, null in zip(names, nulls, strict=True) if null[row].as_py())
        problems[row] = f"upsert key {missing} missing: null or absent in the row and in the record key"
    return problems
