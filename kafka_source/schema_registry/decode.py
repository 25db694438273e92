"""Decoding schema-registry records (Avro, Protobuf, JSON Schema) into one typed Arrow array.

Schema evolution contract (one decoder per source generation, for values or for keys):

- the decoder's :attr:`RegistryDecoder.arrow_type` is the type of the **newest writer schema seen
  so far**: the highest schema id among every record decoded by this decoder (registries hand out
  ids in increasing order, so a new version of a subject has a higher id). It never goes back to
  an older schema while the generation lives;
- every record of a batch is projected into that type: Avro by schema resolution (the writer
  schema of the record, the newest as reader schema: a field added with a default gets its default,
  a removed field is dropped); Protobuf and JSON Schema by field name (a field the record lacks is
  null, an unknown one is dropped). A record that cannot be projected is a :class:`BadRecord`;
- so each batch has ONE schema, and a compatible change gives later batches the evolved schema:
  ``batch.schema`` differs from the previous batch's (a sink starts a new file). After a restart the
  first batches may again carry an older schema until a newer record is read.

Per-record Python is limited to the decoding call itself (fastavro ``schemaless_reader``, protobuf
``ParseFromString`` plus a conversion to dicts, ``json.loads``); the Arrow array is built by one
``pa.array(rows, type=...)`` call per batch (rows are tried one by one only when that call fails,
to find the bad ones).
"""
from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro import schemaless_reader

from laminar_kafka.kafka_source.schema_registry.arrow_types import UnsupportedSchemaError, json_storage_type
from laminar_kafka.kafka_source.schema_registry.arrow_types import is_repeated as _is_repeated
from laminar_kafka.kafka_source.schema_registry.client import (
    AvroWriter,
    JsonWriter,
    ProtobufWriter,
    UnknownSchemaError,
    WireFormatError,
    WriterSchemas,
    split_wire,
    writer_type,
)

logger = logging.getLogger(__name__)

__all__ = ["Decoded", "RegistryDecoder", "SCHEMA_TYPES"]

#: ``format`` value -> the registry's schema type
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Decoded:
    """``array`` holds one value per good input (in order); ``bad`` maps input index -> reason."""

    array: pa.Array
    bad: dict[int, str]


