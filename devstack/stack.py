"""`DevStack`: Kafka and/or ZooKeeper started together, and its recorded state for `laminar-kafka dev`.

`DevStack.launch` is the one launcher that the CLI (`dev up`, `demo`), the test fixtures, the benches
and the chaos campaign use. `dev up` records the detached stack in a state file; `read_state` checks
the recorded processes against the live process table and never trusts the file blindly.

A `secure` stack's Kafka also listens with SASL_SSL (SCRAM-SHA-512) and mTLS (see `laminar_kafka.devstack.jvm.kafka_cluster`);
its TLS material is generated into `<base_dir>/security` and the ready client settings are written to
`<base_dir>/client.toml` (SASL_SSL) and `<base_dir>/client-mtls.toml` (mTLS), mode 0600: the only
places a password is written. The state file records their paths, never a secret.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from laminar_kafka.devstack.errors import DevStackError, DevStackStateError, ServerStartError
from laminar_kafka.devstack.jvm.artifacts import default_cache_dir, ensure_artifacts
from laminar_kafka.devstack.jvm.kafka_cluster import KafkaCluster, new_kafka_cluster
from laminar_kafka.devstack.jvm.servers import DEFAULT_START_TIMEOUT_S, JvmServer, ZooKeeperEnsemble, new_zookeeper
from laminar_kafka.devstack.jvm.versions import selected_versions
from laminar_kafka.devstack.processes import pid_alive, pid_cmdline, terminate_pid

if TYPE_CHECKING:
    from laminar_kafka.devstack.security import SecurityMaterial
    from laminar_kafka.kafka_source.clients import KafkaClientConfig

logger = logging.getLogger(__name__)

CLIENT_CONFIG_NAME = "client.toml"
MTLS_CLIENT_CONFIG_NAME = "client-mtls.toml"

__all__ = [
    "DevStack", "RecordedStack", "StackProcess", "default_state_file", "read_state", "tear_down_recorded",
    "write_state",
]


@dataclass
class DevStack:
    """Kafka and/or ZooKeeper started together; `start()` returns once both are healthy.

    `base_dir` holds every server's configuration, data and log; it is removed by `stop(clean=True)`.
    """

    base_dir: Path
    kafka: KafkaCluster | None
    zookeeper: ZooKeeperEnsemble | None
    startup_seconds: float = 0.0

    @classmethod
    def create(
        cls,
        *,
        kafka_brokers: int = 1,
        zookeeper_servers: int = 1,
        base_dir: Path | None = None,
        cache_dir: Path | None = None,
        secure: bool = False,
        kafka_zookeeper: str | None = None,
    ) -> DevStack:
        """Prepare (not start) a stack; 0 brokers or 0 servers leaves that system out. `secure`
        generates TLS material and a SCRAM user and adds the secured listeners to Kafka.

        The releases are `selected_versions()` (the POM's pins unless ``LAMINAR_KAFKA_VERSION``,
        ``LAMINAR_KAFKA_MODE`` or ``LAMINAR_ZOOKEEPER_VERSION`` choose others). ZooKeeper-mode
        brokers register under `kafka_zookeeper` (hosts and chroot), else under the chroot
        ``/kafka`` of this stack's own ZooKeeper; without either, raises DevStackError (one line).
        """
        versions = selected_versions()
        if versions.zookeeper_mode and kafka_brokers and not (kafka_zookeeper or zookeeper_servers):
            raise DevStackError(f"{versions.describe()}: the brokers need a ZooKeeper; start one with the stack "
                                "(zookeeper_servers=1) or pass kafka_zookeeper")
        if versions.zookeeper_mode and secure:
            raise DevStackError(f"{versions.describe()}: the secured listeners need KRaft brokers")
        lib_dir = ensure_artifacts(cache_dir, versions)
        base = base_dir or Path(tempfile.mkdtemp(prefix="laminar-devstack-"))
        base.mkdir(parents=True, exist_ok=True)
        security = None
        if secure and kafka_brokers:
            from laminar_kafka.devstack.security import generate_material

            security = generate_material(base / "security")
        zookeeper = new_zookeeper(lib_dir, base, zookeeper_servers) if zookeeper_servers else None
        broker_zookeeper = None
        if versions.zookeeper_mode:
            broker_zookeeper = kafka_zookeeper or (f"{zookeeper.hosts}/kafka" if zookeeper else None)
        kafka = new_kafka_cluster(lib_dir, base, kafka_brokers, security, versions=versions,
                                  zookeeper_connect=broker_zookeeper) if kafka_brokers else None
        stack = cls(base_dir=base, kafka=kafka, zookeeper=zookeeper)
        if security is not None:
            stack.write_client_configs()
        return stack

    @classmethod
    def launch(
        cls,
        *,
        kafka_brokers: int = 1,
        zookeeper_servers: int = 1,
        base_dir: Path | None = None,
        cache_dir: Path | None = None,
        timeout: float = DEFAULT_START_TIMEOUT_S,
        attempts: int = 3,
        detach: bool = False,
        secure: bool = False,
        kafka_zookeeper: str | None = None,
    ) -> DevStack:
        """Create and start a stack (see `create`); when a port was taken between choosing and binding
        it, try again on fresh ports (up to `attempts` times). Returns a healthy, started stack."""
        for attempt in range(1, attempts + 1):
            stack = cls.create(
                kafka_brokers=kafka_brokers, zookeeper_servers=zookeeper_servers,
                base_dir=base_dir / f"attempt-{attempt}" if base_dir else None, cache_dir=cache_dir,
                secure=secure, kafka_zookeeper=kafka_zookeeper,
            )
            try:
                stack.start(timeout, detach=detach)
                return stack
            except ServerStartError as exc:
                stack.stop(clean=base_dir is None)
                if attempt == attempts or not _port_taken(str(exc)):
                    raise
                logger.warning("a port was taken while starting the dev stack; retrying on fresh ports")
        raise AssertionError("unreachable")

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap if self.kafka else ""

    @property
    def zk_hosts(self) -> str:
        return self.zookeeper.hosts if self.zookeeper else ""

    # ---- a secure stack ----

    @property
    def security(self) -> SecurityMaterial | None:
        """The TLS material and SCRAM user of a secure stack (None otherwise)."""
        return self.kafka.security if self.kafka else None

    def _require_security(self) -> SecurityMaterial:
        if self.kafka is None or self.kafka.security is None:
            raise DevStackStateError("this dev stack was not created with secure=True")
        return self.kafka.security

    def sasl_ssl_client(self, *, ca_cert: Path | None = None, password: str | None = None) -> KafkaClientConfig:
        """The client configuration of the SASL_SSL listeners (SCRAM-SHA-512); `ca_cert` and
        `password` replace the generated ones (negative tests)."""
        from laminar_kafka.devstack.security import sasl_ssl_client_properties
        from laminar_kafka.kafka_source.clients import KafkaClientConfig

        material = self._require_security()
        assert self.kafka is not None
        return KafkaClientConfig(self.kafka.sasl_ssl_bootstrap, sasl_ssl_client_properties(
            material, ca_cert=ca_cert, password=password))

    def mtls_client(
        self, *, ca_cert: Path | None = None, certificate: Path | None = None, key: Path | None = None
    ) -> KafkaClientConfig:
        """The client configuration of the mTLS (SSL, client certificate required) listeners;
        `ca_cert`, `certificate` and `key` replace the generated files (negative tests)."""
        from laminar_kafka.devstack.security import mtls_client_properties
        from laminar_kafka.kafka_source.clients import KafkaClientConfig

        material = self._require_security()
        assert self.kafka is not None
        return KafkaClientConfig(self.kafka.ssl_bootstrap, mtls_client_properties(
            material, ca_cert=ca_cert, certificate=certificate, key=key))

    @property
    def client_config_path(self) -> Path:
        return self.base_dir / CLIENT_CONFIG_NAME

    @property
    def mtls_client_config_path(self) -> Path:
        return self.base_dir / MTLS_CLIENT_CONFIG_NAME

    def write_client_configs(self) -> tuple[Path, Path]:
        """Write `client.toml` (SASL_SSL) and `client-mtls.toml` (mTLS), mode 0600; return their paths."""
        from laminar_kafka.devstack.security import write_client_toml

        sasl, mtls = self.sasl_ssl_client(), self.mtls_client()
        write_client_toml(self.client_config_path, dict(sasl.properties), bootstrap=sasl.bootstrap,
                          comment="laminar-kafka dev stack: SASL_SSL (SCRAM-SHA-512); holds the password")
        write_client_toml(self.mtls_client_config_path, dict(mtls.properties), bootstrap=mtls.bootstrap,
                          comment="laminar-kafka dev stack: mTLS (SSL with a client certificate); holds the key password")
        return self.client_config_path, self.mtls_client_config_path

    def secure_state(self) -> dict[str, str] | None:
        """What `dev up`/`dev status` show of a secure stack: addresses, user name, file paths; no secret."""
        if self.kafka is None or self.kafka.security is None:
            return None
        return {
            "sasl_ssl_bootstrap": self.kafka.sasl_ssl_bootstrap,
            "ssl_bootstrap": self.kafka.ssl_bootstrap,
            "sasl_username": self.kafka.security.user.name,
            "client_config": str(self.client_config_path),
            "mtls_client_config": str(self.mtls_client_config_path),
        }

    def servers(self) -> list[JvmServer]:
        return [*(self.zookeeper.servers if self.zookeeper else []), *(self.kafka.brokers if self.kafka else [])]

    def start(self, timeout: float = DEFAULT_START_TIMEOUT_S, *, detach: bool = False) -> float:
        """Launch every server, wait until all are healthy; return (and keep) the seconds it took.

        On failure every server started here is stopped before the error propagates. Unless
        `detach` (the servers must outlive this process, as for `dev up`), they are also stopped
        when this Python process exits, even if the caller forgets to, so no JVM is left behind.
        """
        started = time.monotonic()
        if not detach:
            atexit.register(self.stop)
        try:
            for server in self.servers():
                server.start()
            for server in self.servers():
                server.wait_healthy(max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:  # stop what started, then re-raised
            self.stop(clean=False)
            raise
        self.startup_seconds = time.monotonic() - started
        return self.startup_seconds

    def stop(self, clean: bool = True) -> None:
        """Stop Kafka first (it may still talk to clients), then ZooKeeper; optionally remove base_dir."""
        atexit.unregister(self.stop)
        for server in reversed(self.servers()):
            server.stop()
        if clean:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> DevStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- state file (for `laminar-kafka dev`) ----

    def to_state(self) -> dict[str, object]:
        return {
            "base_dir": str(self.base_dir),
            "secure": self.secure_state(),
            "bootstrap": self.bootstrap,
            "zk_hosts": self.zk_hosts,
            "startup_seconds": round(self.startup_seconds, 2),
            "processes": [
                {"name": s.name, "pid": s.pid, "port": s.port, "log": str(s.log_path)} for s in self.servers()
            ],
        }


def default_state_file() -> Path:
    return default_cache_dir() / "devstack" / "state.json"


@dataclass(frozen=True)
class StackProcess:
    """A server process recorded in the state file, and whether it is still the same live process."""

    name: str
    pid: int
    port: int
    log: str
    alive: bool


@dataclass(frozen=True)
class RecordedStack:
    """What a state file says, checked against the live process table (never trusted blindly)."""

    base_dir: Path
    bootstrap: str
    zk_hosts: str
    startup_seconds: float
    processes: tuple[StackProcess, ...]
    #: `DevStack.secure_state()` of a secure stack (no secret), else None.
    secure: Mapping[str, str] | None = field(default=None)

    @property
    def healthy(self) -> bool:
        return bool(self.processes) and all(p.alive for p in self.processes)


def read_state(state_file: Path) -> RecordedStack | None:
    """Parse the state file and check each recorded pid: alive AND launched by this stack.

    Returns None when there is no state file. A pid that now belongs to another program counts as
    dead, so a stale file from a crashed `dev up` never makes us signal a stranger.
    """
    if not state_file.exists():
        return None
    try:
        raw = json.loads(state_file.read_text())
        processes = tuple(
            StackProcess(
                name=str(p["name"]), pid=int(p["pid"]), port=int(p["port"]), log=str(p["log"]),
                alive=pid_alive(int(p["pid"])) and f"-Dlaminar.devstack.server={p['name']}" in pid_cmdline(int(p["pid"]))
                and str(raw["base_dir"]) in pid_cmdline(int(p["pid"])),
            )
            for p in raw["processes"]
        )
        return RecordedStack(
            base_dir=Path(raw["base_dir"]), bootstrap=str(raw["bootstrap"]), zk_hosts=str(raw["zk_hosts"]),
            startup_seconds=float(raw.get("startup_seconds", 0.0)), processes=processes,
            secure={str(k): str(v) for k, v in raw["secure"].items()} if raw.get("secure") else None,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DevStackStateError(f"unreadable dev stack state file {state_file}: {exc}", cause=exc) from exc


def write_state(state_file: Path, stack: DevStack) -> None:
    """Write the state file atomically (temporary file, fsync, rename)."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    temporary = state_file.with_suffix(".tmp")
    with open(temporary, "w") as handle:
        json.dump(stack.to_state(), handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(state_file)


def tear_down_recorded(stack: RecordedStack, state_file: Path) -> list[str]:
    """Stop every live process of a recorded stack, remove its directory and the state file.

    Returns the names of the processes that were stopped.
    """
    stopped: list[str] = []
    for process in reversed(stack.processes):
        if process.alive:
            terminate_pid(process.pid)
            stopped.append(process.name)
    if stack.base_dir.name.startswith("laminar-devstack"):
        shutil.rmtree(stack.base_dir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        state_file.unlink()
    return stopped


def _port_taken(message: str) -> bool:
    return "Address already in use" in message or "BindException" in message
