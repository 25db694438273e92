"""The lake's Parquet encoding: no dictionary for the columns whose values never repeat."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from laminar_kafka.cluster.lake.parquet.encoding import UNIQUE_VALUE_COLUMNS, writer_options
from tests.unit.cluster.lake.parquet.test_sink import batch, files_under, make_sink

DICTIONARY_ENCODINGS = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}


def chunk_encodings(path: Path) -> dict[str, set[str]]:
    metadata = pq.read_metadata(path)
    group = metadata.row_group(0)
    return {group.column(i).path_in_schema: set(group.column(i).encodings) for i in range(group.num_columns)}


def test_every_leaf_column_but_offset_and_timestamp_keeps_its_dictionary() -> None:
    schema = pa.schema([
        ("value", pa.binary()), ("_topic", pa.dictionary(pa.int32(), pa.string())), ("_partition", pa.int32()),
        ("_offset", pa.int64()), ("_timestamp", pa.timestamp("ms")),
        ("payload", pa.struct([("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64()))])),
    ])
    assert writer_options(schema) == {"use_dictionary": [
        "value", "_topic", "_partition", "payload.tags.list.element",
        "payload.attrs.key_value.key", "payload.attrs.key_value.value",
    ]}


def test_a_schema_without_unique_columns_gets_arrows_defaults() -> None:
    assert writer_options(pa.schema([("value", pa.binary()), ("_partition", pa.int32())])) == {}


def test_the_options_are_a_fresh_value_each_call() -> None:
    schema = pa.schema([("value", pa.binary()), ("_offset", pa.int64())])
    writer_options(schema)["use_dictionary"].append("_offset")
    assert writer_options(schema) == {"use_dictionary": ["value"]}


def test_sink_files_write_offset_and_timestamp_plain_and_read_back_the_same(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    rows = batch(partition=1, start=100, count=5000)
    sink.write(rows)
    sink.seal(1)
    [path] = files_under(tmp_path / "out")
    encodings = chunk_encodings(path)
    for column in UNIQUE_VALUE_COLUMNS:
        assert not encodings[column] & DICTIONARY_ENCODINGS, (column, encodings[column])
    for column in ("value", "_topic", "_partition"):
        assert encodings[column] & DICTIONARY_ENCODINGS, (column, encodings[column])
    assert pq.read_table(path).select(rows.schema.names).to_pylist() == rows.to_pylist()