class RegistryDecoder:
    """Decodes wire-format values of one format into arrays of the newest type seen (module doc).

    ``null_is_bad``: a null value (tombstone) is a bad record (values) or a null (keys).
    """

    def __init__(self, client: SchemaRegistryClient, record_format: str, *, null_is_bad: bool) -> None:
        self._schema_type = SCHEMA_TYPES[record_format]
        self._schemas = WriterSchemas(client, self._schema_type)
        self._null_is_bad = null_is_bad
        self._protobuf = self._schema_type == "PROTOBUF"
        #: (schema id, message indexes) of the newest writer seen, and its Arrow type
        self._newest: tuple[int, tuple[int, ...]] | None = None
        self.arrow_type: pa.DataType | None = None

    def prefetch(self, values: Iterable[bytes | None]) -> None:
        """Fetch the writer schemas ``values`` name that are not known yet (blocking: the reader
        thread, before the chunk reaches the FIFO); never raises (see :meth:`WriterSchemas.prefetch`)."""
        ids = {int.from_bytes(v[1:5], "big") for v in values if v is not None and len(v) >= 5 and v[0] == 0}
        self._schemas.prefetch(sorted(ids))

    def decode(self, values: Sequence[bytes | None]) -> Decoded:
        """Decode ``values``; raises :class:`~laminar_kafka.connector.errors.ConfigurationError` or
        :class:`~laminar_kafka.connector.errors.TransientError` for registry failures (nothing is consumed)."""
        bad: dict[int, str] = {}
        framed: list[tuple[int, int, tuple[int, ...], memoryview] | None] = []
        for index, value in enumerate(values):
            if value is None:
                framed.append(None)
                if self._null_is_bad:
                    bad[index] = "null payload (tombstone)"
                continue
            try:
                framed.append((index, *split_wire(value, protobuf=self._protobuf)))
            except WireFormatError as exc:
                framed.append(None)
                bad[index] = str(exc)
        writers = self._writers({(f[1], f[2]) for f in framed if f is not None and f[0] not in bad}, framed, bad)
        if self.arrow_type is None:
            return Decoded(pa.nulls(0), bad)  # nothing decodable yet; every value is bad or null
        rows: list[Any] = []
        for index, item in enumerate(framed):
            if index in bad:
                continue
            if item is None:
                rows.append(None)
                continue
            _, schema_id, indexes, payload = item
            try:
                rows.append(self._read(writers[(schema_id, indexes)], indexes, payload))
            except Exception as exc:  # noqa: BLE001 - any decoder failure marks this record bad
                bad[index] = f"schema id {schema_id}: {type(exc).__name__}: {str(exc)[:200]}"
        return Decoded(self._to_array(rows, [i for i in range(len(values)) if i not in bad], bad), bad)

    # -- schemas --------------------------------------------------------------------------------

    def _writers(
        self, keys: set[tuple[int, tuple[int, ...]]], framed: list[Any], bad: dict[int, str]
    ) -> dict[tuple[int, tuple[int, ...]], Any]:
        """The writer of every ``(id, indexes)`` in ``keys``; records of unusable ones become bad.
        Moves :attr:`arrow_type` to the newest usable writer."""
        writers: dict[tuple[int, tuple[int, ...]], Any] = {}
        failures: dict[tuple[int, tuple[int, ...]], str] = {}
        for key in sorted(keys):
            try:
                writer = self._schemas.get(key[0])
                arrow_type = writer_type(writer, key[1])
            except (UnknownSchemaError, UnsupportedSchemaError, WireFormatError) as exc:
                failures[key] = str(exc)
                continue
            writers[key] = writer
            if self._newest is None or key > self._newest:
                if self.arrow_type is not None and arrow_type != self.arrow_type:
                    logger.info("%s schema evolves to id %d: %s", self._schema_type, key[0], arrow_type)
                self._newest, self.arrow_type = key, arrow_type
        if failures:
            for item in framed:
                if item is not None and (item[1], item[2]) in failures and item[0] not in bad:
                    bad[item[0]] = failures[(item[1], item[2])]
        return writers

    # -- records --------------------------------------------------------------------------------

    def _read(self, writer: Any, indexes: tuple[int, ...], payload: memoryview) -> Any:
        if isinstance(writer, AvroWriter):
            assert self._newest is not None
            newest = self._schemas.get(self._newest[0])
            assert isinstance(newest, AvroWriter)  # one decoder's writers are all of its one schema type
            reader = None if newest is writer else newest.parsed
            stream = io.BytesIO(payload)
            value = schemaless_reader(stream, writer.parsed, reader)
            if stream.tell() != len(payload):
                raise ValueError(f"{len(payload) - stream.tell()} trailing byte(s) after the record")
            return value
        if isinstance(writer, JsonWriter):
            return json.loads(bytes(payload))
        assert isinstance(writer, ProtobufWriter)
        message = _message_class(writer.message(indexes))()
        message.ParseFromString(bytes(payload))
        return _message_dict(message)

    def _to_array(self, rows: list[Any], good: list[int], bad: dict[int, str]) -> pa.Array:
        """One array of :attr:`arrow_type` from ``rows`` (those of input indexes ``good``); rows
        that do not convert are moved to ``bad`` (and dropped)."""
        target = self.arrow_type
        assert target is not None
        convert = self._converter(target)
        try:
            return convert(rows)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        kept: list[Any] = []
        for index, row in zip(good, rows, strict=True):
            try:
                convert([row])
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                bad[index] = f"does not match its schema: {str(exc).splitlines()[0][:200]}"
            else:
                kept.append(row)
        return convert(kept)

    def _converter(self, target: pa.DataType) -> Callable[[list[Any]], pa.Array]:
        if self._schema_type != "JSON":
            return lambda rows: pa.array(rows, type=target)
        storage = json_storage_type(target)
        if storage == target:
            return lambda rows: pa.array(rows, type=target)
        return lambda rows: pa.array(rows, type=storage).cast(target)


# -- protobuf messages to Python values ---------------------------------------------------------

_classes: dict[str, Any] = {}


def _message_class(descriptor: Any) -> Any:
    from google.protobuf.message_factory import GetMessageClass

    key = f"{id(descriptor.file.pool)}:{descriptor.full_name}"
    if key not in _classes:
        _classes[key] = GetMessageClass(descriptor)
    return _classes[key]


_WRAPPERS = frozenset(
    f"google.protobuf.{n}Value" for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)


def _message_dict(message: Any) -> Any:
    """``message`` as Python values matching :func:`~laminar_kafka.kafka_source.schema_registry.arrow_types.protobuf_to_arrow`."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        return _EPOCH + dt.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    if name == "google.protobuf.Duration":
        return dt.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    if name in _WRAPPERS:
        return message.value
    row: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if _is_repeated(field):
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                row[field.name] = [(k, _field_value(value_field, v)) for k, v in value.items()]
            else:
                row[field.name] = [_field_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            row[field.name] = None
        else:
            row[field.name] = _field_value(field, value)
    return row


def _field_value(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return _message_dict(value)
    if field.enum_type is not None:
        described = field.enum_type.values_by_number.get(value)
        return described.name if described is not None else str(value)
    return value

