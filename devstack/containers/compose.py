"""A compose file as one project: up, scale, stop, start, restart, kill, exec, cut a container off its
network and back, down, and what is left behind. `docker/compose.yaml` by default;
`PRODUCTION_COMPOSE_FILE` (`docker/compose.production.yaml`) is the production-shaped cluster.

The compose client is Debian's `docker-compose` 1.29 (or `docker compose` where that plugin exists),
talking to whatever engine `laminar_kafka.devstack.containers.engine.engine_url` finds. On podman, healthchecks only run
when something runs them (no systemd timers): `HealthcheckDriver` runs `podman healthcheck run`
for the project's containers every few seconds while it is active; on Docker it does nothing. The
compose file's start order waits on `service_healthy`, so on podman keep a driver running beside
`up` (docs/compose.md):

    python -m laminar_kafka.devstack.containers.compose healthchecks -p <project>   # until Ctrl-C
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laminar_kafka.coordinator.stop_signals import run_until_stopped
from laminar_kafka.devstack.containers.engine import DOCKER_DIR, ContainerError, engine_url

COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
PRODUCTION_COMPOSE_FILE = DOCKER_DIR / "compose.production.yaml"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NUMBER_LABEL = "com.docker.compose.container-number"
#: how often `up` is tried when the engine lost a race with a container's own exit (see engine_race)
UP_ATTEMPTS = 3
_RACE = re.compile(r"read /proc/\d+/cgroup: no such process")


def engine_race(output: str) -> bool:
    """Whether a compose command failed only because podman read the cgroup of a container's process
    after it exited (a one-shot service such as ``topic-init`` ends within milliseconds): podman's
    Docker API answers ``read /proc/<pid>/cgroup: no such process``. The containers are created and
    started; `up` again finds them so and finishes the rest. Pure."""
    return bool(_RACE.search(output))


def compose_command() -> list[str]:
    """The compose client; ContainerError saying what to install when there is none."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    raise ContainerError("no compose client: apt-get install --no-install-recommends docker-compose "
                         "(or the docker compose plugin)")


