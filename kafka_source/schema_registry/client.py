"""The schema registry: its client, the Confluent wire format, and writer schemas cached by id.

Wire format (Confluent): byte 0 is the magic byte ``0``, bytes 1-4 the big-endian schema id, then
(Protobuf only) the message indexes as zigzag varints (a count, then the indexes; a single ``0``
byte means ``[0]``, the first message of the file), then the encoded payload.

Errors, and what the source does with them:

- a value without the magic byte, or truncated: :class:`WireFormatError` (a bad record);
- a schema id the registry does not know (HTTP 404, codes 40403/40400): :class:`UnknownSchemaError`
  (a bad record);
- a schema with no Arrow mapping: :class:`~laminar_kafka.kafka_source.schema_registry.arrow_types.UnsupportedSchemaError`
  (a bad record);
- the registry refuses the credentials (HTTP 401/403): :class:`ConfigurationError` (fatal);
- the registry is unreachable, times out or answers 5xx/429: :class:`TransientError` (nothing is
  consumed; the same records are decoded again on the next poll), also while the files or named
  types a schema references are fetched.

Protobuf schema strings may be base64 descriptors or ``.proto`` text: the Confluent registry
converts to the former for ``format=serialized``, Apicurio's Confluent-compatible API serves what
was registered (see :mod:`~laminar_kafka.kafka_source.schema_registry.proto_text`).

Schemas are fetched once per id (ids are immutable) and kept for the life of the
:class:`WriterSchemas`. ``mock://<scope>`` URLs give confluent-kafka's in-memory
``MockSchemaRegistryClient``, one per scope per process, so a test's serializer and the source
share it. Property values are never logged (they may hold credentials).
"""
from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from laminar_kafka.connector.errors import ConnectorError, TransientError
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.schema_registry.arrow_types import (
    UnsupportedSchemaError,
    avro_to_arrow,
    json_schema_to_arrow,
    protobuf_to_arrow,
)
from laminar_kafka.kafka_source.schema_registry.proto_text import file_descriptor_proto

logger = logging.getLogger(__name__)

__all__ = [
    "AvroWriter",
    "JsonWriter",
    "ProtobufWriter",
    "UnknownSchemaError",
    "WireFormatError",
    "WriterSchemas",
    "registry_client",
    "safe_url",
    "split_wire",
    "writer_type",
]

MAGIC_BYTE = 0
#: ``schema.registry.<key>`` values the client expects as numbers
_NUMERIC_KEYS = {"timeout": float, "cache.capacity": int, "cache.latest.ttl.sec": int,
                 "max.retries": int, "retries.wait.ms": int, "retries.max.wait.ms": int}
#: bounded defaults so one unreachable registry cannot hold a poll for long
_DEFAULTS = {"timeout": 10.0, "max.retries": 2}
#: imports every pool holds already (confluent-kafka's ``_init_pool``): never fetched as references
_BUILTIN_PROTO_PREFIXES = ("confluent/", "google/protobuf/", "google/type/")
_mock_clients: dict[str, SchemaRegistryClient] = {}
_mock_lock = threading.Lock()
_T = TypeVar("_T")


class WireFormatError(ConnectorError):
    """A value is not in the Confluent wire format (no magic byte, truncated)."""


class UnknownSchemaError(ConnectorError):
    """The registry does not know a record's schema id."""


def registry_client(url: str, properties: Mapping[str, str]) -> SchemaRegistryClient:
    """A client for the registry at ``url`` with ``properties`` (the ``schema.registry.<key>``
    pass-through, e.g. ``basic.auth.user.info``; numbers given as text are converted).

    ``mock://<scope>``: the process's shared mock client of that scope. Raises
    :class:`ConfigurationError` (without any property value) when the client rejects them.
    """
    if url.startswith("mock://"):
        with _mock_lock:
            if url not in _mock_clients:
                _mock_clients[url] = SchemaRegistryClient.new_client({"url": url})
            return _mock_clients[url]
    conf: dict[str, Any] = {"url": url, **_DEFAULTS}
    for key, value in properties.items():
        convert = _NUMERIC_KEYS.get(key)
        try:
            conf[key] = convert(value) if convert is not None else value
        except ValueError:
            raise ConfigurationError(f"schema.registry.{key} is not a number") from None
    try:
        return SchemaRegistryClient(conf)
    except (ValueError, TypeError) as exc:
        keys = ", ".join(sorted(properties))
        raise ConfigurationError(
            f"the schema registry client rejects its configuration (url {safe_url(url)!r}, keys: {keys}): "
            f"{type(exc).__name__}"
        ) from None


