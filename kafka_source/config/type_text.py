"""Arrow types as text and back: the ``json-schema`` setting's ``name:type,...`` with nested types.

:func:`parse_type` reads what ``str(pyarrow_type)`` writes, so a schema inferred from a sample can be
pinned as text and read back equal: type aliases (``int64``, ``string``, ``timestamp[ms]``...),
``list<item: T>`` (or ``list<T>``), ``struct<name: T, ...>``, ``map<K, V>``, ``decimal128(p, s)`` and
``timestamp[unit, tz=Zone]``. :func:`schema_text` writes a schema; :func:`parse_schema_text` reads
one. Pure; errors are :class:`~laminar_kafka.connector.errors.ConfigurationError` naming the text.
"""
from __future__ import annotations

import re

import pyarrow as pa

from laminar_kafka.errors import ConfigurationError

__all__ = ["parse_schema_text", "parse_type", "schema_text", "split_top_level"]

_DECIMAL = re.compile(r"decimal(128|256)\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:,\s*tz=([^\]]+))?\]")
#: characters a field name may not hold in the text form
_RESERVED = set(",:<>()[]")


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """``text`` split at ``separator`` outside ``<>``, ``()`` and ``[]``."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
            if depth < 0:
                raise ConfigurationError(f"unbalanced brackets in {text!r}")
        elif char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth != 0:
        raise ConfigurationError(f"unbalanced brackets in {text!r}")
    parts.append(text[start:])
    return parts


def _inner(text: str, prefix: str) -> str:
    return text[len(prefix):-1].strip()


def _field(text: str) -> pa.Field:
    name, sep, type_text = text.partition(":")
    if not sep or not name.strip():
        raise ConfigurationError(f"{text.strip()!r} is not 'name: type'")
    return pa.field(name.strip(), parse_type(type_text), nullable=True)


def parse_type(text: str) -> pa.DataType:
    """The Arrow type ``text`` names (see the module docstring)."""
    text = text.strip()
    if text.startswith("list<") and text.endswith(">"):
        inner = _inner(text, "list<")
        head = split_top_level(inner, ":")
        item = head[1] if len(head) > 1 and head[0].strip() == "item" else inner
        return pa.list_(parse_type(item))
    if text.startswith("struct<") and text.endswith(">"):
        inner = _inner(text, "struct<")
        return pa.struct([_field(part) for part in split_top_level(inner)] if inner else [])
    if text.startswith("map<") and text.endswith(">"):
        parts = split_top_level(_inner(text, "map<"))
        if len(parts) != 2:
            raise ConfigurationError(f"map type {text!r} needs a key and a value type")
        return pa.map_(parse_type(parts[0]), parse_type(parts[1]))
    decimal = _DECIMAL.fullmatch(text)
    if decimal:
        kind, precision, scale = decimal.groups()
        factory = pa.decimal128 if kind == "128" else pa.decimal256
        return factory(int(precision), int(scale))
    stamp = _TIMESTAMP.fullmatch(text)
    if stamp:
        return pa.timestamp(stamp.group(1), tz=stamp.group(2).strip() if stamp.group(2) else None)
    try:
        return pa.type_for_alias(text)
    except (ValueError, KeyError):
        raise ConfigurationError(f"unknown type {text!r}") from None


def schema_text(schema: pa.Schema) -> str:
    """``name:type,...`` of ``schema`` (round-trips through :func:`parse_schema_text` for nullable
    fields). Raises :class:`ConfigurationError` for a name the text form cannot hold."""
    for name in _names(schema):
        if not name or _RESERVED & set(name) or name != name.strip():
            raise ConfigurationError(f"field name {name!r} cannot be written as name:type text")
    return ",".join(f"{f.name}:{f.type}" for f in schema)


def _names(fields: pa.Schema | pa.StructType) -> list[str]:
    names: list[str] = []
    for f in fields:
        names.append(f.name)
        if pa.types.is_struct(f.type):
            names.extend(_names(f.type))
        elif pa.types.is_list(f.type) and pa.types.is_struct(f.type.value_type):
            names.extend(_names(f.type.value_type))
    return names


def parse_schema_text(text: str) -> pa.Schema:
    """``name:type,name:type`` into a schema of nullable fields (empty items are ignored)."""
    fields = [_field(part) for part in split_top_level(text) if part.strip()]
    return pa.schema(fields)
