"""Arrow column building for Kafka messages: payload columns per format plus metadata columns.

Columns are built in one go from lists gathered with C-level ``map`` over the messages; there is
no per-record dict building. JSON is parsed by ``pyarrow.json`` over the newline-joined values;
only when that fails is each record parsed on its own to find the bad ones.
"""
from __future__ import annotations

import io
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pa_json
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from kafka_source.config import Format, KafkaSourceConfig
from kafka_source.errors import ConfigurationError

__all__ = ["BadRecord", "BatchBuilder", "BuiltBatch", "HEADERS_TYPE", "metadata_fields"]

HEADERS_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
)
_METADATA_FIELDS: dict[str, pa.Field] = {
    "_topic": pa.field("_topic", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    "_partition": pa.field("_partition", pa.int32(), nullable=False),
    "_offset": pa.field("_offset", pa.int64(), nullable=False),
    "_timestamp": pa.field("_timestamp", pa.timestamp("ms"), nullable=True),
    "_key": pa.field("_key", pa.binary(), nullable=True),
    "_headers": pa.field("_headers", HEADERS_TYPE, nullable=True),
}


def metadata_fields(columns: Sequence[str]) -> list[pa.Field]:
    return [_METADATA_FIELDS[c] for c in columns]


@dataclass(frozen=True)
class BadRecord:
    """A message (by index into the built list) whose payload does not decode, and why."""

    index: int
    reason: str


@dataclass(frozen=True)
class BuiltBatch:
    """``batch`` holds one row per good message, in order; ``bad`` lists the others.

    ``partitions`` and ``offsets`` cover *every* input message (good and bad), in input order, so
    the caller can move its cursor without walking the messages again.
    """

    batch: pa.RecordBatch
    bad: tuple[BadRecord, ...]
    partitions: list[int]
    offsets: list[int]


def int32_array(values: list[int]) -> pa.Array:
    """``pa.int32`` array from a list of ints via a typed buffer (faster than ``pa.array``)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(array("i", values))])


def int64_array(values: list[int]) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array("q", values))])


def _one_line(value: bytes | None) -> bytes | None:
    """Valid JSON never has a raw line break inside a string, so breaks can become spaces."""
    if value is None or (b"\n" not in value and b"\r" not in value):
        return value
    return value.replace(b"\r", b" ").replace(b"\n", b" ")


class BatchBuilder:
    """Builds record batches of one fixed :attr:`schema` from lists of messages."""

    def __init__(self, config: KafkaSourceConfig, json_schema: pa.Schema | None = None) -> None:
        self.format = config.format
        self.metadata = config.include_metadata
        if self.format is Format.JSON:
            payload = json_schema or config.json_schema
            if payload is None:
                raise ConfigurationError(
                    "format=json needs json.schema or a prior discover_schema() call"
                )
            self.payload_schema: pa.Schema = payload
            self._parse_options = pa_json.ParseOptions(
                explicit_schema=payload, unexpected_field_behavior="ignore"
            )
        else:
            self.payload_schema = pa.schema([pa.field("value", pa.binary(), nullable=True)])
        self.schema: pa.Schema = pa.schema(
            list(self.payload_schema) + metadata_fields(self.metadata)
        )

    def build(self, messages: Sequence[Message]) -> BuiltBatch:
        """Decode ``messages`` (all without client error). Pre: ``len(messages) > 0``."""
        values = list(map(Message.value, messages))
        partitions = list(map(Message.partition, messages))
        offsets = list(map(Message.offset, messages))
        all_partitions, all_offsets = partitions, offsets
        bad: tuple[BadRecord, ...] = ()
        if self.format is Format.JSON:
            payload = self._parse_json_fast(values)
            if payload is None:
                values = [_one_line(v) for v in values]
                bad = tuple(self._find_bad_json(values))
                if bad:
                    bad_index = {b.index for b in bad}
                    keep = [i for i in range(len(values)) if i not in bad_index]
                    messages = [messages[i] for i in keep]
                    values = [values[i] for i in keep]
                    partitions = [partitions[i] for i in keep]
                    offsets = [offsets[i] for i in keep]
                payload = self._parse_json_fast(values) if values else self._empty_payload()
                if payload is None:  # every record parsed alone, so the join must parse too
                    raise ConfigurationError("JSON records parse one by one but not together")
        else:
            payload = [pa.array(values, type=pa.binary())]
        columns = payload + self._metadata_columns(messages, partitions, offsets)
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return BuiltBatch(batch, bad, all_partitions, all_offsets)

    # -- payload --------------------------------------------------------------------------------

    def _empty_payload(self) -> list[pa.Array]:
        return [pa.array([], type=f.type) for f in self.payload_schema]

    def _read_json(self, data: bytes) -> pa.Table:
        block = max(1 << 20, len(data) + 1)
        return pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=block),
            parse_options=self._parse_options,
        )

    def _parse_json_fast(self, values: list[bytes | None]) -> list[pa.Array] | None:
        """Parse all values at once; ``None`` if any value is missing, multi-line or bad."""
        if None in values:
            return None
        joined = b"\n".join(values)  # type: ignore[arg-type]
        if joined.count(b"\n") != len(values) - 1 or b"\r" in joined:
            return None
        try:
            table = self._read_json(joined)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(values):
            return None
        return [table.column(f.name).combine_chunks().cast(f.type) for f in self.payload_schema]

    def _find_bad_json(self, values: list[bytes | None]) -> list[BadRecord]:
        bad: list[BadRecord] = []
        for index, value in enumerate(values):
            if value is None:
                bad.append(BadRecord(index, "null payload (tombstone)"))
                continue
            try:
                rows = self._read_json(value).num_rows
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                bad.append(BadRecord(index, str(exc).splitlines()[0][:200]))
                continue
            if rows != 1:
                bad.append(BadRecord(index, f"payload holds {rows} JSON objects, expected 1"))
        return bad

    # -- metadata -------------------------------------------------------------------------------

    def _metadata_columns(
        self, messages: Sequence[Message], partitions: list[int], offsets: list[int]
    ) -> list[pa.Array]:
        columns: list[pa.Array] = []
        for name in self.metadata:
            if name == "_topic":
                topics = pa.array(list(map(Message.topic, messages)), type=pa.string())
                columns.append(topics.dictionary_encode())
            elif name == "_partition":
                columns.append(int32_array(partitions))
            elif name == "_offset":
                columns.append(int64_array(offsets))
            elif name == "_timestamp":
                stamps = [
                    None if kind == TIMESTAMP_NOT_AVAILABLE else ts
                    for kind, ts in map(Message.timestamp, messages)
                ]
                columns.append(pa.array(stamps, type=pa.timestamp("ms")))
            elif name == "_key":
                columns.append(pa.array(list(map(Message.key, messages)), type=pa.binary()))
            elif name == "_headers":
                columns.append(pa.array(list(map(Message.headers, messages)), type=HEADERS_TYPE))
        return columns