def split_wire(value: bytes, *, protobuf: bool) -> tuple[int, tuple[int, ...], memoryview]:
    """``(schema_id, message_indexes, payload)`` of a wire-format ``value``; raises
    :class:`WireFormatError`. ``message_indexes`` is ``()`` unless ``protobuf``."""
    if len(value) < 5:
        raise WireFormatError(f"payload of {len(value)} byte(s) is too short for the wire format")
    if value[0] != MAGIC_BYTE:
        raise WireFormatError(f"payload does not start with the magic byte 0 (got {value[0]})")
    schema_id = int.from_bytes(value[1:5], "big")
    view = memoryview(value)[5:]
    if not protobuf:
        return schema_id, (), view
    count, position = _zigzag(view, 0)
    if count == 0:
        return schema_id, (0,), view[position:]
    if count < 0 or count > 100:
        raise WireFormatError(f"invalid protobuf message index count {count}")
    indexes = []
    for _ in range(count):
        index, position = _zigzag(view, position)
        indexes.append(index)
    return schema_id, tuple(indexes), view[position:]


def _zigzag(view: memoryview, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if position >= len(view) or shift > 63:
            raise WireFormatError("truncated protobuf message indexes")
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), position


@dataclass(frozen=True)
class AvroWriter:
    """A parsed Avro writer schema (``uuid`` read as plain strings) and its Arrow type."""

    schema_id: int
    parsed: Any
    arrow_type: pa.DataType


@dataclass(frozen=True)
class JsonWriter:
    schema_id: int
    arrow_type: pa.DataType


@dataclass(frozen=True)
class ProtobufWriter:
    """A protobuf file descriptor (in its own pool); messages are picked by index path."""

    schema_id: int
    file: Any

    def message(self, indexes: tuple[int, ...]) -> Any:
        """The message descriptor at ``indexes`` (top-level index, then nested indexes)."""
        try:
            descriptor = list(self.file.message_types_by_name.values())[indexes[0]]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
        except IndexError:
            raise WireFormatError(f"schema id {self.schema_id} has no message at index {list(indexes)}") from None
        return descriptor


Writer = AvroWriter | JsonWriter | ProtobufWriter


