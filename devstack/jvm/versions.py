"""Which Kafka and ZooKeeper the dev stack runs: the POM's pins, or the versions chosen by environment.

`pom.xml` pins the default (today Kafka 4.1.1 in KRaft mode, ZooKeeper 3.9.4). The compatibility
matrix (`make matrix`, docs/compatibility.md) runs the same code against other releases, chosen by:

- ``LAMINAR_KAFKA_VERSION``: a Kafka release, 3.9.x or 4.x (``kafka_2.13`` from Maven Central);
- ``LAMINAR_KAFKA_MODE``: ``kraft`` (default) or ``zookeeper`` (ZooKeeper-mode brokers; Kafka 3.x
  only: Kafka 4.0 removed ZooKeeper mode);
- ``LAMINAR_ZOOKEEPER_VERSION``: a ZooKeeper release, 3.8.x or 3.9.x.

An unset or empty variable means the pinned default. `selected_versions` reads them and refuses a
release or combination the dev stack does not know how to run with :class:`UnsupportedVersionError`,
whose message is one line naming the variable. The choice applies to the local process backend
(`DevStack`, the test fixtures); the container images are always built from the pins.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError, DevStackError

logger = logging.getLogger(__name__)

__all__ = [
    "KAFKA_MODE_ENV", "KAFKA_VERSION_ENV", "POM_PATH", "ZOOKEEPER_VERSION_ENV", "KafkaMode", "ServerVersions",
    "UnsupportedVersionError", "parse_release", "pinned_versions", "selected_versions",
]

KAFKA_VERSION_ENV = "LAMINAR_KAFKA_VERSION"
KAFKA_MODE_ENV = "LAMINAR_KAFKA_MODE"
ZOOKEEPER_VERSION_ENV = "LAMINAR_ZOOKEEPER_VERSION"

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")

#: the POM that pins the default releases (and that Maven resolves them through)
POM_PATH = Path(__file__).with_name("pom.xml")


def pinned_versions(pom_path: Path = POM_PATH) -> tuple[str, str]:
    """Return the (Kafka, ZooKeeper) versions pinned in the POM."""
    text = pom_path.read_text()
    kafka = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", text)
    zookeeper = re.search(r"<zookeeper\.version>([^<]+)</zookeeper\.version>", text)
    if not kafka or not zookeeper:
        raise ArtifactError(f"{pom_path} does not pin kafka.version and zookeeper.version")
    return kafka.group(1), zookeeper.group(1)


class UnsupportedVersionError(DevStackError):
    """A chosen Kafka or ZooKeeper release (or mode) the dev stack cannot run; the message is one line."""


class KafkaMode(str, Enum):
    """How the brokers keep their metadata: a KRaft quorum (combined broker+controller nodes) or ZooKeeper."""

    KRAFT = "kraft"
    ZOOKEEPER = "zookeeper"


def parse_release(text: str, variable: str) -> tuple[int, int, int]:
    """``"3.9.1"`` -> ``(3, 9, 1)``; anything but three dot-separated numbers raises
    :class:`UnsupportedVersionError` naming ``variable``."""
    match = _RELEASE.match(text)
    if match is None:
        raise UnsupportedVersionError(f"{variable}={text!r} is not a release number such as 3.9.1")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


@dataclass(frozen=True)
class ServerVersions:
    """The Kafka release, its metadata mode and the ZooKeeper release one dev stack runs.

    Invariant (checked by `selected_versions`): Kafka is 3.9.x or 4.x, ZooKeeper 3.8.x or 3.9.x, and
    ZooKeeper mode only with Kafka 3.x.
    """

    kafka: str
    zookeeper: str
    kafka_mode: KafkaMode = KafkaMode.KRAFT

    @property
    def kafka_release(self) -> tuple[int, int, int]:
        return parse_release(self.kafka, KAFKA_VERSION_ENV)

    @property
    def zookeeper_mode(self) -> bool:
        """True when the brokers keep their metadata in ZooKeeper (they need `zookeeper.connect`)."""
        return self.kafka_mode is KafkaMode.ZOOKEEPER

    @property
    def share_groups(self) -> bool:
        """Kafka 4.0 brought share groups, whose internal topic has its own replication settings."""
        return self.kafka_release >= (4, 0, 0)

    def describe(self) -> str:
        """One line for logs and the pytest header, e.g. ``Kafka 3.9.1 (ZooKeeper-mode brokers), ZooKeeper 3.8.4``."""
        mode = "ZooKeeper-mode brokers" if self.zookeeper_mode else "KRaft"
        return f"Kafka {self.kafka} ({mode}), ZooKeeper {self.zookeeper}"


def _check_kafka(version: str) -> None:
    release = parse_release(version, KAFKA_VERSION_ENV)
    if release[:2] != (3, 9) and release[0] != 4:
        raise UnsupportedVersionError(
            f"{KAFKA_VERSION_ENV}={version} is not supported: the dev stack runs Kafka 3.9.x and 4.x")


def _check_zookeeper(version: str) -> None:
    release = parse_release(version, ZOOKEEPER_VERSION_ENV)
    if release[:2] not in ((3, 8), (3, 9)):
        raise UnsupportedVersionError(
            f"{ZOOKEEPER_VERSION_ENV}={version} is not supported: the dev stack runs ZooKeeper 3.8.x and 3.9.x")


def _mode(text: str, kafka: str) -> KafkaMode:
    try:
        mode = KafkaMode(text.lower())
    except ValueError:
        raise UnsupportedVersionError(f"{KAFKA_MODE_ENV}={text!r}: expected 'kraft' or 'zookeeper'") from None
    if mode is KafkaMode.ZOOKEEPER and parse_release(kafka, KAFKA_VERSION_ENV)[0] >= 4:
        raise UnsupportedVersionError(
            f"{KAFKA_MODE_ENV}=zookeeper needs Kafka 3.x (Kafka {kafka} has no ZooKeeper mode): "
            f"set {KAFKA_VERSION_ENV}=3.9.1")
    return mode


def selected_versions(environ: Mapping[str, str] | None = None, pom_path: Path | None = None) -> ServerVersions:
    """The versions chosen by ``environ`` (default ``os.environ``) over the POM's pins.

    Raises :class:`UnsupportedVersionError` (one line) for a release or mode the dev stack cannot run.
    """
    env = os.environ if environ is None else environ
    pinned_kafka, pinned_zookeeper = pinned_versions(pom_path or POM_PATH)
    kafka = env.get(KAFKA_VERSION_ENV, "").strip() or pinned_kafka
    zookeeper = env.get(ZOOKEEPER_VERSION_ENV, "").strip() or pinned_zookeeper
    _check_kafka(kafka)
    _check_zookeeper(zookeeper)
    mode = _mode(env.get(KAFKA_MODE_ENV, "").strip() or KafkaMode.KRAFT.value, kafka)
    return ServerVersions(kafka=kafka, zookeeper=zookeeper, kafka_mode=mode)
