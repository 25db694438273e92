"""Arrow column building for Kafka messages: payload columns per format plus metadata columns.

Columns are built in one go from the field lists of :class:`~laminar_kafka.kafka_source.decode.records.Records` (read
on the reader thread); there is no per-record Python here. JSON is parsed by ``pyarrow.json`` over
the newline-joined values (:mod:`~laminar_kafka.kafka_source.decode.json_lines`); only when that fails
is each record parsed on its own to find the bad ones; ``debezium-json`` likewise
(:mod:`~laminar_kafka.kafka_source.decode.debezium`). In upsert mode every row also has its ``_op``
column and its key fields (:mod:`~laminar_kafka.kafka_source.decode.changes`). The registry formats (``avro``, ``protobuf``, ``json-schema``) and registry-decoded keys go
through :class:`~laminar_kafka.kafka_source.schema_registry.decode.RegistryDecoder`: their columns follow the newest writer
schema seen, so :attr:`BatchBuilder.schema` may change from one batch to the next (each batch has
one schema; see :mod:`laminar_kafka.kafka_source.schema_registry.decode` for the evolution contract).
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, TypeVar

import pyarrow as pa

from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.config.source_config import Format, KafkaSourceConfig, KeyFormat, TombstonePolicy
from laminar_kafka.kafka_source.decode.changes import OP_FIELD, fill_keys, missing_keys, update_or_delete
from laminar_kafka.kafka_source.decode.debezium import DebeziumDecoder
from laminar_kafka.kafka_source.decode.json_lines import JsonLines
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.decode.required_fields import bad_rows as required_field_problems
from laminar_kafka.kafka_source.decode.timestamps import out_of_range_timestamps
from laminar_kafka.kafka_source.schema_registry.arrow_types import payload_fields

if TYPE_CHECKING:  # the registry modules need confluent-kafka's schema-registry extras
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from laminar_kafka.kafka_source.schema_registry.decode import RegistryDecoder as Decoder

__all__ = ["BadRecord", "BatchBuilder", "BuiltBatch", "HEADERS_TYPE", "metadata_fields", "timestamp_array"]

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


_T = TypeVar("_T")


def _no_none(values: list[_T | None]) -> TypeGuard[list[_T]]:
    """Whether no value is ``None`` (one C-level scan)."""
    return None not in values


def metadata_fields(columns: Sequence[str]) -> list[pa.Field]:
    return [_METADATA_FIELDS[c] for c in columns]


@dataclass(frozen=True)
class BadRecord:
    """A record (by index into the records built) whose payload does not decode, and why."""

    index: int
    reason: str


@dataclass(frozen=True)
class BuiltBatch:
    """``batch`` holds one row per good record, in order; ``bad`` lists the others."""

    batch: pa.RecordBatch
    bad: tuple[BadRecord, ...]


def int32_array(values: list[int]) -> pa.Array:
    """``pa.int32`` array from a list of ints via a typed buffer (faster than ``pa.array``)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(array("i", values))])


def int64_array(values: list[int]) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array("q", values))])


def timestamp_array(values: list[int | None]) -> pa.Array:
    """``timestamp[ms]`` array of milliseconds (``None``: null), via a typed buffer when there is
    no null (about 37 instead of 59 ns per value)."""
    if not _no_none(values):
        return pa.array(values, type=pa.timestamp("ms"))
    return pa.Array.from_buffers(pa.timestamp("ms"), len(values), [None, pa.py_buffer(array("q", values))])


#: the JSON a tombstone reads as under ``on-tombstone=row`` or in upsert mode: every field absent, so null
_EMPTY_OBJECT = b"{}"