class WriterSchemas:
    """Writer schemas of one format fetched from the registry by id, parsed once and cached.

    ``schema_type`` is ``AVRO``, ``PROTOBUF`` or ``JSON``. The source's reader thread calls
    :meth:`prefetch` for the ids of every chunk it fetches, so the event loop's :meth:`get` finds
    them cached (or the reason they are not) and never waits for the registry; a dict per outcome,
    each written by one call at a time, is all the two threads share.
    """

    def __init__(self, client: SchemaRegistryClient, schema_type: str) -> None:
        self._client = client
        self._type = schema_type
        self._cache: dict[int, Writer] = {}
        #: ids the registry does not know or whose schema has no Arrow mapping: never asked again
        self._refused: dict[int, ConnectorError] = {}
        #: ids a prefetch could not fetch (the registry unreachable): the next get raises this once
        self._unavailable: dict[int, TransientError] = {}

    def prefetch(self, schema_ids: Iterable[int]) -> None:
        """Fetch and parse every id not yet known (blocking; the reader thread). Never raises:
        a failure is kept for :meth:`get` to report on the poll."""
        for schema_id in schema_ids:
            if schema_id in self._cache or schema_id in self._refused:
                continue
            try:
                self.get(schema_id)
            except TransientError as exc:
                self._unavailable[schema_id] = exc
            except Exception:  # noqa: BLE001 - refused ids are kept by get; the rest get reports again
                pass

    def get(self, schema_id: int) -> Writer:
        """The writer schema ``schema_id``. Raises :class:`UnknownSchemaError`,
        :class:`UnsupportedSchemaError`, :class:`ConfigurationError` or :class:`TransientError`
        (see the module doc); a refused id raises again without asking the registry, an id a
        prefetch found unreachable raises :class:`TransientError` once without waiting."""
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        refused = self._refused.get(schema_id)
        if refused is not None:
            raise type(refused)(str(refused))
        unavailable = self._unavailable.pop(schema_id, None)
        if unavailable is not None:
            raise TransientError(str(unavailable), cause=unavailable)
        try:
            writer = self._fetch_and_parse(schema_id)
        except (UnknownSchemaError, UnsupportedSchemaError) as exc:
            self._refused[schema_id] = exc
            raise
        self._cache[schema_id] = writer
        logger.info("schema id %d (%s) cached: %s", schema_id, self._type, writer_type(writer))
        return writer

    def _fetch_and_parse(self, schema_id: int) -> Writer:
        schema = self._fetch(schema_id)
        if (schema.schema_type or "AVRO") != self._type:
            raise UnsupportedSchemaError(f"schema id {schema_id} is {schema.schema_type}, not {self._type}")
        try:
            return self._parse(schema_id, schema)
        except (ConnectorError, ConfigurationError):  # UnsupportedSchemaError, a registry failure fetching references
            raise
        except Exception as exc:  # a malformed schema text: no Arrow mapping either
            raise UnsupportedSchemaError(f"schema id {schema_id} does not parse: {exc}") from exc

    def latest(self, subject: str) -> int:
        """The schema id of the latest version of ``subject``; raises as :meth:`get`."""
        found = _registry_call(lambda: self._client.get_latest_version(subject), f"subject {subject!r}")
        if found.schema_id is None:
            raise UnsupportedSchemaError(f"subject {subject!r}: the registry's latest version names no schema id")
        return found.schema_id

    def _fetch(self, schema_id: int) -> Schema:
        fmt = "serialized" if self._type == "PROTOBUF" else None
        return _registry_call(lambda: self._client.get_schema(schema_id, fmt=fmt), f"schema id {schema_id}")

    def _parse(self, schema_id: int, schema: Schema) -> Writer:
        text = schema.schema_str or ""
        if self._type == "AVRO":
            raw = _without_uuid(json.loads(text) if text.strip()[:1] in "{[\"" else text)
            parsed = self._avro_with_references(raw, schema) if schema.references else fastavro.parse_schema(raw)
            return AvroWriter(schema_id, parsed, avro_to_arrow(parsed))
        if self._type == "JSON":
            if schema.references:
                raise UnsupportedSchemaError(f"schema id {schema_id}: JSON Schema references are not supported")
            return JsonWriter(schema_id, json_schema_to_arrow(json.loads(text)))
        return ProtobufWriter(schema_id, self._protobuf_file(schema))

    def _avro_with_references(self, raw: Any, schema: Schema) -> Any:
        """``raw`` parsed with the named types of its registry references inlined."""
        # private in confluent-kafka: the client's own resolution of an Avro schema's registry
        # references (what its AvroDeserializer does); no public function returns the named types
        from confluent_kafka.schema_registry._sync.avro import _resolve_named_schema
        from confluent_kafka.schema_registry.common.avro import parse_schema_with_repo

        named = {name: _without_uuid(value) for name, value in _resolve_named_schema(schema, self._checked_versions()).items()}
        return parse_schema_with_repo(json.dumps(raw), named)

    def _checked_versions(self) -> Any:
        """A stand-in client for confluent-kafka's reference resolvers: its ``get_version`` maps
        registry failures as :meth:`get` says, so an unreachable registry while a reference is fetched
        is transient, not a schema refused for the life of the process."""
        client = self._client

        class _Checked:
            def get_version(self, subject: str, version: Any, *args: Any, **kwargs: Any) -> Any:
                return _registry_call(lambda: client.get_version(subject, version, *args, **kwargs),
                                      f"reference subject {subject!r} version {version}")

        return _Checked()

    def _protobuf_file(self, schema: Schema) -> Any:
        """The file descriptor of ``schema`` in a pool of its own, with the well-known files and the
        files its registry references name (fetched recursively). Each schema string may be the base64
        serialized descriptor (Confluent's answer to ``format=serialized``) or ``.proto`` text (what
        Apicurio serves when text was registered: it ignores ``format``); see
        :func:`~laminar_kafka.kafka_source.schema_registry.proto_text.file_descriptor_proto`."""
        # private in confluent-kafka: adds the well-known .proto files to a descriptor pool, as its
        # ProtobufDeserializer does; no public function does it
        from confluent_kafka.schema_registry.common.protobuf import _init_pool
        from google.protobuf.descriptor_pool import DescriptorPool

        pool = DescriptorPool()
        _init_pool(pool)
        self._add_protobuf_references(schema, pool, set())
        proto = file_descriptor_proto("default", schema.schema_str or "")
        pool.Add(proto)
        return pool.FindFileByName(proto.name)

    def _add_protobuf_references(self, schema: Schema, pool: Any, added: set[str]) -> None:
        """Add the files ``schema`` references to ``pool``, dependencies first; registry failures
        raise as :meth:`get` says (an unreachable registry is transient, not a refused schema)."""
        for ref in schema.references or ():
            if not ref.name or ref.name in added or ref.name.startswith(_BUILTIN_PROTO_PREFIXES):
                continue  # well-known files are in every pool already
            added.add(ref.name)
            if ref.subject is None or ref.version is None:
                raise UnsupportedSchemaError(f"protobuf reference {ref.name!r} names no subject and version")
            subject, version = ref.subject, ref.version
            found = _registry_call(functools.partial(self._client.get_version, subject, version, True, "serialized"),
                                   f"reference {ref.name!r} (subject {subject!r} version {version})")
            self._add_protobuf_references(found.schema, pool, added)
            pool.Add(file_descriptor_proto(ref.name, found.schema.schema_str or ""))


