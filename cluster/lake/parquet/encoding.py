"""How the lake's Parquet files encode their columns: Arrow's defaults, except that the columns
whose values never repeat are not dictionary-encoded.

Arrow's Parquet writer dictionary-encodes every column unless told otherwise. For ``_offset``
(unique within a partition) and ``_timestamp`` (nearly unique: at most a few records share a
millisecond) that is pure cost: an int64 column of a 65536-row group makes a dictionary page of
512 KiB, below the 1 MiB at which the writer gives up on the dictionary, so every value is hashed
and the chunk holds a dictionary as large as the plain column plus the indexes. Written plain, a
row group of 100-byte records costs about half the writer's CPU (0.17 instead of 0.27-0.35 us per
row in this repository's measurement) and the file is 2 % smaller. Every other column keeps the
dictionary (it pays for itself on repeated values and falls back to plain on its own when it grows
past 1 MiB). Plain is the encoding every Parquet reader has always read.

Pure: the column paths come from the Parquet schema Arrow derives from an Arrow schema (nested
fields have one path per leaf, such as ``payload.list.element``), read once per schema from an
empty file written to memory.
"""
from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["UNIQUE_VALUE_COLUMNS", "writer_options"]

#: top-level columns written without a dictionary (their values do not repeat)
UNIQUE_VALUE_COLUMNS = frozenset({"_offset", "_timestamp"})


def writer_options(schema: pa.Schema) -> dict[str, Any]:
    """Keyword arguments for :class:`pyarrow.parquet.ParquetWriter` (and ``write_table``) for rows
    of ``schema``: ``use_dictionary`` names every leaf column except those under
    :data:`UNIQUE_VALUE_COLUMNS`; ``{}`` (Arrow's defaults) when the schema has none of them."""
    if not UNIQUE_VALUE_COLUMNS.intersection(schema.names):
        return {}
    return {"use_dictionary": list(_dictionary_columns(schema))}


@functools.lru_cache(maxsize=64)
def _dictionary_columns(schema: pa.Schema) -> tuple[str, ...]:
    return tuple(p for p in _leaf_paths(schema) if p.split(".", 1)[0] not in UNIQUE_VALUE_COLUMNS)


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """The dotted path of every leaf column of the Parquet schema Arrow writes for ``schema``
    (derived by writing an empty file to memory: Arrow has no public call for it)."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema).close()
    parquet_schema = pq.read_metadata(pa.BufferReader(sink.getvalue())).schema
    return [parquet_schema.column(i).path for i in range(len(parquet_schema))]