class BatchBuilder:
    """Builds record batches from lists of messages.

    :attr:`schema` is fixed for ``raw`` and ``json``; with a registry format (or a registry
    ``key-format``) it is the schema of the last batch built (before the first: the metadata
    columns only, and ``_key`` as null). In upsert mode (``upsert-keys``, ``debezium-json``) the
    ``_op`` column follows the payload columns. ``registry``: the schema registry client (default:
    one for ``schema.registry.url``).
    """

    def __init__(
        self,
        config: KafkaSourceConfig,
        json_schema: pa.Schema | None = None,
        registry: SchemaRegistryClient | None = None,
    ) -> None:
        self.format = config.format
        self.metadata = config.include_metadata
        self.required_fields = config.required_fields
        self.key_format = config.key_format
        self._values: Decoder | None = None
        #: upsert mode: the key fields every row carries (empty: append mode, no ``_op`` column)
        self.upsert_keys = config.upsert_keys
        #: ``on-tombstone=row`` and upsert mode: a null value decodes to a row of null payload columns
        self._tombstone_rows = config.on_tombstone is TombstonePolicy.ROW or bool(self.upsert_keys)
        self._debezium: DebeziumDecoder | None = None
        self._keys: Decoder | None = None
        self.payload_schema: pa.Schema
        if self.format.uses_registry or self.key_format.uses_registry:
            from laminar_kafka.kafka_source.schema_registry.client import registry_client
            from laminar_kafka.kafka_source.schema_registry.decode import RegistryDecoder

            assert config.schema_registry_url is not None  # the config checks it
            client = registry or registry_client(config.schema_registry_url, config.schema_registry_properties)
            if self.format.uses_registry:
                self._values = RegistryDecoder(client, self.format.value, null_is_bad=not self._tombstone_rows)
            if self.key_format.uses_registry:
                self._keys = RegistryDecoder(client, self.key_format.value, null_is_bad=False)
        if self._values is not None:
            self.payload_schema = pa.schema([])
        elif self.format.reads_json:
            payload = json_schema or config.json_schema
            if payload is None:
                raise ConfigurationError(
                    f"format={self.format.value} needs json-schema or a prior discover_schema() call"
                )
            missing = [name for name in self.upsert_keys if name not in payload.names]
            if missing:
                raise ConfigurationError(f"upsert-keys: {missing[0]} is not a field of the records "
                                         f"(fields: {', '.join(payload.names)})")
            self.payload_schema = payload
            self._json = JsonLines(payload)
            if self.format is Format.DEBEZIUM_JSON:
                self._debezium = DebeziumDecoder(payload, self.upsert_keys)
        else:
            self.payload_schema = pa.schema([pa.field("value", pa.binary(), nullable=True)])
        self.schema: pa.Schema = self._schema()

    @property
    def prefetches(self) -> bool:
        """Whether :meth:`prefetch` does anything (a registry format for the value or the key)."""
        return self._values is not None or self._keys is not None

    def prefetch(self, records: Records) -> None:
        """Warm the registry decoders' schema caches with the ids ``records`` carry (blocking
        registry I/O: call it on the reader thread, so :meth:`build` on the event loop finds them)."""
        if self._values is not None:
            self._values.prefetch(records.values)
        if self._keys is not None and records.keys is not None:
            self._keys.prefetch(records.keys)

    def _schema(self) -> pa.Schema:
        fields = metadata_fields(self.metadata)
        if self.key_format is not KeyFormat.RAW:
            key_type = pa.string() if self._keys is None else (self._keys.arrow_type or pa.null())
            fields = [f.with_type(key_type) if f.name == "_key" else f for f in fields]
        changes = [OP_FIELD] if self.upsert_keys else []
        return pa.schema(list(self.payload_schema) + changes + fields)

    def build(self, records: Records) -> BuiltBatch:
        """Decode ``records``. Pre: ``len(records) > 0``, read with the fields this builder's
        columns need (:meth:`RecordFields.of <laminar_kafka.kafka_source.decode.records.RecordFields.of>`).

        A record is bad when its value does not decode, or its key does not (``key-format``), or
        its ``_timestamp`` lies outside years 0001-9999 (:mod:`laminar_kafka.kafka_source.decode.timestamps`),
        or it breaks ``required-fields`` (:mod:`laminar_kafka.kafka_source.decode.required_fields`; not
        checked on deletes), or in upsert mode its key fields are missing from its row and its record
        key (:mod:`laminar_kafka.kafka_source.decode.changes`). Raises :class:`~laminar_kafka.connector.errors.TransientError` when the schema registry cannot be
        reached and :class:`ConfigurationError` when it refuses access (nothing is consumed).
        """
        values = records.values
        key_column, key_bad = self._decode_keys(records)
        if self._debezium is not None:
            payload, value_bad = self._debezium.decode(values)  # its last column is _op
        elif self._values is not None:
            payload, value_bad = self._decode_values(values)
        elif self.format is Format.JSON:
            payload, value_bad = self._decode_json(values)
        else:
            payload, value_bad = [values if isinstance(values, pa.Array) else pa.array(values, type=pa.binary())], {}
        bad_reasons = {**{i: f"key: {r}" for i, r in key_bad.items()}, **value_bad}
        if bad_reasons:
            total = len(values)
            payload = [_keep(column, total, value_bad, bad_reasons) for column in payload]
            if key_column is not None:
                key_column = _keep(key_column, total, key_bad, bad_reasons)
            good = records.take([i for i in range(total) if i not in bad_reasons])
        else:
            good = records
        if self._values is not None or self._keys is not None:
            self.schema = self._schema()
        if self.upsert_keys:
            payload = self._changes(payload, good)
        columns = payload + self._metadata_columns(good, key_column)
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if self.upsert_keys:
            batch = _without_rows(batch, len(values), bad_reasons, missing_keys(batch, self.upsert_keys))
        if "_timestamp" in self.metadata:
            batch = _without_rows(batch, len(values), bad_reasons, out_of_range_timestamps(batch.column("_timestamp")))
        if self.required_fields:
            problems = required_field_problems(batch, self.required_fields)
            if self.upsert_keys and problems:  # a delete's payload is null but for its key fields
                deletes = batch.column(OP_FIELD.name)
                problems = {row: reason for row, reason in problems.items() if deletes[row].as_py() != "d"}
            batch = _without_rows(batch, len(values), bad_reasons, problems)
        bad = tuple(BadRecord(i, r) for i, r in sorted(bad_reasons.items()))
        return BuiltBatch(batch, bad)

    # -- payload --------------------------------------------------------------------------------

    def _changes(self, payload: list[pa.Array], good: Records) -> list[pa.Array]:
        """Upsert mode: ``payload`` (of the ``good`` records) with its ``_op`` column last and the key
        fields of deletes that lack them taken from the record keys (:func:`~.changes.fill_keys`)."""
        if self._debezium is not None:
            columns, ops = payload[:-1], payload[-1]
        else:
            assert not isinstance(good.values, pa.Array)  # a column only under format=raw, never upsert mode
            columns, ops = payload, update_or_delete(good.values)
        keys = _read(good.keys, "keys")
        return fill_keys(self.payload_schema, columns, ops, keys, self.upsert_keys) + [ops]

    def _decode_json(self, values: list[bytes | None]) -> tuple[list[pa.Array], dict[int, str]]:
        """Payload columns of the good values and the bad ones (by index). With
        ``on-tombstone=row`` (and in upsert mode) a null value reads as ``{}``: every payload column null."""
        if self._tombstone_rows and None in values:
            values = [_EMPTY_OBJECT if v is None else v for v in values]
        table, bad = self._json.parse(values)
        return [table.column(f.name).combine_chunks().cast(f.type) for f in self.payload_schema], bad

    def _decode_values(self, values: list[bytes | None]) -> tuple[list[pa.Array], dict[int, str]]:
        """Registry format: payload columns of the good values (the newest schema seen) and the
        bad ones."""
        assert self._values is not None
        decoded = self._values.decode(values)
        if self._values.arrow_type is None:  # nothing decoded yet: no payload columns
            return [], decoded.bad
        fields = payload_fields(self._values.arrow_type, "value")
        if self._tombstone_rows:  # a tombstone's row has nulls in fields the schema requires
            fields = [f.with_nullable(True) for f in fields]
        self.payload_schema = pa.schema(fields)
        if pa.types.is_struct(decoded.array.type):
            return decoded.array.flatten(), decoded.bad
        return [decoded.array], decoded.bad

    def _decode_keys(self, records: Records) -> tuple[pa.Array | None, dict[int, str]]:
        """The decoded ``_key`` column of the good keys and the bad ones; ``(None, {})`` for raw
        keys or without ``_key``."""
        if self.key_format is KeyFormat.RAW or "_key" not in self.metadata:
            return None, {}
        keys = _read(records.keys, "keys")
        if self._keys is not None:
            decoded = self._keys.decode(keys)
            if self._keys.arrow_type is None:
                return pa.nulls(len(keys) - len(decoded.bad)), decoded.bad
            return decoded.array, decoded.bad
        try:
            return pa.array(keys, type=pa.binary()).cast(pa.string()), {}
        except pa.ArrowInvalid:
            pass
        bad: dict[int, str] = {}
        for index, key in enumerate(keys):
            try:
                if key is not None:
                    key.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad[index] = f"not UTF-8 ({exc.reason} at byte {exc.start})"
        good = [k for i, k in enumerate(keys) if i not in bad]
        return pa.array(good, type=pa.binary()).cast(pa.string()), bad

    # -- metadata -------------------------------------------------------------------------------

    def _metadata_columns(self, records: Records, key: pa.Array | None = None) -> list[pa.Array]:
        columns: list[pa.Array] = []
        for name in self.metadata:
            if name == "_topic":
                columns.append(topic_column(records.topics, len(records)))
            elif name == "_partition":
                columns.append(int32_array(records.partitions))
            elif name == "_offset":
                columns.append(int64_array(records.offsets))
            elif name == "_timestamp":
                columns.append(timestamp_array(_read(records.timestamps, "timestamps")))
            elif name == "_key" and key is not None:
                columns.append(key)
            elif name == "_key":
                columns.append(pa.array(_read(records.keys, "keys"), type=pa.binary()))
            elif name == "_headers":
                columns.append(pa.array(_read(records.headers, "headers"), type=HEADERS_TYPE))
        return columns