def _registry_call(call: Callable[[], _T], what: str) -> _T:
    """``call()`` with registry failures mapped to this package's errors (see the module doc)."""
    try:
        return call()
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            raise UnknownSchemaError(f"{what} is unknown to the registry ({exc.error_code})") from None
        if exc.http_status_code in (401, 403):
            raise ConfigurationError(
                f"the schema registry refuses access (HTTP {exc.http_status_code}); check "
                "schema.registry.basic.auth.user.info"
            ) from None
        raise TransientError(f"the schema registry failed on {what}: {exc}", cause=exc) from exc
    except Exception as exc:  # the HTTP transport: connection refused, DNS, TLS, timeout
        raise TransientError(
            f"the schema registry is unreachable ({what}): {type(exc).__name__}: {exc}", cause=exc
        ) from exc


def safe_url(url: str) -> str:
    """``url`` without user info (``http://user:password@host`` -> ``http://***@host``)."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def writer_type(writer: Writer, indexes: tuple[int, ...] = (0,)) -> pa.DataType:
    """The Arrow type of ``writer`` (of its message at ``indexes`` for Protobuf)."""
    if isinstance(writer, ProtobufWriter):
        return protobuf_to_arrow(writer.message(indexes))
    return writer.arrow_type


def _without_uuid(schema: Any) -> Any:
    """``schema`` with ``logicalType: uuid`` removed, so fastavro reads such values as strings."""
    if isinstance(schema, list):
        return [_without_uuid(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _without_uuid(v) for k, v in schema.items() if not (k == "logicalType" and v == "uuid")}
    return schema
