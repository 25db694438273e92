"""An Apache Iceberg REST catalog as a local JVM process, for the dev stack and the tests.

The server is Iceberg's own REST catalog test server (``org.apache.iceberg.rest.RESTCatalogServer``,
the one behind the apache/iceberg-rest-fixture image), run from its Maven Central jars (pinned by
`rest-catalog-pom.xml` beside this module). It keeps its catalog in a SQLite file (a JDBC catalog)
and writes table metadata with Hadoop's FileIO, so a warehouse and table locations on the local disk
(plain absolute paths or ``file:`` URIs) work: the nodes write the data files, the server the
metadata JSON, both under the same paths. `RestCatalogServer.uri` is the catalog URI to give
pyiceberg's ``RestCatalog`` or ``laminar-kafka run --catalog-uri``.

The server takes its settings from ``CATALOG_*`` environment variables (``CATALOG_URI``,
``CATALOG_WAREHOUSE``, ``CATALOG_REST_PORT``: a single ``_`` becomes ``.``, a double ``__`` becomes
``-``). It listens on every interface (its Jetty server takes a port only); tests talk to it on
127.0.0.1. It has no authentication: give it no secrets (it logs its catalog properties at start).

`ensure_rest_catalog_build` downloads the locked jars from Maven Central once into the cache
(``$LAMINAR_CACHE_DIR``, else ``~/.cache/laminar-kafka``); later calls return at once.
`new_rest_catalog` makes a server on a free port; `start` waits until ``GET <uri>/v1/config``
answers.

With ``s3=`` (an :class:`~laminar_kafka.devstack.objectstore.access.S3Access`, SeaweedFS's in the
tests) the server also writes the metadata of tables at ``s3://`` locations to that endpoint:
``rest-catalog-s3-pom.xml`` adds Iceberg's S3FileIO and the AWS SDK bundle (about 65 MB, resolved on
first use by `ensure_rest_catalog_s3_build`), ``io-impl`` becomes ``ResolvingFileIO`` (S3FileIO for
``s3://``, HadoopFileIO for the rest) with the endpoint, path-style access and the region as catalog
properties, and the credentials reach the AWS SDK as ``AWS_*`` variables (never as catalog
properties, which the server logs).

Run ``python -m laminar_kafka.devstack.jvm.rest_catalog`` to start one in the foreground (Ctrl-C stops it).
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm.artifacts import cached_jar_build, default_cache_dir
from laminar_kafka.devstack.jvm.locks import JarBuild
from laminar_kafka.devstack.jvm.servers import JvmServer
from laminar_kafka.devstack.jvm.services import (
    SMALL_JVM_OPTIONS,
    HttpJvmService,
    answers_json,
    pom_property,
    run_in_foreground,
)
from laminar_kafka.devstack.objectstore.access import S3Access
from laminar_kafka.devstack.processes import free_port

logger = logging.getLogger(__name__)

__all__ = [
    "REST_CATALOG_POM_PATH", "REST_CATALOG_S3_POM_PATH", "RestCatalogServer", "ensure_rest_catalog_build",
    "ensure_rest_catalog_s3_build", "new_rest_catalog", "pinned_iceberg_version", "rest_catalog_answers",
]

REST_CATALOG_POM_PATH = Path(__file__).with_name("rest-catalog-pom.xml")
REST_CATALOG_S3_POM_PATH = Path(__file__).with_name("rest-catalog-s3-pom.xml")
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
_SERVER_JAR_GLOB = "*iceberg-open-api-*-test-fixtures.jar"
#: how long a statement waits for SQLite's lock before the server answers 500
_BUSY_TIMEOUT_MS = 10_000
#: The server's JDBC connections to its SQLite file: ONE. Started on a catalog file that already
#: holds its tables (a restart), the server leaves a read open on one pooled connection (it holds
#: SQLite's shared lock from then on: an outside ``BEGIN EXCLUSIVE`` is refused). With several
#: connections, every commit through another one then fails with "database is locked" (500), and in
#: WAL mode that connection's reads stay at the snapshot of that moment: a stale table, its later
#: commits unseen (the chaos campaign's ``catalog-restart``: nodes failing to commit for minutes, an
#: audit missing committed epochs). With one connection its own reads and writes always agree.
_JDBC_CONNECTIONS = 1
_S3_JAR_GLOB = "*iceberg-aws-bundle-*.jar"

# On the classpath ahead of the jars: Hadoop's raw local file system, so that writing the metadata
# leaves no `.crc` side files in the lake.
_CORE_SITE_XML = """\
<?xml version="1.0"?>
<configuration>
  <property><name>fs.file.impl</name><value>org.apache.hadoop.fs.RawLocalFileSystem</value></property>
