"""Arrow types from schema-registry schemas (Avro, Protobuf, JSON Schema). Pure: no I/O.

The Arrow type of a record is derived from its writer schema, never inferred from data:

==========================  ===============================  ===================================
Avro                        Protobuf                         JSON Schema
==========================  ===============================  ===================================
record -> struct            message -> struct                object + properties -> struct
array -> list               repeated -> list                 array + items -> list
map -> map<string, V>       map<K, V> -> map<K, V>           object + additionalProperties only
                                                             -> map<string, V>
union [null, T] -> T        every field nullable (unset      ``["T", "null"]``, ``anyOf`` /
(nullable); other fields    message/optional: null)          ``oneOf`` with null -> T; every
not nullable                                                 property nullable
enum -> string              enum -> string (value name)      enum of strings -> string
boolean/int/long/float/     bool/int32/int64/uint32/uint64/  boolean/integer(int64)/
double/bytes/string         float/double/bytes/string        number(float64)/string
timestamp-millis/-micros    google.protobuf.Timestamp ->     string format date-time ->
-> timestamp[ms|us, UTC]    timestamp[us, UTC]; Duration ->  timestamp[us, UTC]; format date ->
date -> date32; time-millis duration[us]; wrappers           date32
-> time32[ms]; time-micros  (``StringValue``...) -> nullable
-> time64[us]; decimal ->   scalar
decimal128(p, s); uuid ->
string; fixed -> fixed_size
_binary
==========================  ===============================  ===================================

Not supported (:class:`UnsupportedSchemaError`): recursive types, Avro unions of two or more
non-null branches, JSON Schema values without a single type (e.g. ``{}`` or ``anyOf`` of two types).
A top-level schema that is not a record/message/object becomes one column (see
:func:`payload_fields`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from laminar_kafka.connector.errors import ConnectorError

__all__ = [
    "UnsupportedSchemaError",
    "avro_to_arrow",
    "json_schema_to_arrow",
    "json_storage_type",
    "payload_fields",
    "protobuf_to_arrow",
]

UTC = "UTC"


class UnsupportedSchemaError(ConnectorError):
    """A registry schema has a construct with no Arrow column type here (see the module doc)."""


def payload_fields(arrow_type: pa.DataType, column: str) -> list[pa.Field]:
    """The output columns of a decoded value: a struct's fields, or one column named ``column``."""
    if pa.types.is_struct(arrow_type):
        return list(arrow_type)
    return [pa.field(column, arrow_type, nullable=True)]


# -- Avro ---------------------------------------------------------------------------------------

_AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_AVRO_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz=UTC),
    ("long", "timestamp-micros"): pa.timestamp("us", tz=UTC),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("string", "uuid"): pa.string(),
}


def avro_to_arrow(schema: Any, named: Mapping[str, Any] | None = None) -> pa.DataType:
    """The Arrow type of the Avro ``schema`` (parsed JSON: a str, list or dict).

    ``named`` holds named types defined outside ``schema`` (registry references), by full name.
    Nullability of a struct field follows the Avro field's type (a union with ``null``).
    """
    return _AvroMapper(dict(named or {})).map(schema, "")[0]


