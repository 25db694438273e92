"""What the JVM services of the dev stack share beside Kafka and ZooKeeper (the schema registry, the
Iceberg REST catalog): the small-heap options, the version a POM pins, an HTTP health probe, the
service wrapper around :class:`~laminar_kafka.devstack.jvm.servers.JvmServer`, and running one in the foreground."""
from __future__ import annotations

import json
import logging
import re
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.coordinator.stop_signals import run_until_stopped
from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm.servers import DEFAULT_START_TIMEOUT_S, JvmServer

logger = logging.getLogger(__name__)

__all__ = ["SMALL_JVM_OPTIONS", "HttpJvmService", "answers_json", "pom_property", "run_in_foreground"]

#: small heap, quick start: these services hold a handful of schemas or tables in tests
SMALL_JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
)


def pom_property(pom_path: Path, name: str) -> str:
    """The value of property ``name`` (a pinned version) in the POM at ``pom_path``."""
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom_path.read_text())
    if not match:
        raise ArtifactError(f"{pom_path} does not pin {name}")
    return match.group(1)


def answers_json(url: str, kind: type, timeout: float = 2.0) -> bool:
    """Whether ``GET url`` answers HTTP 200 with a JSON value of type ``kind`` (list, dict)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200 and isinstance(json.loads(response.read()), kind)
    except (OSError, urllib.error.URLError, ValueError):
        return False


@dataclass
class HttpJvmService:
    """One JVM process serving HTTP on a loopback port; its output goes to ``log_path``."""

    server: JvmServer

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def start(self, timeout: float = DEFAULT_START_TIMEOUT_S) -> float:
        """Launch the process and wait until the API answers; return the seconds waited.

        Raises ServerStartError quoting the end of the log when it exits or the timeout passes first;
        the process is stopped then.
        """
        self.server.start()
        try:
            waited = self.server.wait_healthy(timeout)
        except BaseException:  # an interrupted start too: the process is stopped, then it re-raises
            self.server.stop()
            raise
        logger.info("%s ready on port %d after %.1fs", self.server.name, self.port, waited)
        return waited

    def running(self) -> bool:
        return self.server.running()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; no-op when not running."""
        self.server.stop(timeout)


def run_in_foreground(service: HttpJvmService, banner: str, base_dir: Path) -> None:
    """Start ``service``, print ``banner``, run until Ctrl-C or SIGTERM, then stop it and remove
    ``base_dir`` (the ``python -m laminar_kafka.devstack.jvm.<service>`` entry points)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    service.start()
    print(f"{banner}  (log: {service.log_path}; Ctrl-C stops it)", flush=True)
    try:
        run_until_stopped(service.running)
    finally:
        service.stop()
        shutil.rmtree(base_dir, ignore_errors=True)
