"""Kafka (KRaft) and ZooKeeper as containers of the project's images, with the fault controls.

Ports: each server's client port is published on 127.0.0.1 at a host port chosen before the
container is created, and Kafka advertises exactly that address (`PLAINTEXT://127.0.0.1:<port>`), so
clients on the host reach the broker at the address its metadata names. The binding belongs to the
container, so it survives `stop`/`kill` + `start`, `restart` and `pause`.

`ServerContainer` has the fault controls the local process launcher has (kill = SIGKILL, stop =
SIGTERM then SIGKILL, pause = cgroup freezer, restart) and `ContainerGroup` offers them by index with
the launcher's names (`kill_broker`, `restart_server`, ...), so the test fixtures hand out either.
`ContainerStack` is `laminar-kafka dev up --containers`: containers that outlive the command, found
again by their labels.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from laminar_kafka.devstack.containers.engine import KAFKA_IMAGE, ZOOKEEPER_IMAGE, ContainerError, check_container_runs
from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.jvm.artifacts import LOG_TAIL_LINES
from laminar_kafka.devstack.jvm.kafka_cluster import kafka_healthy
from laminar_kafka.devstack.jvm.servers import DEFAULT_START_TIMEOUT_S, zookeeper_session_ok
from laminar_kafka.devstack.processes import free_port, port_accepts

__all__ = ["KAFKA_PORT", "ROLE_LABEL", "STACK_LABEL", "ZOOKEEPER_PORT", "ContainerGroup", "ContainerStack",
           "ServerContainer", "kafka_environment", "kafka_health", "port_taken", "remove_stack", "run_server",
           "stack_containers", "zookeeper_environment", "zookeeper_health"]

STACK_LABEL = "dev.laminar.stack"
ROLE_LABEL = "dev.laminar.role"
KAFKA_PORT = 9092
ZOOKEEPER_PORT = 2181


def kafka_environment(host_port: int, heap: str = "-Xmx512m -Xms128m") -> dict[str, str]:
    """The broker's settings for a host port: clients are told 127.0.0.1:<host_port>; the broker's
    requests to itself (transaction verification) use the inter-broker listener inside the container."""
    return {"KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{host_port},BROKER://localhost:9094",
            "KAFKA_HEAP_OPTS": heap}


def zookeeper_environment(heap: str = "-Xmx256m -Xms64m") -> dict[str, str]:
    return {"ZOO_HEAP_OPTS": heap}


def kafka_health(host_port: int) -> Callable[[], bool]:
    return lambda: kafka_healthy(f"127.0.0.1:{host_port}", 1)


def zookeeper_health(host_port: int) -> Callable[[], bool]:
    return lambda: zookeeper_session_ok(f"127.0.0.1:{host_port}")


@dataclass
class ServerContainer:
    """One server container (a docker SDK Container) and the host port its clients use."""

    name: str
    container: Any
    port: int
    health: Callable[[], bool]

    def status(self) -> str:
        try:
            self.container.reload()
        except Exception:  # noqa: BLE001 - removed
            return "removed"
        return str(self.container.status)

    def running(self) -> bool:
        return self.status() == "running"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        with contextlib.suppress(Exception):
            return self.container.logs(tail=lines).decode(errors="replace")
        return ""

    def wait_healthy(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Block until the server serves clients; ServerStartError with its log when it exits or times out."""
        started = time.monotonic()
        while True:
            status = self.status()
            if status in ("exited", "dead", "removed"):
                raise ServerStartError(f"container {self.name} {status} before becoming healthy:\n{self.log_tail()}")
            if status == "running" and port_accepts(self.port) and self.health():
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise ServerStartError(f"container {self.name} not healthy after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.25)

    def start(self) -> None:
        self.container.start()

    def stop(self, timeout: int = 20) -> None:
        """SIGTERM, SIGKILL after `timeout` seconds (a paused container is resumed first)."""
        if self.status() == "paused":
            self.resume()
        self.container.stop(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would; returns once the container has exited."""
        if self.status() == "paused":
            self.resume()
        with contextlib.suppress(Exception):
            self.container.kill()
        deadline = time.monotonic() + 20
        while self.status() == "running" and time.monotonic() < deadline:
            time.sleep(0.1)

    def pause(self) -> None:
        """Freeze every process of the container: its port stays open but nothing answers."""
        self.container.pause()

    def resume(self) -> None:
        self.container.unpause()

    def restart(self, timeout: int = 20) -> None:
        self.stop(timeout)
        self.start()

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True, v=True)


@dataclass
class ContainerGroup:
    """Fault controls by index, named as the local launcher's (`laminar_kafka.devstack.jvm.kafka_cluster.KafkaCluster` and
    `laminar_kafka.devstack.jvm.servers.ZooKeeperEnsemble`), plus `stop_member` (a graceful stop that stays stopped)."""

    members: list[ServerContainer] = field(default_factory=list)

    def kill(self, index: int = 0) -> None:
        self.members[index].kill()

    def stop_member(self, index: int = 0) -> None:
        self.members[index].stop()

    def start_member(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].start()
        self.members[index].wait_healthy(timeout)

    def restart(self, index: int = 0, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self.members[index].restart()
        self.members[index].wait_healthy(timeout)

    def pause(self, index: int = 0) -> None:
        self.members[index].pause()

    def resume(self, index: int = 0) -> None:
        self.members[index].resume()

    kill_broker = kill_server = kill
    stop_broker = stop_server = stop_member
    start_broker = start_server = start_member
    restart_broker = restart_server = restart
    pause_broker = pause_server = pause
    resume_broker = resume_server = resume


def port_taken(exc: BaseException) -> bool:
    """Whether ``exc`` (an engine's error starting a container) says the host port was taken
    (bound by another process between choosing it and starting): worth a retry on another port."""
    text = str(exc).lower()
    return "address already in use" in text or "port is already allocated" in text


def run_server(
    client: Any, role: str, name: str, labels: dict[str, str] | None = None, attempts: int = 3,
) -> ServerContainer:
    """Create and start a Kafka or ZooKeeper container on a free host port (not waiting for health);
    when the port was taken in between, try again on another one."""
    check_container_runs(client)
    image, container_port = (KAFKA_IMAGE, KAFKA_PORT) if role == "kafka" else (ZOOKEEPER_IMAGE, ZOOKEEPER_PORT)
    try:
        client.images.get(image)
    except Exception as exc:  # not built yet
        raise ContainerError(f"image {image} is missing: run `python -m laminar_kafka.devstack.containers build`", cause=exc) from exc
    for attempt in range(1, attempts + 1):
        port = free_port()
        environment = kafka_environment(port) if role == "kafka" else zookeeper_environment()
        health = kafka_health(port) if role == "kafka" else zookeeper_health(port)
        try:
            container = client.containers.run(
                image, name=name, detach=True, environment=environment,
                ports={f"{container_port}/tcp": ("127.0.0.1", port)},
                labels={ROLE_LABEL: role, **(labels or {})},
            )
            return ServerContainer(name=name, container=container, port=port, health=health)
        except Exception as exc:  # a taken port is retried, anything else is an error
            with contextlib.suppress(Exception):
                client.containers.get(name).remove(force=True)
            if attempt == attempts or not port_taken(exc):
                raise ServerStartError(f"starting container {name} from {image} failed: {exc}", cause=exc) from exc
    raise AssertionError("unreachable")


@dataclass
class ContainerStack:
    """Kafka and/or ZooKeeper containers labelled as one stack; `launch` returns once both are healthy."""

    name: str
    kafka: ServerContainer | None = None
    zookeeper: ServerContainer | None = None
    startup_seconds: float = 0.0

    @classmethod
    def launch(cls, client: Any, name: str, *, kafka: bool = True, zookeeper: bool = True,
               timeout: float = DEFAULT_START_TIMEOUT_S) -> ContainerStack:
        started = time.monotonic()
        stack = cls(name=name)
        labels = {STACK_LABEL: name}
        try:
            if zookeeper:
                stack.zookeeper = run_server(client, "zookeeper", f"{name}-zookeeper", labels)
            if kafka:
                stack.kafka = run_server(client, "kafka", f"{name}-kafka", labels)
            for server in stack.servers():
                server.wait_healthy(max(1.0, timeout - (time.monotonic() - started)))
        except BaseException:  # remove what started, then re-raised
            remove_stack(client, name)
            raise
        stack.startup_seconds = time.monotonic() - started
        return stack

    def servers(self) -> list[ServerContainer]:
        return [s for s in (self.zookeeper, self.kafka) if s is not None]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka.port}" if self.kafka else ""

    @property
    def zk_hosts(self) -> str:
        return f"127.0.0.1:{self.zookeeper.port}" if self.zookeeper else ""

    def to_state(self) -> dict[str, object]:
        return {
            "kind": "containers", "stack": self.name, "bootstrap": self.bootstrap, "zk_hosts": self.zk_hosts,
            "startup_seconds": round(self.startup_seconds, 2),
            "containers": [{"name": s.name, "id": s.container.id, "port": s.port} for s in self.servers()],
        }

    def stop(self, client: Any) -> list[str]:
        return remove_stack(client, self.name)


def stack_containers(client: Any, name: str) -> list[Any]:
    """The containers (any state) labelled as stack `name`."""
    return list(client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={name}"}))


def remove_stack(client: Any, name: str) -> list[str]:
    """Remove every container of stack `name` with its anonymous volumes; returns their names."""
    removed = []
    for container in stack_containers(client, name):
        with contextlib.suppress(Exception):
            container.remove(force=True, v=True)
            removed.append(container.name)
    return removed
