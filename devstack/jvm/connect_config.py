"""The configuration of a Kafka Connect worker and of Apache Iceberg's sink connector (pure, no I/O).

`worker_properties` is a distributed worker's ``connect-distributed.properties``; `iceberg_sink_config`
the JSON object ``PUT /connectors/<name>/config`` takes. What the sink lands is chosen to match what a
``laminar-kafka run --format raw`` node lands from the same topic: the record value as the binary
column ``value`` and the Kafka coordinates as ``_topic``, ``_partition``, ``_offset`` and
``_timestamp`` (record timestamp, milliseconds). The sink maps only structs and maps (it has no raw
byte mode), so the worker reads values with ``ByteArrayConverter`` and two of Kafka Connect's own
transforms build the row: ``HoistField$Value`` wraps the bytes as ``{"value": <bytes>}`` (schemaless),
``InsertField$Value`` adds the coordinates. The table must exist with those columns
(`SINK_COLUMNS`); the sink does not create it (``iceberg.tables.auto-create-enabled`` stays false).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, IcebergType, IntegerType, LongType, NestedField, StringType, TimestampType

__all__ = [
    "BYTE_ARRAY_CONVERTER", "SINK_COLUMNS", "SINK_CONNECTOR_CLASS", "SINK_TABLE_PROPERTIES", "IcebergSinkSettings",
    "WorkerSettings", "iceberg_sink_config", "render_properties", "sink_table_schema", "worker_properties",
]

BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
SINK_CONNECTOR_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
#: (column, Iceberg type, required) of the table the sink lands into, in order: the columns (and
#: nullability) a raw-format node lands (``_timestamp`` a timestamp without zone)
SINK_COLUMNS: tuple[tuple[str, IcebergType, bool], ...] = (
    ("_topic", StringType(), True), ("_partition", IntegerType(), True), ("_offset", LongType(), True),
    ("_timestamp", TimestampType(), False), ("value", BinaryType(), False),
)
#: the sink table's properties: Snappy, the codec of the node's Parquet files (Arrow's default;
#: Iceberg's own default is zstd), so both sides encode alike
SINK_TABLE_PROPERTIES: dict[str, str] = {"write.parquet.compression-codec": "snappy"}
#: Hadoop's raw local file system for ``file:`` locations: no ``.crc`` side files in the lake
_RAW_LOCAL_FS = "org.apache.hadoop.fs.RawLocalFileSystem"


@dataclass(frozen=True)
class WorkerSettings:
    """One distributed worker: its Kafka, its group, its REST port, the prefix of its three internal
    topics (``<prefix>-configs``, ``-offsets``, ``-status``, replication 1: one broker), and
    ``offset_flush_interval_ms``.

    That last one is not only how often source offsets are flushed: a sink task's consumer ``poll``
    waits at most until the next offset commit, and Iceberg's sink reads its control topic (the
    coordinator's "start a commit") only inside ``put``, which runs once per ``poll``. With Kafka
    Connect's default of 60 s, records that arrive and then stop wait up to a minute before a commit
    starts for them (measured: the first commit of a quiet topic came 60 s after the task started).
    500 ms is what Iceberg's own docker-compose test setup uses.
    """

    bootstrap: str
    group_id: str
    rest_port: int
    storage_prefix: str
    offset_flush_interval_ms: int = 500

    @property
    def config_topic(self) -> str:
        return f"{self.storage_prefix}-configs"

    @property
    def offset_topic(self) -> str:
        return f"{self.storage_prefix}-offsets"

    @property
    def status_topic(self) -> str:
        return f"{self.storage_prefix}-status"


def worker_properties(settings: WorkerSettings) -> dict[str, str]:
    """The worker's properties: Kafka Connect's defaults but for what a one-broker loopback stack needs
    (replication 1, the REST listener on 127.0.0.1), the byte-array converters and the offset flush
    interval (see `WorkerSettings`)."""
    return {
        "bootstrap.servers": settings.bootstrap,
        "group.id": settings.group_id,
        "key.converter": BYTE_ARRAY_CONVERTER,
        "value.converter": BYTE_ARRAY_CONVERTER,
        "config.storage.topic": settings.config_topic,
        "offset.storage.topic": settings.offset_topic,
        "status.storage.topic": settings.status_topic,
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "listeners": f"http://127.0.0.1:{settings.rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(settings.rest_port),
        "offset.flush.interval.ms": str(settings.offset_flush_interval_ms),
    }


@dataclass(frozen=True)
class IcebergSinkSettings:
    """Apache Iceberg's sink on one topic into one existing table of a REST catalog.

    ``table`` is ``<namespace>.<name>``; ``control_topic`` the sink's coordination topic (one
    partition; the broker must have it: the sink does not create it); ``commit_interval_ms`` how often
    its coordinator commits (the sink's default is 5 minutes); ``tasks`` the connector's
    ``tasks.max``; ``commit_timeout_ms`` how long a commit waits for every task's data files.
    """

    topic: str
    table: str
    catalog_uri: str
    control_topic: str
    commit_interval_ms: int = 2_000
    commit_timeout_ms: int = 30_000
    tasks: int = 1

    def __post_init__(self) -> None:
        if "." not in self.table:
            raise ValueError(f"table {self.table!r}: expected <namespace>.<name>")
        if self.commit_interval_ms <= 0 or self.commit_timeout_ms <= 0 or self.tasks <= 0:
            raise ValueError("commit_interval_ms, commit_timeout_ms and tasks must be positive")


def iceberg_sink_config(settings: IcebergSinkSettings) -> dict[str, str]:
    """The connector's configuration (see the module doc for the row it builds)."""
    return {
        "connector.class": SINK_CONNECTOR_CLASS,
        "tasks.max": str(settings.tasks),
        "topics": settings.topic,
        "key.converter": BYTE_ARRAY_CONVERTER,
        "value.converter": BYTE_ARRAY_CONVERTER,
        "transforms": "hoist,coordinates",
        "transforms.hoist.type": "org.apache.kafka.connect.transforms.HoistField$Value",
        "transforms.hoist.field": "value",
        "transforms.coordinates.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.coordinates.topic.field": "_topic",
        "transforms.coordinates.partition.field": "_partition",
        "transforms.coordinates.offset.field": "_offset",
        "transforms.coordinates.timestamp.field": "_timestamp",
        "iceberg.tables": settings.table,
        "iceberg.catalog.type": "rest",
        "iceberg.catalog.uri": settings.catalog_uri,
        "iceberg.hadoop.fs.file.impl": _RAW_LOCAL_FS,
        "iceberg.control.topic": settings.control_topic,
        "iceberg.control.commit.interval-ms": str(settings.commit_interval_ms),
        "iceberg.control.commit.timeout-ms": str(settings.commit_timeout_ms),
        # the control consumer of a fresh connector reads its control topic from the start (as
        # Iceberg's own integration tests configure it)
        "iceberg.kafka.auto.offset.reset": "earliest",
    }


def sink_table_schema() -> Schema:
    """The Iceberg schema of :data:`SINK_COLUMNS` (field ids from 1)."""
    return Schema(*(NestedField(field_id=index, name=name, field_type=kind, required=required)
                    for index, (name, kind, required) in enumerate(SINK_COLUMNS, start=1)))


def render_properties(values: Mapping[str, str]) -> str:
    """A Java properties file of ``values`` (one ``key=value`` a line; ``\\``, ``:``, ``=`` escaped in
    values as Java's ``Properties.load`` reads them back)."""
    def escaped(text: str) -> str:
        return text.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")

    return "".join(f"{key}={escaped(value)}\n" for key, value in values.items())
