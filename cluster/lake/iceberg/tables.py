"""Iceberg catalogs and tables of a pipeline's output: opening, creating, checking, reading.

The pieces :mod:`laminar_kafka.cluster.lake.iceberg.commit` and :mod:`laminar_kafka.cluster.lake.iceberg.maintenance` share:

- :func:`open_catalog`: the catalog an :class:`~laminar_kafka.cluster.lake.settings.IcebergSettings` names (an
  embedded SQLite catalog under the output by default, ``sqlite:///path``, or a REST catalog);
  failures are one :class:`ConfigurationError` line naming the catalog, never a traceback.
- :func:`absolute_path`: the URI pyiceberg's FileIO reads for a path relative to the output root.
- :func:`iceberg_ready` / :func:`iceberg_schema_of`: Arrow schemas as Iceberg sees them (no
  dictionary type); what an epoch's files do to a table's schema is
  :mod:`laminar_kafka.cluster.lake.iceberg.evolution`.
- :func:`read_offsets` / :func:`data_file_count`: what ``verify`` reads of the current snapshot.

pyiceberg's known-noisy log lines are filtered (:func:`quiet_pyiceberg`); catalog properties whose
name looks secret are never logged (:func:`loggable_properties`).
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import warnings
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

# private in pyiceberg 0.12 (pinned <0.13): the Arrow-to-Iceberg conversion of a schema without
# field ids, which the public pyarrow_to_schema makes only given a name mapping
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Table

from laminar_kafka.cluster.errors import SinkError
from laminar_kafka.cluster.lake.settings import IcebergSettings
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = [
    "CATALOG_NAME",
    "OFFSET_COLUMNS",
    "TIMESTAMP_COLUMN",
    "absolute_path",
    "data_file_count",
    "describe_error",
    "iceberg_ready",
    "iceberg_schema_of",
    "load_table_or_none",
    "loggable_properties",
    "open_catalog",
    "quiet_pyiceberg",
    "read_offsets",
    "table_location",
]

CATALOG_NAME = "laminar"
TIMESTAMP_COLUMN = "_timestamp"
OFFSET_COLUMNS = ("_topic", "_partition", "_offset")
_SECRET_MARKERS = ("secret", "password", "token", "credential", "key")
_NOISY_MESSAGES = ("Iceberg does not have a dictionary type",)
_URI_SCHEMES = {"local": "", "s3": "s3://", "gcs": "gs://"}


class _NoisyLogFilter(logging.Filter):
    """Drops pyiceberg log lines that say nothing to an operator (the dictionary-type notice)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not message.startswith(_NOISY_MESSAGES)


_FILTER = _NoisyLogFilter()


def quiet_pyiceberg() -> None:
    """Filter pyiceberg's known-noisy log lines and warnings; its INFO lines ("Defaulting to PyArrow
    FileIO") stay out of the CLI's stderr unless someone set the ``pyiceberg`` level. Idempotent."""
    root = logging.getLogger("pyiceberg")
    if root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
    for name in ("pyiceberg.io.pyarrow", "pyiceberg.io", "pyiceberg"):
        target = logging.getLogger(name)
        if _FILTER not in target.filters:
            target.addFilter(_FILTER)
    warnings.filterwarnings("ignore", message=".*does not have a dictionary type.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pyiceberg(\..*)?")


quiet_pyiceberg()


def loggable_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with the value of every secret-looking key replaced by ``***``."""
    return {
        name: "***" if any(marker in name.lower() for marker in _SECRET_MARKERS) else value
        for name, value in properties.items()
    }


def safe_uri(uri: str) -> str:
    """``uri`` without user info (a password in a URI is never shown)."""
    parts = urlsplit(uri)
    if parts.username is None and parts.password is None:
        return uri
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def describe_error(exc: BaseException) -> str:
    """One line: the exception type and the first line of its message (at most 200 characters)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def absolute_path(fs: pafs.FileSystem, root: str, relative: str) -> str:
    """The URI pyiceberg reads for ``relative`` (to the output root): a plain absolute path on the
    local filesystem, ``s3://<root>/<relative>`` on S3 (a pyarrow S3 root is ``bucket/prefix``).

    Raises :class:`SinkError` for a filesystem pyiceberg's FileIO cannot address.
    """
    scheme = _URI_SCHEMES.get(fs.type_name)
    if scheme is None:
        raise SinkError(f"an iceberg output cannot be on a {fs.type_name!r} filesystem")
    root = root.rstrip("/")
    relative = relative.strip("/")
    path = f"{root}/{relative}" if relative else root
    return f"{scheme}{path}"


def table_location(fs: pafs.FileSystem, root: str, topic: str) -> str:
    """Where a topic's table lives: ``<output>/<topic>`` (data and ``metadata/`` side by side)."""
    return absolute_path(fs, root, topic)


def s3_properties_from(env: Mapping[str, str]) -> dict[str, str]:
    """pyiceberg FileIO properties from the standard AWS variables the Parquet side (pyarrow) reads
    by itself: ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` -> ``s3.endpoint``, ``AWS_REGION`` /
    ``AWS_DEFAULT_REGION`` -> ``s3.region`` (without a region pyiceberg asks AWS where the bucket is,
    which an S3-compatible server cannot answer). ``[iceberg]`` properties override these. Pure."""
    properties: dict[str, str] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        properties["s3.endpoint"] = endpoint
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        properties["s3.region"] = region
    return properties


