"""The lake a chaos run lands into (:class:`RunLake`), and the services of the deployment shape
(:class:`LakeServices`, ``laminar-kafka chaos --lake s3-rest``).

Two lakes (:data:`laminar_kafka.chaos.plan.LAKES`):

- ``local`` (the default): every node of a run writes into one output directory of the run, a
  Parquet tree or Iceberg tables with a SQLite catalog beside it (``<run>/catalog/catalog.db``: the
  output faults remount or fill the output, and a catalog is a service of its own).
- ``s3-rest``: the deployment shape. The output is ``s3://<bucket>/<run prefix>`` on SeaweedFS, the
  tables are committed through Iceberg's RESTCatalogServer, which writes their metadata to the same
  SeaweedFS (so each table keeps the lake's own layout at ``<output>/<topic>``). Each node runs in a
  working directory of its own (``<run>/nodes/node-<id>``, its ``--state-dir`` inside): the nodes
  share nothing but Kafka, ZooKeeper, the object store and the catalog. The nodes reach the object
  store and the catalog only through a :class:`~laminar_kafka.devstack.netfaults.proxy.FaultProxy`
  each, and so does the catalog reach the object store, so an unreachable object store is so for
  every client of the lake; the harness (the audit, the probe of the lake faults, a lake rollback)
  talks to both directly.

:class:`LakeServices` outlives runs (like the Kafka and ZooKeeper stack): started once per
campaign, repaired between runs (faults healed, a server a failed run left down started again on
its data), stopped at the end. Its restarts keep every address: SeaweedFS starts again on its data
directory and its ports, the catalog on its SQLite file and its port.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.cluster.lake.settings import IcebergSettings, LakeTarget, TableFormat, table_name_of
from laminar_kafka.devstack.netfaults.proxy import FaultProxy
from laminar_kafka.devstack.objectstore.access import S3Access

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyiceberg.catalog import Catalog

    from laminar_kafka.devstack.jvm.rest_catalog import RestCatalogServer
    from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer

logger = logging.getLogger(__name__)

__all__ = ["CHAOS_BUCKET", "LakeServices", "RunLake", "local_lake"]

#: the bucket the ``s3-rest`` lake's runs land into (each run under its own prefix)
CHAOS_BUCKET = "laminar-chaos"
#: how long a (re)started SeaweedFS or catalog may take to answer
START_TIMEOUT_S = 120.0
#: an object written at start and read back after every restart of the object store
CANARY = f"{CHAOS_BUCKET}/_chaos/canary"
_CANARY_BYTES = b"laminar chaos canary\n"


@dataclass(frozen=True)
class RunLake:
    """Where one run lands, how its nodes reach it and how the harness reads it.

    ``output``: the nodes' ``--output`` (a local directory, or ``s3://bucket/prefix``);
    ``catalog_uri``: the nodes' ``--catalog-uri`` (None: a Parquet tree); ``node_env``: added to
    every node's environment; ``nodes_dir``: when set, node ``N`` works in ``<nodes_dir>/node-N``
    with its ``--state-dir`` there. The ``reader_*`` fields are the harness's direct way in (no
    proxy): the catalog URI and properties, and the object store.
    """

    output: str
    table_format: TableFormat
    pipeline: str
    catalog_uri: str | None = None
    node_env: Mapping[str, str] = field(default_factory=dict)
    nodes_dir: Path | None = None
    reader_catalog_uri: str | None = None
    reader_properties: Mapping[str, str] = field(default_factory=dict)
    reader_access: S3Access | None = None

    @property
    def local(self) -> bool:
        """Whether the output is a local directory (the ``local`` lake)."""
        return self.reader_access is None

    def node_dir(self, node_id: int) -> Path | None:
        """Node ``node_id``'s own working directory (None: the nodes share the campaign's)."""
        return self.nodes_dir / f"node-{node_id}" if self.nodes_dir is not None else None

    def node_flags(self, node_id: int) -> list[str]:
        """The output, table format and catalog flags of node ``node_id`` (its state-dir too, when
        it has a directory of its own)."""
        flags = ["--output", self.output, "--table-format", self.table_format.value]
        if self.catalog_uri is not None:
            flags += ["--catalog-uri", self.catalog_uri]
        directory = self.node_dir(node_id)
        if directory is not None:
            flags += ["--state-dir", str(directory / "state")]
        return flags

    def prepare_node(self, node_id: int) -> Path | None:
        """Create node ``node_id``'s working directory (and state-dir) if it has one; return it."""
        directory = self.node_dir(node_id)
        if directory is not None:
            (directory / "state").mkdir(parents=True, exist_ok=True)
        return directory

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The harness's filesystem and root of the output (direct, no proxy)."""
        from laminar_kafka.cluster.lake.parquet.sink import open_output

        if self.reader_access is None:
            return open_output(self.output)
        bucket_and_prefix = self.output.split("://", 1)[1].rstrip("/")
        return self.reader_access.filesystem(), bucket_and_prefix

    def iceberg_settings(self) -> IcebergSettings:
        """The harness's Iceberg settings (the run's namespace, the catalog reached directly)."""
        return IcebergSettings(namespace=table_name_of(self.pipeline), catalog_uri=self.reader_catalog_uri,
                               properties=dict(self.reader_properties))

    def target(self) -> LakeTarget:
        """What the audit reads: the output in its format, Iceberg tables through the catalog."""
        iceberg = self.iceberg_settings() if self.table_format is TableFormat.ICEBERG else None
        return LakeTarget(self.output, self.table_format, self.pipeline, iceberg)

    def catalog(self) -> Catalog:
        """The harness's client of the run's catalog (raises ConfigurationError when it cannot be opened)."""
        from laminar_kafka.cluster.lake.iceberg.tables import open_catalog

        fs, root = self.filesystem()
        return open_catalog(self.iceberg_settings(), fs, root)

    def other_output(self, run_dir: Path) -> str:
        """An output that is not the run's, of the same kind (``misconfigured-node --output``)."""
        if self.local:
            return str(run_dir / "output-misconfigured")
        return f"{self.output.rstrip('/')}-misconfigured"