</configuration>
"""


def pinned_iceberg_version(pom_path: Path = REST_CATALOG_POM_PATH) -> str:
    """The Apache Iceberg version pinned in the POM."""
    return pom_property(pom_path, "iceberg.version")


def rest_catalog_build() -> JarBuild:
    """The build of the pinned server's jars (`rest-catalog-pom.xml`)."""
    return JarBuild(f"iceberg-rest-catalog-{pinned_iceberg_version()}", REST_CATALOG_POM_PATH)


def rest_catalog_s3_build() -> JarBuild:
    """The build of the S3 add-on (`rest-catalog-s3-pom.xml`: only its own jars, the server's build has the rest)."""
    version = pom_property(REST_CATALOG_S3_POM_PATH, "iceberg.version")
    if version != pinned_iceberg_version():
        raise ArtifactError(f"{REST_CATALOG_S3_POM_PATH.name} pins Iceberg {version}, the server {pinned_iceberg_version()}")
    return JarBuild(f"iceberg-rest-catalog-s3-{version}", REST_CATALOG_S3_POM_PATH, transitive=False)


def ensure_rest_catalog_build(cache_dir: Path | None = None) -> Path:
    """Resolve the pinned REST catalog server's jars into the cache once; return their directory.

    The first call downloads the locked jars from Maven Central (about 80 MB; Maven when the build
    has no lock); later calls return at once (see
    :func:`laminar_kafka.devstack.jvm.artifacts.cached_jar_build`). Raises ArtifactError when the
    jars cannot be resolved (ToolMissingError when Maven is needed and missing).
    """
    version = pinned_iceberg_version()

    def check(directory: Path) -> None:
        if not any(directory.glob(_SERVER_JAR_GLOB)):
            raise ArtifactError(f"no iceberg-open-api {version} test-fixtures jar was resolved")

    return cached_jar_build(cache_dir or default_cache_dir(), rest_catalog_build(), f"iceberg={version}\n",
                            f"resolve the Iceberg REST catalog server (Iceberg {version})", check)


def ensure_rest_catalog_s3_build(cache_dir: Path | None = None) -> Path:
    """Resolve the S3 add-on (iceberg-aws, iceberg-aws-bundle, failsafe; no transitive jars: the server's
    own build has the rest) into the cache once; return its directory. Raises as
    :func:`ensure_rest_catalog_build`."""
    build = rest_catalog_s3_build()
    version = pinned_iceberg_version()

    def check(directory: Path) -> None:
        if not any(directory.glob(_S3_JAR_GLOB)):
            raise ArtifactError(f"no iceberg-aws-bundle {version} jar was resolved")

    return cached_jar_build(cache_dir or default_cache_dir(), build, f"iceberg-aws={version}\n",
                            f"resolve Iceberg's S3FileIO and the AWS SDK bundle (Iceberg {version}, about 65 MB)", check)


def s3_catalog_settings(access: S3Access) -> tuple[dict[str, str], dict[str, str]]:
    """(the ``CATALOG_*`` variables, the AWS SDK's variables) that make the server write ``s3://``
    metadata to ``access``'s endpoint. The secret is only in the second (the server logs the first)."""
    catalog = {
        "CATALOG_IO__IMPL": "org.apache.iceberg.io.ResolvingFileIO",
        "CATALOG_S3_ENDPOINT": access.endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_CLIENT_REGION": access.region,
    }
    sdk = {key: value for key, value in access.env().items() if key != "AWS_ENDPOINT_URL"}
    return catalog, sdk