def open_catalog(settings: IcebergSettings, fs: pafs.FileSystem, root: str) -> Catalog:
    """Open the catalog ``settings`` names. Raises :class:`ConfigurationError` (one line naming the
    catalog URI) when it cannot be opened: an s3 output without ``catalog_uri``, a SQLite file that
    cannot be created, an unreachable or refusing REST catalog."""
    properties = {**s3_properties_from(os.environ), **settings.properties}
    uri = settings.catalog_uri
    try:
        if uri is None:
            if fs.type_name != "local":
                raise ConfigurationError("an s3 output needs catalog-uri (a REST catalog, or sqlite:///<path>)")
            directory = f"{root}/_catalog"
            os.makedirs(directory, exist_ok=True)
            uri = f"sqlite:///{directory}/catalog.db"
            return _sql_catalog(uri, absolute_path(fs, root, ""), properties)
        if uri.startswith("sqlite:///"):
            return _sql_catalog(uri, absolute_path(fs, root, ""), properties)
        if uri.startswith(("http://", "https://")):
            from pyiceberg.catalog.rest import RestCatalog

            logger.debug("opening REST catalog %s with properties %s", safe_uri(uri), loggable_properties(properties))
            return RestCatalog(CATALOG_NAME, **{**properties, "uri": uri})
        raise ConfigurationError(f"catalog-uri {safe_uri(uri)!r} is not supported: use sqlite:///<path> or http(s)://")
    except ConfigurationError:
        raise
    except Exception as exc:  # noqa: BLE001 - any catalog client failure is one line at start
        shown = safe_uri(uri) if uri else "the embedded catalog"
        raise ConfigurationError(f"cannot open iceberg catalog {shown}: {describe_error(exc)}", cause=exc) from None


def _sql_catalog(uri: str, warehouse: str, properties: dict[str, str]) -> Catalog:
    from pyiceberg.catalog.sql import SqlCatalog

    path = uri[len("sqlite:///"):]
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise ConfigurationError(f"cannot open iceberg catalog {uri}: directory {directory!r} does not exist")
    logger.debug("opening SQLite catalog %s", uri)
    # SqlCatalog creates its tables when it finds none, check-then-create: nodes starting together
    # on one fresh file race, and the loser fails with "table iceberg_tables already exists".
    # An exclusive lock beside the file makes the first opening of each process one at a time.
    # (A lock file that cannot be created, as on a read-only lake being verified, means no race.)
    with contextlib.ExitStack() as held:
        try:
            lock = held.enter_context(open(f"{path}.lock", "a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            logger.debug("no lock beside %s; opening it unlocked", uri)
        return SqlCatalog(CATALOG_NAME, **{"warehouse": warehouse, **properties, "uri": uri})


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Create ``namespace`` unless it exists. The SQL catalog checks then inserts, so a node that
    loses that race to another gets a raw integrity error: it is fine when the namespace is there."""
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:  # a lost race fails per catalog; re-raised unless the namespace exists
        if not catalog.namespace_exists(namespace):
            raise
        logger.debug("namespace %s was created concurrently", namespace)


def load_table_or_none(catalog: Catalog, identifier: tuple[str, str]) -> Table | None:
    """The table, or ``None`` when it does not exist."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


# --- schemas -------------------------------------------------------------------------------------


def _plain_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(data_type):
        return _plain_type(data_type.value_type)
    if pa.types.is_struct(data_type):
        return pa.struct([_plain_field(data_type.field(i)) for i in range(data_type.num_fields)])
    if pa.types.is_large_list(data_type):
        return pa.large_list(_plain_field(data_type.value_field))
    if pa.types.is_list(data_type):
        return pa.list_(_plain_field(data_type.value_field))
    if pa.types.is_map(data_type):
        return pa.map_(_plain_field(data_type.key_field), _plain_field(data_type.item_field))
    return data_type


def _plain_field(field: pa.Field) -> pa.Field:
    return pa.field(field.name, _plain_type(field.type), field.nullable, field.metadata)


def iceberg_ready(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every dictionary type (at any depth) replaced by its value type, and no
    schema metadata: the Arrow schema Iceberg stores for files written with ``schema``."""
    return pa.schema([_plain_field(field) for field in schema])


def iceberg_schema_of(schema: pa.Schema) -> Schema:
    """The Iceberg schema (fresh field ids from 1) of an Arrow schema of the sink's files."""
    converted = _pyarrow_to_schema_without_ids(iceberg_ready(schema), downcast_ns_timestamp_to_us=True)
    return assign_fresh_schema_ids(converted)


# --- reading -------------------------------------------------------------------------------------


def read_offsets(table: Table) -> pa.Table:
    """The ``_topic, _partition, _offset`` columns of every row of the current snapshot (empty
    when the table has no snapshot). ``_topic`` is a plain string column."""
    if table.current_snapshot() is None:
        return pa.table({"_topic": pa.array([], pa.string()), "_partition": pa.array([], pa.int32()),
                         "_offset": pa.array([], pa.int64())})
    result = table.scan(selected_fields=OFFSET_COLUMNS).to_arrow()
    topic = result.column("_topic")
    if pa.types.is_dictionary(topic.type):
        result = result.set_column(0, "_topic", topic.cast(pa.string()))
    return result


def data_file_count(table: Table) -> int:
    """How many data files the current snapshot holds."""
    if table.current_snapshot() is None:
        return 0
    return sum(1 for _ in table.scan().plan_files())