@dataclass
class ComposeProject:
    """One project of the compose file; `env` adds variables (ports, image names) to the file's."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    file: Path = COMPOSE_FILE

    def command(self, *args: str) -> list[str]:
        return [*compose_command(), "-f", str(self.file), "-p", self.name, *args]

    def run(self, *args: str, timeout: float = 300.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "DOCKER_HOST": engine_url(), **self.env}
        result = subprocess.run(self.command(*args), env=environment, capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
        if check and result.returncode != 0:
            raise ContainerError(f"{' '.join(args[:2])} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}")
        return result

    def up(self, *services: str, timeout: float = 300.0) -> None:
        """Create and start ``services`` (all by default). `up` is idempotent, so a failure that is only
        :func:`engine_race` is tried again (at most :data:`UP_ATTEMPTS` times in all)."""
        for attempt in range(1, UP_ATTEMPTS + 1):
            try:
                self.run("up", "-d", "--no-build", *services, timeout=timeout)
                return
            except ContainerError as exc:
                if attempt == UP_ATTEMPTS or not engine_race(str(exc)):
                    raise

    def down(self, timeout: float = 180.0) -> None:
        self.run("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=timeout)

    def kill(self, service: str) -> None:
        self.run("kill", "-s", "SIGKILL", service)

    def stop(self, service: str, timeout: int = 20) -> None:
        """Stop every container of `service` (SIGTERM, SIGKILL after `timeout` seconds)."""
        self.run("stop", "--timeout", str(timeout), service, timeout=timeout + 120)

    def start(self, service: str) -> None:
        """Start the stopped containers of `service` again (same containers, same volumes)."""
        self.run("start", service)

    def restart(self, service: str, timeout: int = 20) -> None:
        """Stop and start every container of `service` (SIGTERM, SIGKILL after `timeout` seconds)."""
        self.run("restart", "--timeout", str(timeout), service, timeout=timeout + 120)

    def scale(self, client: Any, service: str, replicas: int, timeout: float = 300.0) -> list[str]:
        """Run `replicas` containers of `service` (new ones created, the highest-numbered ones stopped and
        removed; the others untouched), then remove the anonymous volumes of the removed ones, which
        compose leaves behind. Returns the names of the volumes removed."""
        before = {c.id: anonymous_volumes(c) for c in self.service_containers(client, service)}
        self.run("up", "-d", "--no-build", "--no-deps", "--no-recreate", "--scale", f"{service}={replicas}", service,
                 timeout=timeout)
        remaining = {c.id for c in self.service_containers(client, service)}
        removed = [volume for container_id, volumes in before.items() if container_id not in remaining for volume in volumes]
        for name in removed:
            client.volumes.get(name).remove()
        return removed

    def service_containers(self, client: Any, service: str) -> list[Any]:
        """The containers of `service` (running or not), by their replica number."""
        found = client.containers.list(all=True, filters={"label": [f"{PROJECT_LABEL}={self.name}",
                                                                     f"{SERVICE_LABEL}={service}"]})
        return sorted(found, key=lambda c: int(c.labels.get(NUMBER_LABEL, "0")))

    def network(self, client: Any) -> Any:
        """The project's default network (every service is on it)."""
        return client.networks.get(f"{self.name}_default")

    def disconnect(self, client: Any, container: Any) -> str | None:
        """Cut `container` off the project's network: nothing reaches it, it reaches nothing (it keeps
        running). Returns the address it had there (None: it had none), for `connect`."""
        container.reload()
        network = container.attrs["NetworkSettings"]["Networks"].get(f"{self.name}_default") or {}
        self.network(client).disconnect(container)
        return network.get("IPAddress") or None

    def connect(self, client: Any, container: Any, address: str | None = None) -> None:
        """Put `container` back on the project's network, reachable by its service's name again, at
        `address` when given: a healed partition keeps the address (without it the engine may pick a
        new one, and TCP connections of the old address then hang until the kernel gives them up)."""
        options = {"ipv4_address": address} if address else {}
        self.network(client).connect(container, aliases=[container.labels.get(SERVICE_LABEL, container.name)],
                                     **options)

    def exec(self, service: str, *command: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return self.run("exec", "-T", service, *command, timeout=timeout, check=False)

    def logs(self, *services: str, tail: int = 60) -> str:
        return self.run("logs", "--no-color", f"--tail={tail}", *services, check=False).stdout

    def containers(self, client: Any) -> list[Any]:
        return list(client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.name}"}))

    def leftovers(self, client: Any) -> list[str]:
        """Containers, volumes and networks of this project that still exist (after `down`: none)."""
        found = [f"container {c.name}" for c in self.containers(client)]
        found += [f"volume {v.name}" for v in client.volumes.list(filters={"label": f"{PROJECT_LABEL}={self.name}"})]
        found += [f"network {n.name}" for n in client.networks.list(filters={"label": f"{PROJECT_LABEL}={self.name}"})]
        # podman's compat API may not list volumes by label: match their names as well.
        found += [f"volume {v.name}" for v in client.volumes.list()
                  if v.name.startswith(f"{self.name}_") and f"volume {v.name}" not in found]
        return found


def anonymous_volumes(container: Any) -> list[str]:
    """The volumes mounted in `container` that no compose file names (a `- /path` volume): their names."""
    return [m["Name"] for m in container.attrs.get("Mounts", [])
            if m.get("Type") == "volume" and m.get("Name") and not str(m.get("Name")).startswith(
                f"{container.labels.get(PROJECT_LABEL, '')}_")]


class HealthcheckDriver:
    """Runs the healthchecks of a project's running containers every `interval` seconds (podman only)."""

    def __init__(self, client: Any, project: ComposeProject, interval: float = 3.0) -> None:
        self.client = client
        self.project = project
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthcheck-driver", daemon=True)
        self.podman = shutil.which("podman")
        self.runs = 0

    def __enter__(self) -> HealthcheckDriver:
        from laminar_kafka.devstack.containers.engine import is_podman

        if self.podman and is_podman(self.client):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def run_once(self) -> None:
        assert self.podman is not None
        for container in self.project.containers(self.client):
            with contextlib.suppress(Exception):
                if container.status == "running" and container.attrs.get("Config", {}).get("Healthcheck"):
                    subprocess.run([self.podman, "healthcheck", "run", container.id], capture_output=True, timeout=30)
                    self.runs += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()


def health(container: Any) -> str:
    """'healthy', 'unhealthy', 'starting' or 'none' (no healthcheck), as the engine reports it."""
    container.reload()
    state = container.attrs.get("State", {})
    return str((state.get("Health") or state.get("Healthcheck") or {}).get("Status") or "none")


def main(argv: list[str] | None = None) -> int:
    """``healthchecks -p PROJECT``: drive the project's healthchecks until Ctrl-C (podman only)."""
    from laminar_kafka.devstack.containers.engine import connect, is_podman

    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.devstack.containers.compose")
    commands = parser.add_subparsers(dest="command", required=True)
    drive = commands.add_parser("healthchecks", help="run the project's healthchecks every few seconds (podman "
                                                     "without systemd) until Ctrl-C")
    drive.add_argument("-p", "--project", default="docker",
                       help="the compose project name (default 'docker', compose's name for docker/compose.yaml)")
    drive.add_argument("--interval", type=float, default=3.0, help="seconds between runs (default 3)")
    args = parser.parse_args(argv)
    try:
        client = connect()
    except ContainerError as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if not (shutil.which("podman") and is_podman(client)):
        print("the engine runs healthchecks itself: nothing to drive")
        return 0
    with HealthcheckDriver(client, ComposeProject(args.project), args.interval):
        print(f"driving the healthchecks of compose project {args.project!r} every {args.interval:g} s (Ctrl-C stops)")
        run_until_stopped()
    return 0


if __name__ == "__main__":
    sys.exit(main())
