"""Real Apache Kafka (KRaft) and Apache ZooKeeper as local JVM processes.

This module is the one launcher that both the CLI (`laminar-kafka dev up|status|down`) and the test
fixtures use. It resolves the official Maven Central artifacts through a small POM (`cluster/pom.xml`)
into a cache, writes server configurations into temporary directories, starts the servers on free
loopback ports, waits until they are healthy and stops them without leaving a process behind.

Health means what a client needs: a Kafka cluster is healthy when every broker answers a metadata
request listing all brokers; a ZooKeeper server is healthy when it grants a client session (for an
ensemble member, only possible once a quorum has formed).

Fault injection (tests/faults) uses `kill` (SIGKILL), `pause`/`resume` (SIGSTOP/SIGCONT) and
`restart` on single servers; a restarted server keeps its port and data directory.
"""
from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from cluster.errors import ArtifactError, DevStackStateError, ServerStartError, ToolMissingError

logger = logging.getLogger(__name__)

POM_PATH = Path(__file__).with_name("pom.xml")
LOG_TAIL_LINES = 30
DEFAULT_START_TIMEOUT_S = 90.0

_JAVA_HINT = "Java 17 or newer is required to run Kafka and ZooKeeper: install it (Debian: apt-get install openjdk-17-jre-headless)"
_MAVEN_HINT = "Maven is required to fetch the Kafka and ZooKeeper artifacts: install it (Debian: apt-get install maven)"


# --------------------------------------------------------------------------------------------------
# Artifacts


def pinned_versions(pom_path: Path = POM_PATH) -> tuple[str, str]:
    """Return the (Kafka, ZooKeeper) versions pinned in the POM."""
    text = pom_path.read_text()
    kafka = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    zookeeper = re.search(r"<zookeeper\.version>([^<]+)</zookeeper\.version>", text)
    if not kafka or not zookeeper:
        raise ArtifactError(f"{pom_path} does not pin kafka.version and zookeeper.version")
    return kafka.group(1), zookeeper.group(1)