class _AvroMapper:
    def __init__(self, named: dict[str, Any]) -> None:
        self._named_schemas = named
        self._named: dict[str, tuple[pa.DataType, bool]] = {}
        self._in_progress: set[str] = set()

    def map(self, schema: Any, namespace: str) -> tuple[pa.DataType, bool]:
        """``(type, nullable)`` of ``schema`` within ``namespace``."""
        if isinstance(schema, str):
            if schema in _AVRO_PRIMITIVES:
                return _AVRO_PRIMITIVES[schema], schema == "null"
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if isinstance(schema, dict):
            return self._complex(schema, namespace)
        raise UnsupportedSchemaError(f"not an Avro schema: {schema!r}")

    def _reference(self, name: str, namespace: str) -> tuple[pa.DataType, bool]:
        for full in ((f"{namespace}.{name}" if namespace and "." not in name else name), name):
            if full in self._in_progress:
                raise UnsupportedSchemaError(f"recursive Avro type {full!r}")
            if full in self._named:
                return self._named[full]
            if full in self._named_schemas:
                return self.map(self._named_schemas[full], full.rpartition(".")[0])
        raise UnsupportedSchemaError(f"unknown Avro type {name!r}")

    def _union(self, branches: list[Any], namespace: str) -> tuple[pa.DataType, bool]:
        mapped = [self.map(b, namespace) for b in branches]
        values = [m for m in mapped if not pa.types.is_null(m[0])]
        if len(values) > 1:
            raise UnsupportedSchemaError(f"Avro union of several non-null types: {branches!r}")
        if not values:
            return pa.null(), True
        return values[0][0], len(values) < len(mapped) or values[0][1]

    def _complex(self, schema: dict[str, Any], namespace: str) -> tuple[pa.DataType, bool]:
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
            decimal = pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            if kind == "fixed":
                self._define(schema, namespace, decimal)
            return decimal, False
        if isinstance(kind, str) and isinstance(logical, str) and (kind, logical) in _AVRO_LOGICAL:
            return _AVRO_LOGICAL[(kind, logical)], False
        if kind in ("record", "error"):
            return self._record(schema, namespace)
        if kind == "enum":
            return self._define(schema, namespace, pa.string()), False
        if kind == "fixed":
            return self._define(schema, namespace, pa.binary(int(schema["size"]))), False
        if kind == "array":
            item, nullable = self.map(schema["items"], namespace)
            return pa.list_(pa.field("item", item, nullable=nullable)), False
        if kind == "map":
            value, nullable = self.map(schema["values"], namespace)
            return pa.map_(pa.string(), pa.field("value", value, nullable=nullable)), False
        return self.map(kind, namespace)  # {"type": "string"}, {"type": {...}}, unknown logical types

    def _full_name(self, schema: dict[str, Any], namespace: str) -> tuple[str, str]:
        name = str(schema["name"])
        if "." in name:
            return name, name.rpartition(".")[0]
        space = schema.get("namespace", namespace) or ""
        return (f"{space}.{name}" if space else name), space

    def _define(self, schema: dict[str, Any], namespace: str, arrow_type: pa.DataType) -> pa.DataType:
        full, _ = self._full_name(schema, namespace)
        self._named[full] = (arrow_type, False)
        return arrow_type

    def _record(self, schema: dict[str, Any], namespace: str) -> tuple[pa.DataType, bool]:
        full, space = self._full_name(schema, namespace)
        self._in_progress.add(full)
        fields = []
        for item in schema.get("fields", []):
            arrow_type, nullable = self.map(item["type"], space)
            fields.append(pa.field(str(item["name"]), arrow_type, nullable=nullable))
        self._in_progress.discard(full)
        struct = pa.struct(fields)
        self._named[full] = (struct, False)
        return struct, False


# -- Protobuf -----------------------------------------------------------------------------------

