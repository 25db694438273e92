"""Required fields: columns every decoded record must have, non-null and of an accepted kind.

The ``required-fields`` property names them: ``name`` (any type) or ``name:kind|kind...``, comma
separated, for example ``customer_id:integer|string,event_time:timestamp|date``; ``<=N`` after the
kinds bounds a text or bytes value to N bytes (UTF-8), for example ``region:string<=80``. A record whose
required field is null (in JSON, also when the field is absent) or longer than its bound, or a batch whose decoded schema
lacks the field or holds it with a type of another kind, is a *bad record* (the ``on-bad-record``
policy: fail the source, or skip it into the rejected rows with the reason). A lake partitioned by a
field declares that field here, so a record that cannot be placed never reaches a directory.

Kinds (:class:`ValueKind`) group Arrow types: ``integer`` (signed 8-64 bit), ``string`` (utf8,
large_utf8), ``binary`` (binary, large_binary, fixed-size), ``boolean``, ``date`` (date32, date64),
``timestamp`` (any unit, with or without a zone). Unsigned integers, floats, decimals and nested
types belong to no kind: they satisfy only a field required without kinds.

Pure: no I/O. :func:`bad_rows` is vectorised (one null mask per field); only the rows it returns
are visited in Python.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.choices import METADATA_COLUMNS

__all__ = [
    "RequiredField", "ValueKind", "bad_rows", "check_required_fields", "kind_of", "parse_required_fields", "schema_problem",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ValueKind(enum.Enum):
    """A family of Arrow types a required field may have."""

    INTEGER = "integer"
    STRING = "string"
    BINARY = "binary"
    BOOLEAN = "boolean"
    DATE = "date"
    TIMESTAMP = "timestamp"


def kind_of(arrow_type: pa.DataType) -> ValueKind | None:
    """The kind of ``arrow_type`` (a dictionary type: of its values), or ``None`` when it has none."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_signed_integer(arrow_type):
        return ValueKind.INTEGER
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return ValueKind.STRING
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) or pa.types.is_fixed_size_binary(arrow_type):
        return ValueKind.BINARY
    if pa.types.is_boolean(arrow_type):
        return ValueKind.BOOLEAN
    if pa.types.is_date(arrow_type):
        return ValueKind.DATE
    if pa.types.is_timestamp(arrow_type):
        return ValueKind.TIMESTAMP
    return None


@dataclass(frozen=True)
class RequiredField:
    """A column every record must have non-null; ``kinds`` empty: of any type, else of one of them."""

    name: str
    kinds: frozenset[ValueKind] = frozenset()
    #: the most bytes a text or bytes value may have (``None``: unbounded)
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigurationError(f"required-fields: {self.name!r} is not a column name")
        if self.max_bytes is not None and self.max_bytes < 1:
            raise ConfigurationError(f"required-fields: {self.name}: a bound must be >= 1, got {self.max_bytes}")

    def text(self) -> str:
        """The property form of this field (``name`` or ``name:kind|kind``, kinds in a fixed order,
        then ``<=N`` when bounded)."""
        bound = "" if self.max_bytes is None else f"<={self.max_bytes}"
        if not self.kinds:
            return self.name + bound
        return f"{self.name}:" + "|".join(k.value for k in ValueKind if k in self.kinds) + bound

    def accepts(self, arrow_type: pa.DataType) -> bool:
        return not self.kinds or kind_of(arrow_type) in self.kinds

    def describe_kinds(self) -> str:
        return " or ".join(k.value for k in ValueKind if k in self.kinds)


def parse_required_fields(text: str) -> tuple[RequiredField, ...]:
    """Parse ``required-fields``; raises :class:`ConfigurationError` naming the first problem (an
    unknown kind, a bad name, a field listed twice)."""
    fields: list[RequiredField] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        head, bounded, limit = item.partition("<=")
        max_bytes = None
        if bounded:
            try:
                max_bytes = int(limit.strip())
            except ValueError:
                raise ConfigurationError(f"required-fields: {item!r}: the bound after <= is not an integer") from None
        name, colon, kinds_text = head.partition(":")
        kinds = set()
        for word in filter(None, (w.strip().lower() for w in kinds_text.split("|"))):
            try:
                kinds.add(ValueKind(word))
            except ValueError:
                allowed = ", ".join(k.value for k in ValueKind)
                raise ConfigurationError(f"required-fields: {item!r}: unknown kind {word!r} (expected {allowed})") from None
        if colon and not kinds:
            raise ConfigurationError(f"required-fields: {item!r} names no kind after ':'")
        fields.append(RequiredField(name.strip(), frozenset(kinds), max_bytes))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"required-fields lists a field twice: {names}")
    return tuple(fields)


def schema_problem(schema: pa.Schema, field: RequiredField) -> str | None:
    """Why no record of ``schema`` can satisfy ``field`` (missing, or a type of another kind), or
    ``None`` when records of it can."""
    index = schema.get_field_index(field.name)
    if index < 0:
        return f"the record has no field {field.name}"
    arrow_type = schema.field(index).type
    if not field.accepts(arrow_type):
        return f"field {field.name} is {arrow_type}, expected {field.describe_kinds()}"
    return None


def check_required_fields(
    required: Iterable[RequiredField], payload: pa.Schema | None, include_metadata: Iterable[str],
) -> None:
    """Refuse (:class:`ConfigurationError`) a required field no record could have: a metadata column
    not in ``include_metadata``, or a payload field ``payload`` (the payload columns when known at
    configuration: ``raw``, and ``json`` with ``json-schema``; ``None``: not known) lacks or types
    otherwise. Registry payloads and metadata types are checked batch by batch (:func:`bad_rows`)."""
    included = set(include_metadata)
    for field in required:
        if field.name in METADATA_COLUMNS:
            if field.name not in included:
                raise ConfigurationError(f"required-fields: {field.name} is not among include-metadata")
            continue
        problem = None if payload is None else schema_problem(payload, field)
        if problem is not None:
            raise ConfigurationError(f"required-fields: {problem}")


def bad_rows(batch: pa.RecordBatch, fields: Iterable[RequiredField]) -> dict[int, str]:
    """The rows of ``batch`` (by index) that break a required field, each with the reason of the
    first field it breaks; ``{}`` when every row satisfies every field."""
    bad: dict[int, str] = {}
    for field in fields:
        problem = schema_problem(batch.schema, field)
        if problem is not None:
            for row in range(batch.num_rows):
                bad.setdefault(row, problem)
            continue
        column = batch.column(field.name)
        if column.null_count or (pa.types.is_dictionary(column.type) and column.dictionary.null_count):
            reason = f"field {field.name} is null or absent"
            for row in _null_rows(column):
                bad.setdefault(row, reason)
        if field.max_bytes is not None and kind_of(column.type) in (ValueKind.STRING, ValueKind.BINARY):
            reason = f"field {field.name} is longer than {field.max_bytes} bytes"
            for row in _long_rows(column, field.max_bytes):
                bad.setdefault(row, reason)
    return bad


def _long_rows(column: pa.Array, max_bytes: int) -> Sequence[int]:
    import numpy as np
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    lengths = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    return np.flatnonzero(lengths > max_bytes).tolist()


def _null_rows(column: pa.Array) -> Sequence[int]:
    import numpy as np

    return np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist()
