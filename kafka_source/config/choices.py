"""The closed choices of the source configuration: record and key formats, startup modes, the
bad-record and tombstone policies, the isolation level and the metadata column names. Pure values, no I/O;
:mod:`laminar_kafka.kafka_source.config.source_config` parses them from properties (and re-exports them)."""
from __future__ import annotations

import enum

__all__ = [
    "CHANGE_OPS",
    "METADATA_COLUMNS",
    "OP_COLUMN",
    "BadRecordPolicy",
    "Format",
    "IsolationLevel",
    "KeyFormat",
    "StartupMode",
    "TombstonePolicy",
]

METADATA_COLUMNS: tuple[str, ...] = (
    "_topic",
    "_partition",
    "_offset",
    "_timestamp",
    "_key",
    "_headers",
)
#: the change column of upsert mode (``upsert-keys``) and ``format=debezium-json``
OP_COLUMN = "_op"
#: the values of :data:`OP_COLUMN`: create, update, snapshot read, delete (Debezium's letters)
CHANGE_OPS: tuple[str, ...] = ("c", "u", "r", "d")


class Format(enum.Enum):
    RAW = "raw"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json-schema"
    #: Debezium's JSON change events (``before``, ``after``, ``op``), with or without the
    #: ``schema``/``payload`` wrapper
    DEBEZIUM_JSON = "debezium-json"

    @property
    def uses_registry(self) -> bool:
        """Whether records are in the Confluent wire format, decoded through the schema registry."""
        return self in (Format.AVRO, Format.PROTOBUF, Format.JSON_SCHEMA)

    @property
    def reads_json(self) -> bool:
        """Whether values are JSON decoded by ``pyarrow.json`` into the columns of ``json-schema`` or
        of a schema inferred from a sample (``json``; ``debezium-json``: the columns of a row)."""
        return self in (Format.JSON, Format.DEBEZIUM_JSON)


class KeyFormat(enum.Enum):
    """How the ``_key`` column is decoded (``key-format``)."""
    RAW = "raw"
    STRING = "string"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json-schema"

    @property
    def uses_registry(self) -> bool:
        return self in (KeyFormat.AVRO, KeyFormat.PROTOBUF, KeyFormat.JSON_SCHEMA)


class StartupMode(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    SPECIFIC_OFFSETS = "specific-offsets"


class BadRecordPolicy(enum.Enum):
    """What a record that does not decode does to the source (``on-bad-record``)."""

    #: the source fails; nothing moves, the same record fails again
    FAIL = "fail"
    #: the record is skipped: consumed, and handed over in ``SourceBatch.rejected``
    SKIP = "skip"


class TombstonePolicy(enum.Enum):
    """What a record with a null value (a tombstone: a delete on a compacted topic, as Debezium
    writes after each delete event) becomes under a decoded format (``on-tombstone``). Under
    ``format=raw`` a tombstone is always a row with a null ``value``; in upsert mode
    (``upsert-keys``, ``format=debezium-json``) it is always a delete of its key, and
    ``on-tombstone`` may not be set."""

    #: a bad record, like a value that does not decode (``on-bad-record`` decides)
    BAD = "bad"
    #: a row whose payload columns are all null; ``_key`` and the other metadata columns are kept
    ROW = "row"


class IsolationLevel(enum.Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"