_WELL_KNOWN: dict[str, pa.DataType] = {
    "google.protobuf.Timestamp": pa.timestamp("us", tz=UTC),
    "google.protobuf.Duration": pa.duration("us"),
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.uint64(),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.uint32(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
#: FieldDescriptor.TYPE_* -> Arrow (message, group and enum are handled apart)
_PROTO_SCALARS: dict[int, pa.DataType] = {
    1: pa.float64(), 2: pa.float32(), 3: pa.int64(), 4: pa.uint64(), 5: pa.int32(), 6: pa.uint64(),
    7: pa.uint32(), 8: pa.bool_(), 9: pa.string(), 12: pa.binary(), 13: pa.uint32(), 15: pa.int32(),
    16: pa.int64(), 17: pa.int32(), 18: pa.int64(),
}
_TYPE_MESSAGE, _TYPE_GROUP, _TYPE_ENUM = 11, 10, 14


def protobuf_to_arrow(descriptor: Any) -> pa.DataType:
    """The Arrow type of the protobuf message ``descriptor`` (``google.protobuf.descriptor.Descriptor``).

    Every field is nullable: a message field, an ``optional`` or oneof member that is not set is
    null, and a field the record's writer schema lacks (an older version) is null too. A scalar
    proto3 field without presence reads as its default value (0, "") when unset.
    """
    return _proto_message(descriptor, set())


def _proto_message(descriptor: Any, in_progress: set[str]) -> pa.DataType:
    name = descriptor.full_name
    if name in _WELL_KNOWN:
        return _WELL_KNOWN[name]
    if name in in_progress:
        raise UnsupportedSchemaError(f"recursive protobuf message {name!r}")
    in_progress = in_progress | {name}
    fields = []
    for field in descriptor.fields:
        fields.append(pa.field(field.name, _proto_field(field, in_progress), nullable=True))
    return pa.struct(fields)


def is_repeated(field: Any) -> bool:
    """Whether the protobuf ``field`` is repeated (maps are repeated entries)."""
    if hasattr(field, "is_repeated"):  # protobuf >= 5.x; ``label`` is gone in 7.x
        return bool(field.is_repeated)
    return bool(field.label == 3)


def _proto_field(field: Any, in_progress: set[str]) -> pa.DataType:
    if is_repeated(field) and field.type == _TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        entry = field.message_type
        key = _proto_single(entry.fields_by_name["key"], in_progress)
        value = _proto_single(entry.fields_by_name["value"], in_progress)
        return pa.map_(key, value)
    single = _proto_single(field, in_progress)
    return pa.list_(pa.field("item", single, nullable=False)) if is_repeated(field) else single


def _proto_single(field: Any, in_progress: set[str]) -> pa.DataType:
    if field.type in (_TYPE_MESSAGE, _TYPE_GROUP):
        return _proto_message(field.message_type, in_progress)
    if field.type == _TYPE_ENUM:
        return pa.string()
    return _PROTO_SCALARS[field.type]


# -- JSON Schema --------------------------------------------------------------------------------

_JSON_SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(),
}
_JSON_FORMATS: dict[str, pa.DataType] = {"date-time": pa.timestamp("us", tz=UTC), "date": pa.date32()}


def json_schema_to_arrow(schema: Mapping[str, Any]) -> pa.DataType:
    """The Arrow type of the JSON Schema ``schema`` (local ``$ref`` into ``definitions``/``$defs``
    resolved). Every property is nullable, ``required`` or not: records are not validated against
    the schema, so a missing property reads as null (a value of the wrong type is a bad record)."""
    return _JsonMapper(schema).map(schema, set())[0]


def json_storage_type(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with timestamps and dates as strings: the type JSON values convert to before
    one cast to ``arrow_type`` parses the ISO 8601 text."""
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return pa.string()
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(json_storage_type(f.type)) for f in arrow_type])
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(json_storage_type(arrow_type.value_type)))
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_type, arrow_type.item_field.with_type(json_storage_type(arrow_type.item_type)))
    return arrow_type


class _JsonMapper:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root

    def _resolve(self, ref: str) -> Mapping[str, Any]:
        if not ref.startswith("#/"):
            raise UnsupportedSchemaError(f"JSON Schema $ref {ref!r} is not local")
        node: Any = self._root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def map(self, schema: Mapping[str, Any], refs: set[str]) -> tuple[pa.DataType, bool]:
        """``(type, nullable)`` of ``schema``."""
        if "$ref" in schema:
            ref = str(schema["$ref"])
            if ref in refs:
                raise UnsupportedSchemaError(f"recursive JSON Schema $ref {ref!r}")
            return self.map(self._resolve(ref), refs | {ref})
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                mapped = [self.map(s, refs) for s in schema[combinator]]
                values = [m for m in mapped if not pa.types.is_null(m[0])]
                if len(values) != 1:
                    raise UnsupportedSchemaError(f"JSON Schema {combinator} of {len(values)} non-null types")
                return values[0][0], len(values) < len(mapped) or values[0][1]
        kind = schema.get("type")
        if kind is None and "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
            kind = "string"
        if kind is None and "properties" in schema:
            kind = "object"
        kinds = list(kind) if isinstance(kind, list) else [kind]
        nullable = "null" in kinds
        kinds = [k for k in kinds if k != "null"]
        if not kinds:
            if nullable:
                return pa.null(), True
            raise UnsupportedSchemaError(f"JSON Schema without a type: {dict(schema)!r}")
        if len(kinds) > 1:
            raise UnsupportedSchemaError(f"JSON Schema with several types: {kinds}")
        if not isinstance(kinds[0], str):
            raise UnsupportedSchemaError(f"JSON Schema type {kinds[0]!r} is not supported")
        return self._typed(kinds[0], schema, refs), nullable

    def _typed(self, kind: str, schema: Mapping[str, Any], refs: set[str]) -> pa.DataType:
        if kind == "string" and schema.get("format") in _JSON_FORMATS:
            return _JSON_FORMATS[schema["format"]]
        if kind in _JSON_SCALARS:
            return _JSON_SCALARS[kind]
        if kind == "array":
            if not isinstance(schema.get("items"), Mapping):
                raise UnsupportedSchemaError("JSON Schema array without one 'items' schema")
            return pa.list_(pa.field("item", self.map(schema["items"], refs)[0]))
        if kind == "object":
            properties = schema.get("properties")
            extra = schema.get("additionalProperties")
            if not properties and isinstance(extra, Mapping):
                return pa.map_(pa.string(), pa.field("value", self.map(extra, refs)[0]))
            if not properties:
                raise UnsupportedSchemaError("JSON Schema object without properties")
            return pa.struct([pa.field(name, self.map(sub, refs)[0]) for name, sub in properties.items()])
        raise UnsupportedSchemaError(f"JSON Schema type {kind!r} is not supported")
