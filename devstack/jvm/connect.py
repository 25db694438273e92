"""A Kafka Connect worker in distributed mode with Apache Iceberg's sink, as a local JVM process.

For the side-by-side benchmark (``bench/bench_connect.py``) and its integration test: the jars are
Kafka Connect's runtime and Apache Iceberg's Kafka Connect sink from Maven Central, pinned by
``connect-pom.xml`` beside this module and resolved once into the cache by `ensure_connect_build`
(``$LAMINAR_CACHE_DIR``, else ``~/.cache/laminar-kafka``). The worker runs
``org.apache.kafka.connect.cli.ConnectDistributed`` (what ``connect-distributed.sh`` runs) with the
JVM options that script gives it (`STOCK_JVM_OPTIONS`: heap 256 MB to 2 GB, G1), every jar on one
classpath, and the properties of :func:`~laminar_kafka.devstack.jvm.connect_config.worker_properties`.

`new_connect_worker` makes one (not started); `ConnectWorker.start` waits until ``GET /health``
answers 200 (the worker has joined its group and read its config topic). `start_iceberg_sink`
creates the sink's control topic and the connector, and waits until its task runs. ``kill``
(SIGKILL, a crash) and a later ``start`` keep the worker's port and its group: the connector's
configuration lives in the worker's config topic, so a restarted worker runs it again unasked.

Run ``python -m laminar_kafka.devstack.jvm.connect BOOTSTRAP`` to start one in the foreground.
"""
from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError, DevStackError
from laminar_kafka.devstack.jvm.artifacts import cached_jar_build, default_cache_dir, pinned_versions
from laminar_kafka.devstack.jvm.connect_config import (
    SINK_TABLE_PROPERTIES,
    IcebergSinkSettings,
    WorkerSettings,
    iceberg_sink_config,
    render_properties,
    sink_table_schema,
    worker_properties,
)
from laminar_kafka.devstack.jvm.locks import JarBuild
from laminar_kafka.devstack.jvm.servers import JvmServer
from laminar_kafka.devstack.jvm.services import HttpJvmService, answers_json, pom_property, run_in_foreground
from laminar_kafka.devstack.processes import free_port
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

logger = logging.getLogger(__name__)

__all__ = [
    "CONNECT_POM_PATH", "STOCK_JVM_OPTIONS", "ConnectError", "ConnectWorker", "create_sink_table",
    "ensure_connect_build", "new_connect_worker", "pinned_connect_versions", "start_iceberg_sink",
]

CONNECT_POM_PATH = Path(__file__).with_name("connect-pom.xml")
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
#: what ``bin/connect-distributed.sh`` gives the JVM (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS)
STOCK_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms256M", "-Xmx2G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)
_SINK_JAR_GLOB = "*iceberg-kafka-connect-[0-9]*.jar"
_RUNTIME_JAR_GLOB = "*connect-runtime-*.jar"
#: the worker logs every task's and client's configuration at INFO; WARN keeps the log readable
_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.iceberg.name = org.apache.iceberg.connect
logger.iceberg.level = INFO
logger.herder.name = org.apache.kafka.connect.runtime.distributed.DistributedHerder
logger.herder.level = INFO
"""


class ConnectError(DevStackError):
    """The Connect worker's REST API refused a request, or a connector or task failed."""


def pinned_connect_versions(pom_path: Path = CONNECT_POM_PATH) -> tuple[str, str]:
    """(Kafka Connect, Apache Iceberg sink) versions pinned in the POM."""
    return pom_property(pom_path, "kafka.version"), pom_property(pom_path, "iceberg.version")


def connect_build() -> JarBuild:
    """The build of the worker's jars (`connect-pom.xml`); ArtifactError when Connect's Kafka is not the brokers'."""
    kafka_version, iceberg_version = pinned_connect_versions()
    if kafka_version != pinned_versions()[0]:
        raise ArtifactError(f"{CONNECT_POM_PATH.name} pins Kafka {kafka_version}, the brokers {pinned_versions()[0]}")
    return JarBuild(f"kafka-connect-{kafka_version}-iceberg-{iceberg_version}", CONNECT_POM_PATH)


def ensure_connect_build(cache_dir: Path | None = None) -> Path:
    """Resolve the worker's jars into the cache once; return their directory.

    The first call downloads the locked jars from Maven Central (about 110 MB; Maven when the build
    has no lock); later calls return at once (see
    :func:`laminar_kafka.devstack.jvm.artifacts.cached_jar_build`). Raises ArtifactError when the
    jars cannot be resolved or Connect's Kafka version is not the brokers'.
    """
    build = connect_build()
    kafka_version, iceberg_version = pinned_connect_versions()

    def check(directory: Path) -> None:
        for glob, what in ((_RUNTIME_JAR_GLOB, "connect-runtime"), (_SINK_JAR_GLOB, "iceberg-kafka-connect")):
            if not any(directory.glob(glob)):
                raise ArtifactError(f"no {what} jar was resolved")

    return cached_jar_build(
        cache_dir or default_cache_dir(), build,
        f"kafka-connect={kafka_version}\niceberg-kafka-connect={iceberg_version}\n",
        f"resolve Kafka Connect {kafka_version} and Iceberg's sink {iceberg_version}", check)