def local_lake(run_dir: Path, output: Path, table_format: TableFormat, pipeline: str) -> RunLake:
    """The ``local`` lake of a run: ``output`` shared by its nodes; Iceberg with a SQLite catalog
    at ``<run_dir>/catalog/catalog.db`` (beside the output mount, not on it)."""
    catalog_uri = None
    if table_format is TableFormat.ICEBERG:
        directory = run_dir / "catalog"
        directory.mkdir(parents=True, exist_ok=True)
        catalog_uri = f"sqlite:///{directory}/catalog.db"
    return RunLake(output=str(output), table_format=table_format, pipeline=pipeline, catalog_uri=catalog_uri,
                   reader_catalog_uri=catalog_uri)


class LakeServices:
    """SeaweedFS (S3) and Iceberg's REST catalog over it, each behind a fault proxy (see the module
    docstring). Build with :meth:`start`; every method but :meth:`stop` expects it started."""

    def __init__(self, base: Path, store: SeaweedServer, store_proxy: FaultProxy, catalog: RestCatalogServer,
                 catalog_proxy: FaultProxy) -> None:
        self.base = base
        self.store = store
        self.store_proxy = store_proxy
        self.catalog = catalog
        self.catalog_proxy = catalog_proxy

    @classmethod
    def start(cls, base: Path, say: Callable[[str], None]) -> LakeServices:
        """SeaweedFS with :data:`CHAOS_BUCKET` in ``<base>/seaweedfs``, its proxy, the REST catalog in
        ``<base>/rest-catalog`` (reaching S3 through that proxy), and the catalog's proxy. Whatever
        started is stopped again when a later step fails (then the error is raised)."""
        from laminar_kafka.devstack.jvm.rest_catalog import new_rest_catalog
        from laminar_kafka.devstack.objectstore.seaweedfs import start_seaweed_server

        say("starting SeaweedFS and the Iceberg REST catalog ...")
        started = time.monotonic()
        base.mkdir(parents=True, exist_ok=True)
        store = start_seaweed_server(base / "seaweedfs", buckets=[CHAOS_BUCKET], timeout=START_TIMEOUT_S)
        made: list[Callable[[], None]] = [store.stop]
        try:
            with store.access.filesystem().open_output_stream(CANARY) as stream:
                stream.write(_CANARY_BYTES)
            store_proxy = FaultProxy(store.ports.s3, "object-store")
            made.append(store_proxy.close)
            catalog = new_rest_catalog(base, s3=S3Access(store_proxy.port, store.region))
            catalog.start(timeout=START_TIMEOUT_S)
            made.append(catalog.stop)
            catalog_proxy = FaultProxy(catalog.port, "catalog")
        except BaseException:  # stop what started, then re-raised
            for undo in reversed(made):
                with contextlib.suppress(Exception):
                    undo()
            raise
        services = cls(base, store, store_proxy, catalog, catalog_proxy)
        say(f"lake services up in {time.monotonic() - started:.1f}s: S3 {store.endpoint} (nodes: "
            f"{store_proxy.endpoint}), REST catalog {catalog.uri} (nodes: {catalog_proxy.endpoint})")
        return services

    # --- what a run gets -------------------------------------------------------------------------

    @property
    def node_access(self) -> S3Access:
        """The object store as the nodes (and the catalog) reach it: through its proxy."""
        return S3Access(self.store_proxy.port, self.store.region)

    def proxy_ports(self) -> tuple[int, ...]:
        """The ports the nodes connect to (relayed into a node's network namespace, when it has one)."""
        return (self.store_proxy.port, self.catalog_proxy.port)

    def run_lake(self, run_dir: Path, pipeline: str) -> RunLake:
        """The lake of one run: Iceberg tables under ``s3://CHAOS_BUCKET/<pipeline>`` through the
        catalog, each node in ``<run_dir>/nodes/node-<id>``."""
        direct = self.store.access
        return RunLake(
            output=f"s3://{CHAOS_BUCKET}/{pipeline}", table_format=TableFormat.ICEBERG, pipeline=pipeline,
            catalog_uri=self.catalog_proxy.endpoint, node_env=self.node_access.env(), nodes_dir=run_dir / "nodes",
            reader_catalog_uri=self.catalog.uri, reader_access=direct,
            reader_properties={"s3.endpoint": direct.endpoint, "s3.region": direct.region,
                               "s3.access-key-id": direct.access_key_id,
                               "s3.secret-access-key": direct.secret_access_key},
        )

    # --- faults ----------------------------------------------------------------------------------

    def restart_store(self, hard: bool, down_s: float) -> float:
        """Stop SeaweedFS (SIGKILL when ``hard``, else SIGTERM), wait ``down_s``, start it again on
        its data and its ports; returns the seconds it was down (until the canary read back)."""
        stopped = time.monotonic()
        if hard:
            self.store.kill()
        else:
            self.store.stop()
        if self.store.running():
            raise ChaosError(f"SeaweedFS (pid {self.store.pid}) did not stop")
        time.sleep(down_s)
        self._start_store_again()
        return time.monotonic() - stopped

    def _start_store_again(self) -> None:
        """SeaweedFS started on its data and ports, then until the canary written at start reads back
        (its S3 door answers before its volumes are served again; bounded)."""
        from laminar_kafka.devstack.objectstore.seaweedfs import start_seaweed_server

        self.store = start_seaweed_server(self.store.workdir, table_bucket=self.store.table_bucket,
                                          ports=self.store.ports, timeout=START_TIMEOUT_S)
        fs = self.store.access.filesystem()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with fs.open_input_stream(CANARY) as stream:
                    if stream.read() == _CANARY_BYTES:
                        return
                    raise ChaosError(f"the object store lost its data: {CANARY} reads back different bytes")
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise ChaosError(f"the restarted object store does not serve {CANARY}: {exc}") from exc
            time.sleep(0.2)

    def restart_catalog(self, hard: bool, down_s: float) -> float:
        """Stop the catalog (SIGKILL when ``hard``, else SIGTERM), wait ``down_s``, start it again on
        its SQLite file and its port; returns the seconds it was down."""
        stopped = time.monotonic()
        if hard:
            self.catalog.server.kill()
        else:
            self.catalog.stop()
        time.sleep(down_s)
        self.catalog.start(timeout=START_TIMEOUT_S)
        return time.monotonic() - stopped

    # --- between runs ----------------------------------------------------------------------------

    def repair(self, say: Callable[[str], None]) -> bool:
        """Heal both proxies, remove their latency, start a server a failed run left down; False
        when the services cannot be used again."""
        try:
            for proxy in (self.store_proxy, self.catalog_proxy):
                proxy.heal()
                proxy.set_latency(0)
            if not self.store.running():
                say("restarting SeaweedFS left down by the previous run")
                self._start_store_again()
            if not self.catalog.running():
                say("restarting the REST catalog left down by the previous run")
                self.catalog.start(timeout=START_TIMEOUT_S)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure: the caller starts new services
            say(f"the lake services are unusable ({exc}); starting new ones")
            return False

    def stop(self, clean: bool = False) -> None:
        """Stop the proxies and both servers (never raises); ``clean``: remove their directory."""
        for step in (self.catalog_proxy.close, self.store_proxy.close, self.catalog.stop, self.store.stop):
            with contextlib.suppress(Exception):
                step()
        if clean:
            shutil.rmtree(self.base, ignore_errors=True)