def topic_column(topics: list[str] | str, count: int) -> pa.DictionaryArray:
    """The dictionary-encoded ``_topic`` column; for one topic, all-zero indices with no per-row work."""
    if isinstance(topics, str):
        zeros = pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(bytes(4 * count))])
        return pa.DictionaryArray.from_arrays(zeros, pa.array([topics], type=pa.string()))
    return pa.array(topics, type=pa.string()).dictionary_encode()


def _without_rows(batch: pa.RecordBatch, total: int, bad_reasons: dict[int, str], late: dict[int, str]) -> pa.RecordBatch:
    """``batch`` (the rows of ``range(total)`` not in ``bad_reasons``) without its rows in ``late``
    (bad for a reason found after decoding: a ``_timestamp`` out of range, a required field null);
    those are added to ``bad_reasons`` under their input index."""
    if not late:
        return batch
    kept = [i for i in range(total) if i not in bad_reasons]
    for row, reason in late.items():
        bad_reasons[kept[row]] = reason
    return batch.filter(pa.array([row not in late for row in range(batch.num_rows)], type=pa.bool_()))


def _read(field: list[_T] | None, name: str) -> list[_T]:
    """A field the builder's columns need; the reader reads it (:class:`~laminar_kafka.kafka_source.decode.records.RecordFields`)."""
    if field is None:
        raise AssertionError(f"the records were read without their {name}")
    return field


def _keep(array: pa.Array, total: int, own_bad: dict[int, str], all_bad: dict[int, str]) -> pa.Array:
    """``array`` (one row per input index of ``range(total)`` not in ``own_bad``) without the rows
    of the indexes in ``all_bad`` (bad for another reason: value or key)."""
    if len(all_bad) == len(own_bad):
        return array
    mask = [i not in all_bad for i in range(total) if i not in own_bad]
    return array.filter(pa.array(mask, type=pa.bool_()))