def _request(method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, object]:
    """(HTTP status, decoded JSON body or None) of one request to the worker's REST API."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw) if raw else None
        except ValueError:
            return error.code, raw.decode(errors="replace")


@dataclass
class ConnectWorker(HttpJvmService):
    """One distributed worker process; `settings` are its worker properties' inputs."""

    settings: WorkerSettings

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def kill(self) -> None:
        """SIGKILL, as a crash would; waits until the process is gone (``start`` runs it again)."""
        self.server.kill()

    def put_connector(self, name: str, config: dict[str, str], timeout: float = 60.0) -> None:
        """Create or update connector ``name`` (``PUT /connectors/<name>/config``), retrying while the
        worker answers 409 (a rebalance in progress) until `timeout`; raise ConnectError otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = _request("PUT", f"{self.uri}/connectors/{name}/config", config)
            if status in (200, 201):
                return
            if status != 409 or time.monotonic() >= deadline:
                raise ConnectError(f"PUT connector {name}: HTTP {status}: {body}")
            time.sleep(0.5)

    def connector_status(self, name: str) -> dict[str, object] | None:
        """``GET /connectors/<name>/status`` (None while the worker does not know the connector)."""
        try:
            status, body = _request("GET", f"{self.uri}/connectors/{name}/status", timeout=5.0)
        except OSError:
            return None
        return body if status == 200 and isinstance(body, dict) else None

    def task_states(self, name: str) -> list[str]:
        """The states of the connector's tasks (``RUNNING``, ``FAILED``...); [] when unknown."""
        status = self.connector_status(name)
        tasks = status.get("tasks") if status else None
        return [str(task.get("state")) for task in tasks if isinstance(task, dict)] if isinstance(tasks, list) else []

    def wait_tasks_running(self, name: str, tasks: int, timeout: float = 90.0) -> float:
        """Wait until ``tasks`` tasks of ``name`` run; raise ConnectError at once when one failed
        (quoting its trace), WaitTimeout after `timeout`. Returns the seconds waited."""
        def running() -> bool:
            listed = (self.connector_status(name) or {}).get("tasks")
            for task in listed if isinstance(listed, list) else []:
                if isinstance(task, dict) and task.get("state") == "FAILED":
                    raise ConnectError(f"connector {name} task {task.get('id')} failed: {task.get('trace')}")
            return self.task_states(name).count("RUNNING") >= tasks

        return wait_until(running, timeout, f"connector {name}: {tasks} task(s) running", interval=0.2)


def new_connect_worker(base_dir: Path, bootstrap: str, *, group_id: str = "laminar-connect",
                       cache_dir: Path | None = None, port: int | None = None) -> ConnectWorker:
    """A distributed worker (not started) working in ``<base_dir>/connect-<group_id>``, on `port` or a
    free port, its internal topics prefixed with `group_id`. Resolves the jars first when needed."""
    jars = ensure_connect_build(cache_dir)
    workdir = base_dir / f"connect-{group_id}"
    workdir.mkdir(parents=True, exist_ok=True)
    chosen_port = port or free_port()
    settings = WorkerSettings(bootstrap=bootstrap, group_id=group_id, rest_port=chosen_port, storage_prefix=group_id)
    properties = workdir / "worker.properties"
    properties.write_text(render_properties(worker_properties(settings)))
    (workdir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)
    uri = f"http://127.0.0.1:{chosen_port}"
    server = JvmServer(
        name=f"kafka-connect-{group_id}",
        main_class=MAIN_CLASS,
        args=[str(properties)],
        workdir=workdir,
        classpath=f"{jars}/*",
        port=chosen_port,
        health=lambda: answers_json(f"{uri}/health", dict),
        jvm_options=list(STOCK_JVM_OPTIONS),
    )
    return ConnectWorker(server, settings)


def create_sink_table(catalog_uri: str, table: str, location: str) -> None:
    """Create table ``<namespace>.<name>`` (and its namespace when missing) at ``location`` in the
    REST catalog at ``catalog_uri``, with the sink's columns and properties (see
    :mod:`~laminar_kafka.devstack.jvm.connect_config`)."""
    from pyiceberg.catalog.rest import RestCatalog

    namespace, name = table.rsplit(".", 1)
    catalog = RestCatalog("connect-sink", uri=catalog_uri)
    catalog.create_namespace_if_not_exists(namespace)
    catalog.create_table((namespace, name), schema=sink_table_schema(), location=location,
                         properties=SINK_TABLE_PROPERTIES)


def start_iceberg_sink(worker: ConnectWorker, name: str, settings: IcebergSinkSettings, *,
                       timeout: float = 90.0) -> None:
    """Create the sink's control topic (one partition) and connector ``name`` on `worker`; return once
    its tasks run. The table ``settings.table`` must exist (`create_sink_table`)."""
    create_topic(worker.settings.bootstrap, settings.control_topic, 1)
    worker.put_connector(name, iceberg_sink_config(settings), timeout)
    worker.wait_tasks_running(name, settings.tasks, timeout)


def main() -> None:
    """Start a worker in the foreground against the Kafka at ``sys.argv[1]``; Ctrl-C stops it."""
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m laminar_kafka.devstack.jvm.connect BOOTSTRAP")
    base_dir = Path(tempfile.mkdtemp(prefix="laminar-connect-"))
    worker = new_connect_worker(base_dir, sys.argv[1])
    run_in_foreground(worker, f"kafka connect worker: {worker.uri}", base_dir)


if __name__ == "__main__":
    main()
