"""The closed choices of the source configuration: record and key formats, startup modes, the
bad-record and tombstone policies, the isolation level and the metadata column names. Pure values, no I/O;
:mod:`laminar_kafka.kafka_source.config.source_config` parses them from properties (and re-exports them)."""
from __future__ import annotations

import enum

__all__ = [
    "METADATA_COLUMNS",
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


class Format(enum.Enum):
    RAW = "raw"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json-schema"

    @property
    def uses_registry(self) -> bool:
        """Whether records are in the Confluent wire format, decoded through the schema registry."""
        return self in (Format.AVRO, Format.PROTOBUF, Format.JSON_SCHEMA)


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
    ``format=raw`` a tombstone is always a row with a null ``value``."""

    #: a bad record, like a value that does not decode (``on-bad-record`` decides)
    BAD = "bad"
    #: a row whose payload columns are all null; ``_key`` and the other metadata columns are kept
    ROW = "row"


class IsolationLevel(enum.Enum):
    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"
