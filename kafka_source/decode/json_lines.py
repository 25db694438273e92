"""JSON values parsed by ``pyarrow.json`` into the columns of an explicit schema, in one call.

The values of a batch are joined by line breaks and parsed at once; only when that fails is each
value parsed on its own, to find the bad ones. Fields the schema does not name are ignored (at
every level of nesting); fields a value lacks are null. Pure: no I/O.
"""
from __future__ import annotations

import io
from typing import TypeGuard, TypeVar

import pyarrow as pa
import pyarrow.json as pa_json

from laminar_kafka.errors import ConfigurationError

__all__ = ["JsonLines", "one_line"]

_T = TypeVar("_T")

#: what pyarrow.json raises for a value that does not parse into the schema
PARSE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def _no_none(values: list[_T | None]) -> TypeGuard[list[_T]]:
    """Whether no value is ``None`` (one C-level scan)."""
    return None not in values


def one_line(value: bytes | None) -> bytes | None:
    """Valid JSON never has a raw line break inside a string, so breaks can become spaces."""
    if value is None or (b"\n" not in value and b"\r" not in value):
        return value
    return value.replace(b"\r", b" ").replace(b"\n", b" ")


class JsonLines:
    """Parses JSON objects, one per value, into a table of :attr:`schema`."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def parse(self, values: list[bytes | None]) -> tuple[pa.Table, dict[int, str]]:
        """The table of the good values (in order) and the bad ones by index with their reason (a
        ``None`` value is bad: "null payload (tombstone)")."""
        table = self.parse_fast(values)
        if table is not None:
            return table, {}
        values = [one_line(v) for v in values]
        bad = self.find_bad(values)
        good = [v for i, v in enumerate(values) if i not in bad]
        table = self.parse_fast(good) if good else self.schema.empty_table()
        if table is None:  # every value parsed alone, so the join must parse too
            raise ConfigurationError("JSON records parse one by one but not together")
        return table, bad

    def read(self, data: bytes) -> pa.Table:
        """``data`` (JSON objects, one per line) as a table; raises one of :data:`PARSE_ERRORS`."""
        block = max(1 << 20, len(data) + 1)
        return pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=block),
            parse_options=self._options,
        )

    def parse_fast(self, values: list[bytes | None]) -> pa.Table | None:
        """All values parsed at once; ``None`` if any value is missing, multi-line or bad."""
        if not _no_none(values):
            return None
        joined = b"\n".join(values)
        if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
            return None
        try:
            table = self.read(joined)
        except PARSE_ERRORS:
            return None
        return table if table.num_rows == len(values) else None

    def find_bad(self, values: list[bytes | None]) -> dict[int, str]:
        """The values that do not parse alone into one row, by index, with the reason."""
        bad: dict[int, str] = {}
        for index, value in enumerate(values):
            if value is None:
                bad[index] = "null payload (tombstone)"
                continue
            try:
                rows = self.read(value).num_rows
            except PARSE_ERRORS as exc:
                bad[index] = str(exc).splitlines()[0][:200]
                continue
            if rows != 1:
                bad[index] = f"payload holds {rows} JSON objects, expected 1"
        return bad
