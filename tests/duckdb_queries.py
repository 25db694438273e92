"""Querying the lake with DuckDB as a user would, with nothing downloaded at run time.

DuckDB's extensions come from PyPI (the test extra): each ``duckdb-extension-<name>`` wheel ships
``duckdb_extension_<name>/extensions/v<duckdb version>/<name>.duckdb_extension``, a signed binary
for exactly one DuckDB release. :func:`connect` LOADs those files by path on a connection that can
neither install nor auto-load an extension (:data:`NO_DOWNLOAD`), so a query needing an extension
that was not loaded fails instead of downloading it.

The SQL templates are the statements docs/lake.md shows, rendered there with :data:`DOCS_VALUES`
(``tests/unit/test_docs_queries.py`` checks that every one appears verbatim); the integration tests
(``tests/integration/cluster/test_query_duckdb.py``) run them rendered with their own paths and names.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import duckdb

#: a connection that never installs (downloads) nor implicitly loads an extension
NO_DOWNLOAD: dict[str, Any] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}

#: the extensions each kind of query needs (Iceberg reads its manifests with ``avro``)
PARQUET_TREE: tuple[str, ...] = ()
ON_S3: tuple[str, ...] = ("httpfs",)
ICEBERG: tuple[str, ...] = ("avro", "httpfs", "iceberg")
ICEBERG_SQLITE_CATALOG: tuple[str, ...] = ("avro", "iceberg", "sqlite_scanner")

# --- the Parquet tree: the published files of one topic are exactly <output>/<topic>/**/*.parquet;
# the lake writes every other Parquet file (staged, rejected) under a `_` directory of the root.
TREE_COUNT = ("SELECT count(*), count(DISTINCT (_partition, _offset)) "
              "FROM read_parquet('{output}/{topic}/**/*.parquet', hive_partitioning = true);")
TREE_ROWS = ("SELECT * FROM read_parquet('{output}/{topic}/**/*.parquet', hive_partitioning = true) "
             "ORDER BY _partition, _offset;")
REJECTED_ROWS = ("SELECT _partition, _offset, value, error FROM read_parquet('{output}/_rejected/*.parquet') "
                 "ORDER BY _partition, _offset;")
#: what a root-wide glob lists: staged and rejected files too (DuckDB does not skip `_` directories)
ROOT_GLOB = "SELECT file FROM glob('{output}/**/*.parquet') ORDER BY file;"
TOPIC_GLOB = "SELECT file FROM glob('{output}/{topic}/**/*.parquet') ORDER BY file;"

# --- an S3 (or S3-compatible) output
S3_SECRET = ("CREATE SECRET lake_s3 (TYPE s3, KEY_ID '{key_id}', SECRET '{secret}', REGION '{region}', "
             "ENDPOINT '{endpoint}', URL_STYLE 'path', USE_SSL false);")

# --- Iceberg through a REST catalog
ATTACH_REST = "ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{catalog_uri}', AUTHORIZATION_TYPE 'none');"
CATALOG_SECRET = ("CREATE SECRET lake_catalog (TYPE iceberg, CLIENT_ID '{key_id}', CLIENT_SECRET '{secret}', "
                  "OAUTH2_SERVER_URI '{catalog_uri}/v1/oauth/tokens');")
ATTACH_REST_OAUTH = "ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{catalog_uri}', SECRET lake_catalog);"
TABLE_COUNT = "SELECT count(*), count(DISTINCT (_partition, _offset)) FROM lake.{namespace}.{table};"
TABLE_ROWS = "SELECT * FROM lake.{namespace}.{table} ORDER BY _partition, _offset;"

# --- Iceberg through its current metadata file: from the embedded SQLite catalog, or as a catalog reports it
ATTACH_SQLITE_CATALOG = "ATTACH '{output}/_catalog/catalog.db' AS laminar_catalog (TYPE sqlite, READ_ONLY);"
METADATA_FROM_SQLITE_CATALOG = ("SET VARIABLE metadata = (SELECT metadata_location FROM laminar_catalog.iceberg_tables "
                                "WHERE table_namespace = '{namespace}' AND table_name = '{table}');")
METADATA_FILE = "SET VARIABLE metadata = '{metadata}';"
SCAN_COUNT = "SELECT count(*), count(DISTINCT (_partition, _offset)) FROM iceberg_scan(getvariable('metadata'));"
SCAN_ROWS = "SELECT * FROM iceberg_scan(getvariable('metadata')) ORDER BY _partition, _offset;"
SNAPSHOTS = "SELECT snapshot_id FROM iceberg_snapshots(getvariable('metadata')) ORDER BY sequence_number;"
SCAN_AT_SNAPSHOT = "SELECT count(*) FROM iceberg_scan(getvariable('metadata'), snapshot_from_id = {snapshot_id});"

TEMPLATES: tuple[str, ...] = (
    TREE_COUNT, TREE_ROWS, REJECTED_ROWS, ROOT_GLOB, TOPIC_GLOB, S3_SECRET, ATTACH_REST, CATALOG_SECRET,
    ATTACH_REST_OAUTH, TABLE_COUNT, TABLE_ROWS, ATTACH_SQLITE_CATALOG, METADATA_FROM_SQLITE_CATALOG, METADATA_FILE,
    SCAN_COUNT, SCAN_ROWS, SNAPSHOTS, SCAN_AT_SNAPSHOT,
)

#: the names docs/lake.md shows: pipeline and topic "orders", the output ./lake, placeholders for the
#: servers (`laminar-kafka dev up --s3` prints its keys, S3 endpoint and catalog URI)
DOCS_VALUES: dict[str, str] = {
    "output": "lake", "topic": "orders", "namespace": "orders", "table": "orders",
    "key_id": "<access key>", "secret": "<secret key>", "region": "us-east-1", "endpoint": "127.0.0.1:<s3 port>",
    "warehouse": "<warehouse>", "catalog_uri": "http://127.0.0.1:<catalog port>",
    "metadata": "lake/orders/metadata/00007-<uuid>.metadata.json", "snapshot_id": "<snapshot id>",
}


def extension_file(name: str) -> Path:
    """The ``<name>.duckdb_extension`` the ``duckdb-extension-<name>`` wheel ships for the installed
    DuckDB. Raises FileNotFoundError (naming the package to install) when absent, or when the wheel
    was built for another DuckDB release."""
    package = f"duckdb_extension_{name}"
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        raise FileNotFoundError(f"no {package}: pip install 'duckdb-extension-{name.replace('_', '-')}"
                                f"=={duckdb.__version__}'") from None
    path = Path(str(root)) / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        shipped = sorted(p.name for p in (Path(str(root)) / "extensions").iterdir())
        raise FileNotFoundError(f"{package} ships {shipped}, not DuckDB v{duckdb.__version__}: install "
                                f"duckdb-extension-{name.replace('_', '-')}=={duckdb.__version__}")
    return path


def connect(extension_directory: Path, extensions: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with ``extensions`` loaded from their wheels, configured by
    :data:`NO_DOWNLOAD` with ``extension_directory`` (give an empty one: nothing installed by hand
    is found there) and its configuration locked, so no query can turn downloading back on."""
    connection = duckdb.connect(config={**NO_DOWNLOAD, "extension_directory": str(extension_directory)})
    for name in extensions:
        connection.execute(f"LOAD '{extension_file(name)}'")
    connection.execute("SET lock_configuration = true")
    return connection


def run(connection: duckdb.DuckDBPyConnection, template: str, **values: object) -> list[tuple[Any, ...]]:
    """Render ``template`` with ``values`` and run it; its rows (``[]`` for a statement)."""
    result = connection.execute(template.format(**values))
    return result.fetchall() if result.description else []


def rows_as_dicts(connection: duckdb.DuckDBPyConnection, template: str, **values: object) -> list[dict[str, Any]]:
    """:func:`run` for a query, each row a dict by column name."""
    result = connection.execute(template.format(**values))
    names = [column[0] for column in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
