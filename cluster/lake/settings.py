"""How a pipeline lays out its output: the table format, the Iceberg catalog.

Values only, no I/O. The Parquet directory and the Iceberg table share one file layout (Hive style,
under the output root)::

    <topic>/dt=YYYY-MM-DD/epoch-<E>.node-<N>.boot-<B>.seq-<S>.parquet            partition-by day
    <topic>/dt=YYYY-MM-DD/hour=HH/epoch-...parquet                              partition-by hour
    <topic>/epoch-...parquet                                                    partition-by none
    <topic>/region=eu/customer_id_bucket=3/epoch-...parquet                     region, bucket[16](customer_id)

(:mod:`laminar_kafka.cluster.lake.partition_spec` has the whole ``partition-by`` grammar). With the
Iceberg format the same files become the data files of one Iceberg table per topic (location
``<output>/<topic>``), partitioned by the same transforms.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar_kafka.errors import ConfigurationError

__all__ = ["IcebergSettings", "LakeTarget", "TableFormat", "TableLocation", "table_name_of"]


class TableFormat(enum.Enum):
    """What the published files become: a Parquet directory tree, or an Apache Iceberg table."""

    PARQUET = "parquet"
    ICEBERG = "iceberg"


class TableLocation(enum.Enum):
    """Where a node creates a topic's Iceberg table: at ``<output>/<topic>`` (the lake's own layout,
    metadata beside the data files), or wherever the catalog places it (a catalog that manages its
    tables' locations, such as SeaweedFS's or S3 Tables, refuses any other). Either way the data
    files are the lake's, under ``<output>/<topic>/``; a catalog accepts data files anywhere."""

    OUTPUT = "output"
    CATALOG = "catalog"


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def table_name_of(topic: str) -> str:
    """The default Iceberg table name of a topic: dots and dashes become underscores."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic)


@dataclass(frozen=True)
class IcebergSettings:
    """Where a pipeline's Iceberg tables live.

    ``catalog_uri``: ``None`` (an embedded SQL catalog on SQLite at ``<output>/_catalog/catalog.db``;
    local outputs only), ``sqlite:///<path>`` (a SQLite catalog at that path), or an ``http(s)://``
    REST catalog. ``namespace``: the Iceberg namespace (default: the pipeline name). ``table``: the
    table name (default: :func:`table_name_of` the topic; only for single-topic pipelines).
    ``properties``: extra catalog / FileIO properties (``[iceberg]`` in the config file, for example
    ``token``, ``credential``, ``s3.endpoint``); secrets among them are never logged.
    ``table_location``: where a table the node creates goes (:class:`TableLocation`).
    ``upsert_keys``: the key columns of upsert mode (the source's ``upsert-keys``; empty: append
    mode), the identifier fields of the tables (see :mod:`laminar_kafka.cluster.lake.iceberg.upsert`).
    """

    namespace: str
    catalog_uri: str | None = None
    table: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    table_location: TableLocation = TableLocation.OUTPUT
    #: rows routed by a ``table-template``: a file's first directory is its table's name
    routed: bool = False
    upsert_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label, value in (("namespace", self.namespace), ("table", self.table)):
            if value is not None and not _IDENTIFIER.fullmatch(value):
                raise ConfigurationError(f"iceberg {label} {value!r} must match {_IDENTIFIER.pattern}")
        uri = self.catalog_uri
        if uri is not None and not uri.startswith(("sqlite:///", "http://", "https://")):
            raise ConfigurationError(
                f"catalog-uri {uri!r} is not supported: use sqlite:///<path> or an http(s):// REST catalog"
            )

    def table_of(self, topic: str) -> str:
        """The table name a topic lands into."""
        return self.table or table_name_of(topic)


@dataclass(frozen=True)
class LakeTarget:
    """Where a reader of the lake (``verify``, ``compact``, the demo) finds it: the output, its
    format and, for Iceberg, the catalog."""

    output: str
    table_format: TableFormat
    pipeline: str
    iceberg: IcebergSettings | None

    def table_of(self, topic: str) -> str:
        assert self.iceberg is not None
        return self.iceberg.table_of(topic)