def catalog_jdbc_uri(path: Path) -> str:
    """The server's JDBC URI of its SQLite catalog at ``path``, with a busy timeout (a pragma in the
    URI, as sqlite-jdbc reads it). Pure."""
    return f"jdbc:sqlite:{path}?busy_timeout={_BUSY_TIMEOUT_MS}"


def rest_catalog_answers(uri: str, timeout: float = 2.0) -> bool:
    """Whether the REST catalog at `uri` answers ``GET /v1/config`` (HTTP 200 with a JSON object)."""
    return answers_json(f"{uri}/v1/config", dict, timeout)


@dataclass
class _EnvironmentJvmServer(JvmServer):
    """A JvmServer whose process also gets `environment` (through ``env``, which execs the JVM, so the
    pid stays the JVM's)."""

    environment: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        env = shutil.which("env") or "/usr/bin/env"
        return [env, *(f"{key}={value}" for key, value in self.environment.items()), *super().command()]


@dataclass
class RestCatalogServer(HttpJvmService):
    """One REST catalog process.

    `uri` is the catalog URI (``http://127.0.0.1:<port>``); `warehouse` the default location of new
    tables (``file:`` URI); the catalog database and the process's output (``server.log``) are in the
    working directory. Stopping it keeps the catalog database: a restart sees the same tables.
    """

    warehouse: str = ""

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


def new_rest_catalog(base_dir: Path, *, warehouse: str | None = None, cache_dir: Path | None = None,
                     port: int | None = None, s3: S3Access | None = None) -> RestCatalogServer:
    """A REST catalog server (not started) working in ``<base_dir>/rest-catalog``, on `port` or a
    free port.

    `warehouse` (a ``file:`` URI or an absolute path) is where tables created without a location
    go; default ``<base_dir>/rest-catalog/warehouse``. With `s3`, tables at ``s3://`` locations
    work too (their metadata goes to that endpoint). Resolves the jars into the cache first when
    needed (see `ensure_rest_catalog_build`, `ensure_rest_catalog_s3_build`).
    """
    jars = ensure_rest_catalog_build(cache_dir)
    classpath_jars = [f"{jars}/*"]
    s3_environment: dict[str, str] = {}
    if s3 is not None:
        classpath_jars.append(f"{ensure_rest_catalog_s3_build(cache_dir)}/*")
        catalog_settings, sdk_settings = s3_catalog_settings(s3)
        s3_environment = {**sdk_settings, **catalog_settings}
    workdir = base_dir / "rest-catalog"
    site = workdir / "hadoop-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "core-site.xml").write_text(_CORE_SITE_XML)
    chosen_warehouse = warehouse or (workdir / "warehouse").as_uri()
    chosen_port = port or free_port()
    uri = f"http://127.0.0.1:{chosen_port}"
    server = _EnvironmentJvmServer(
        name="iceberg-rest-catalog",
        main_class=MAIN_CLASS,
        args=[],
        workdir=workdir,
        classpath=":".join([str(site), *classpath_jars]),
        port=chosen_port,
        health=lambda: rest_catalog_answers(uri),
        jvm_options=list(SMALL_JVM_OPTIONS),
        environment={
            "CATALOG_URI": catalog_jdbc_uri(workdir / "catalog.db"),
            "CATALOG_CLIENTS": str(_JDBC_CONNECTIONS),
            "CATALOG_WAREHOUSE": chosen_warehouse,
            "CATALOG_REST_PORT": str(chosen_port),
            **s3_environment,
        },
    )
    return RestCatalogServer(server, chosen_warehouse)


def main() -> None:
    """Start a REST catalog in the foreground on a free port, print its URI, stop it on Ctrl-C."""
    base_dir = Path(tempfile.mkdtemp(prefix="laminar-rest-catalog-"))
    catalog = new_rest_catalog(base_dir)
    run_in_foreground(catalog, f"iceberg REST catalog: {catalog.uri}  (warehouse: {catalog.warehouse})", base_dir)


if __name__ == "__main__":
    main()