def default_cache_dir() -> Path:
    """`$LAMINAR_CACHE_DIR`, else `~/.cache/laminar-kafka`."""
    configured = os.environ.get("LAMINAR_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "laminar-kafka"


def require_tool(name: str, hint: str) -> str:
    """Return the path of executable `name`, or raise ToolMissingError with one line saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise ToolMissingError(hint)
    return path


def ensure_artifacts(cache_dir: Path | None = None) -> Path:
    """Resolve the pinned Kafka and ZooKeeper jars (with their runtime dependencies) into the cache.

    Returns the directory holding the jars. The first call runs Maven (Maven Central only); later
    calls find the completed directory and return at once. Concurrent callers serialise on a lock
    file, and a half-finished resolution is never mistaken for a complete one.
    """
    cache = cache_dir or default_cache_dir()
    kafka_version, zookeeper_version = pinned_versions()
    lib_dir = cache / f"jvm-kafka-{kafka_version}-zookeeper-{zookeeper_version}"
    marker = lib_dir / ".complete"
    if marker.exists():
        return lib_dir
    require_tool("java", _JAVA_HINT)
    mvn = require_tool("mvn", _MAVEN_HINT)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return lib_dir
        staging = Path(tempfile.mkdtemp(prefix=".resolving-", dir=cache))
        command = [
            mvn, "-q", "-B", "-f", str(POM_PATH), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime", "-Dmdep.prependGroupId=true",
        ]
        logger.info("resolving Kafka %s and ZooKeeper %s from Maven Central", kafka_version, zookeeper_version)
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0 or not any(staging.glob("*kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-LOG_TAIL_LINES:])
            raise ArtifactError(f"Maven could not resolve the Kafka/ZooKeeper artifacts:\n{tail}")
        if lib_dir.exists():
            shutil.rmtree(lib_dir)
        staging.rename(lib_dir)
        marker.write_text(f"kafka={kafka_version}\nzookeeper={zookeeper_version}\n")
    return lib_dir


# --------------------------------------------------------------------------------------------------
# Ports and processes

_handed_out_ports: set[int] = set()


def free_port() -> int:
    """A loopback TCP port that is free now and was not handed out before by this process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out_ports:
            _handed_out_ports.add(port)
            return port
    raise ServerStartError("no free loopback port found")


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether `pid` names a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def pid_cmdline(pid: int) -> str:
    """The command line of `pid` ('' when unknown)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM `pid` (resuming it first if stopped), wait up to `timeout`, then SIGKILL."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        _reap(pid)
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(pid):
            _reap(pid)
            time.sleep(0.05)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafkareq.name = kafka.request.logger
logger.kafkareq.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass
class JvmServer:
    """One JVM server process: a main class, its arguments, a working directory and a log file.

    Invariants: `port` and `workdir` never change across restarts; `pid` is the running process or
    None. `health` is a callable that returns True once the server serves clients.
    """

    name: str
    main_class: str
    args: list[str]
    workdir: Path
    classpath: str
    port: int
    health: Callable[[], bool]
    jvm_options: list[str] = field(default_factory=list)
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def command(self) -> list[str]:
        java = require_tool("java", _JAVA_HINT)
        log4j = self.workdir / "log4j2.properties"
        if not log4j.exists():
            log4j.write_text(_LOG4J2_PROPERTIES)
        return [
            java, *self.jvm_options,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dlaminar.devstack.server={self.name}",
            "-cp", self.classpath, self.main_class, *self.args,
        ]

    def start(self) -> None:
        """Launch the process (detached in its own session); does not wait for health."""
        if self.pid is not None and pid_alive(self.pid):
            raise ServerStartError(f"{self.name} is already running as pid {self.pid}")
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command(), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid = self._process.pid

    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Block until `health()` holds; return the seconds waited.

        Raises ServerStartError quoting the last lines of the log when the process exits first or
        the timeout passes.
        """
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if not self.running():
                raise ServerStartError(
                    f"{self.name} exited before becoming healthy; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if port_accepts(self.port) and self.health():
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name} not healthy after {timeout:.0f}s; last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after `timeout`). No-op when not running."""
        if self.pid is not None:
            terminate_pid(self.pid, timeout)
        self._forget()

    def kill(self) -> None:
        """SIGKILL, as a crash would; waits until the process is gone."""
        if self.pid is not None:
            terminate_pid(self.pid, timeout=0)
        self._forget()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    def _forget(self) -> None:
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
        self._process = None
        self.pid = None


def _java_options(heap: str) -> list[str]:
    return [
        f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
    ]


def _write_properties(path: Path, values: dict[str, object]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))


# --------------------------------------------------------------------------------------------------
# Kafka (KRaft)


def _kafka_healthy(bootstrap: str, broker_count: int) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 2000})
    try:
        metadata = admin.list_topics(timeout=2)
    except Exception:  # noqa: BLE001 - any failure here just means "not healthy yet"
        return False
    return len(metadata.brokers) >= broker_count


class _ServerGroup:
    """Fault controls on one server of a group (by index); a restarted server keeps its port and data."""

    members: list[JvmServer]

    def kill(self, index: int = 0) -> None:
        self.members[index].kill()

    def start_member(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].start()
        self.members[index].wait_healthy(timeout)

    def restart(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].stop()
        self.start_member(index, timeout)

    def pause(self, index: int = 0) -> None:
        self.members[index].pause()

    def resume(self, index: int = 0) -> None:
        self.members[index].resume()


@dataclass
class KafkaCluster(_ServerGroup):
    """A KRaft Kafka cluster of combined broker+controller nodes on loopback.

    One node: replication 1. Three nodes: replication 3 and min.insync.replicas 2, for fault tests.
    """

    brokers: list[JvmServer]
    cluster_id: str

    @property
    def members(self) -> list[JvmServer]:
        return self.brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{broker.port}" for broker in self.brokers)

    kill_broker = _ServerGroup.kill
    start_broker = _ServerGroup.start_member
    restart_broker = _ServerGroup.restart
    pause_broker = _ServerGroup.pause
    resume_broker = _ServerGroup.resume


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, as Kafka's
    `Uuid.randomUuid()` makes them; like Kafka, never one that starts with '-' (a command line would
    read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def new_kafka_cluster(lib_dir: Path, base_dir: Path, broker_count: int = 1) -> KafkaCluster:
    """Write configurations for `broker_count` KRaft nodes under `base_dir` and format their storage."""
    if broker_count not in (1, 3):
        raise ValueError("broker_count must be 1 or 3")
    classpath = f"{lib_dir}/*"
    cluster_id = new_cluster_id()
    ports = [(free_port(), free_port()) for _ in range(broker_count)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
    replication = broker_count
    min_isr = 2 if broker_count == 3 else 1
    bootstrap = ",".join(f"127.0.0.1:{port}" for port, _ in ports)
    brokers: list[JvmServer] = []
    for index, (port, controller_port) in enumerate(ports):
        workdir = base_dir / f"kafka-{index + 1}"
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        properties = workdir / "server.properties"
        _write_properties(properties, {
            "process.roles": "broker,controller",
            "node.id": index + 1,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": workdir / "data",
            "num.partitions": 1,
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            "num.network.threads": 2,
            "num.io.threads": 4,
            "log.retention.check.interval.ms": 1000,
            "log.segment.delete.delay.ms": 500,
            "log.initial.task.delay.ms": 1000,
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 3000,
        })
        format_command = [
            require_tool("java", _JAVA_HINT), "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool",
            "format", f"--cluster-id={cluster_id}", "--config", str(properties), "--ignore-formatted",
        ]
        result = subprocess.run(format_command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise ServerStartError(f"formatting KRaft storage failed:\n{(result.stdout + result.stderr)[-3000:]}")
        brokers.append(JvmServer(
            name=f"kafka-{index + 1}",
            main_class="kafka.Kafka",
            args=[str(properties)],
            workdir=workdir,
            classpath=classpath,
            port=port,
            health=lambda: _kafka_healthy(bootstrap, broker_count),
            jvm_options=_java_options("1g"),
        ))
    return KafkaCluster(brokers=brokers, cluster_id=cluster_id)


# --------------------------------------------------------------------------------------------------
# ZooKeeper


# Health probes fail by design while a server starts; their connection warnings are not news.
_quiet_kazoo_logger = logging.getLogger(f"{__name__}.health_probe")
_quiet_kazoo_logger.setLevel(logging.CRITICAL)


def _zookeeper_session_ok(hosts: str) -> bool:
    from kazoo.client import KazooClient

    client = KazooClient(
        hosts=hosts, timeout=3.0, connection_retry=None, command_retry=None, logger=_quiet_kazoo_logger
    )
    try:
        client.start(timeout=2.0)
    except Exception:  # noqa: BLE001 - any failure here just means "not healthy yet"
        with contextlib.suppress(Exception):
            client.stop()
            client.close()
        return False
    client.stop()
    client.close()
    return True


@dataclass
class ZooKeeperEnsemble(_ServerGroup):
    """A standalone ZooKeeper server, or a three-server ensemble, on loopback."""

    servers: list[JvmServer]

    @property
    def members(self) -> list[JvmServer]:
        return self.servers

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{server.port}" for server in self.servers)

    kill_server = _ServerGroup.kill
    start_server = _ServerGroup.start_member
    restart_server = _ServerGroup.restart
    pause_server = _ServerGroup.pause
    resume_server = _ServerGroup.resume


def new_zookeeper(lib_dir: Path, base_dir: Path, server_count: int = 1) -> ZooKeeperEnsemble:
    """Write configurations for a standalone server (1) or an ensemble (3) under `base_dir`.

    tickTime is 500 ms, so sessions may negotiate timeouts from 1 s to 60 s (tests use short ones).
    """
    if server_count not in (1, 3):
        raise ValueError("server_count must be 1 or 3")
    classpath = f"{lib_dir}/*"
    ports = [(free_port(), free_port(), free_port()) for _ in range(server_count)]
    servers: list[JvmServer] = []
    for index, (client_port, peer_port, election_port) in enumerate(ports):
        workdir = base_dir / f"zookeeper-{index + 1}"
        data = workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        values: dict[str, object] = {
            "tickTime": 500,
            "initLimit": 20,
            "syncLimit": 10,
            "dataDir": data,
            "clientPort": client_port,
            "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": 0,
            "minSessionTimeout": 1000,
            "maxSessionTimeout": 60000,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "*",
            "autopurge.purgeInterval": 1,
        }
        if server_count > 1:
            (data / "myid").write_text(f"{index + 1}\n")
            for peer, (_, peer_p, election_p) in enumerate(ports):
                values[f"server.{peer + 1}"] = f"127.0.0.1:{peer_p}:{election_p}"
        config = workdir / "zoo.cfg"
        _write_properties(config, values)
        hosts = f"127.0.0.1:{client_port}"
        servers.append(JvmServer(
            name=f"zookeeper-{index + 1}",
            main_class="org.apache.zookeeper.server.quorum.QuorumPeerMain",
            args=[str(config)],
            workdir=workdir,
            classpath=classpath,
            port=client_port,
            health=lambda hosts=hosts: _zookeeper_session_ok(hosts),
            jvm_options=[*_java_options("512m"), "-Dzookeeper.admin.enableServer=false"],
        ))
    return ZooKeeperEnsemble(servers=servers)


# --------------------------------------------------------------------------------------------------
# The whole stack


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
    ) -> DevStack:
        """Prepare (not start) a stack; 0 brokers or 0 servers leaves that system out."""
        lib_dir = ensure_artifacts(cache_dir)
        base = base_dir or Path(tempfile.mkdtemp(prefix="laminar-devstack-"))
        base.mkdir(parents=True, exist_ok=True)
        kafka = new_kafka_cluster(lib_dir, base, kafka_brokers) if kafka_brokers else None
        zookeeper = new_zookeeper(lib_dir, base, zookeeper_servers) if zookeeper_servers else None
        return cls(base_dir=base, kafka=kafka, zookeeper=zookeeper)

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
    ) -> DevStack:
        """Create and start a stack; when a port was taken between choosing and binding it, try
        again on fresh ports (up to `attempts` times). Returns a healthy, started stack."""
        for attempt in range(1, attempts + 1):
            stack = cls.create(
                kafka_brokers=kafka_brokers, zookeeper_servers=zookeeper_servers,
                base_dir=base_dir / f"attempt-{attempt}" if base_dir else None, cache_dir=cache_dir,
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
        except BaseException:
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


@contextlib.contextmanager
def running_stack(**kwargs: object) -> Iterator[DevStack]:
    """Context manager: a started DevStack that is stopped and removed on exit."""
    stack = DevStack.launch(**kwargs)  # type: ignore[arg-type]
    try:
        yield stack
    finally:
        stack.stop()
