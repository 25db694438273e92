"""The parts of a chaos run that look at or poke the servers from outside the nodes.

- :class:`ClusterProbe`: reads the pipeline from ZooKeeper (register, latest manifest, election,
  members) and high watermarks from Kafka, from the host, never joining the pipeline.
- :func:`expire_session`: ends another process's ZooKeeper session on the server.
- :class:`OutputMount`: the output directory as a tmpfs of its own, which output faults remount
  read-only or fill up.

The producer is :mod:`laminar_kafka.chaos.producer`, the node processes :mod:`laminar_kafka.chaos.nodes`.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from laminar_kafka.coordinator.codec import PartitionKey, format_partition_key
from laminar_kafka.coordinator.engine.model import ControlState
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.devstack.errors import DevStackError
from laminar_kafka.kafka_source.clients import client_config, make_consumer
from laminar_kafka.kafka_source.read.client_watch import ClientKeeper, close_in_background
from laminar_kafka.kafka_source.read.positions import answered_high_watermarks

logger = logging.getLogger(__name__)

__all__ = ["ChaosError", "ClusterProbe", "OutputMount", "expire_session", "zk_session_password"]


class ChaosError(DevStackError):
    """A chaos run could not set up or apply a fault (not an exactly-once verdict)."""


# --------------------------------------------------------------------------------------------------
# Probe


class ClusterProbe:
    """Read-only view of one pipeline: ZooKeeper (register, manifest, election, members) and Kafka
    (high watermarks). Thread-safe. Calls raise :class:`ChaosError`-free: they return None / {} when
    a server does not answer (the caller polls again)."""

    def __init__(self, bootstrap: str, zk_hosts: str, pipeline: str, source_identity: str = "kafka") -> None:
        self._pipeline = pipeline
        self._base = f"/laminar/{pipeline}"
        self._source = source_identity
        self._hosts = zk_hosts
        self._zk = self._connect()
        #: replaced when its requests went unanswered for a while (a broker-freeze can leave it knowing
        #: no broker: :mod:`laminar_kafka.kafka_source.read.client_watch`)
        self._consumer = ClientKeeper(
            lambda: make_consumer(client_config(bootstrap), "laminar-chaos-probe", {"log_level": 0}), close_in_background)
        self._lock = threading.Lock()
        self._manifest_key: tuple[int, int] = (-1, -1)
        self._cursors: dict[PartitionKey, int] = {}

    @property
    def base(self) -> str:
        """The pipeline's ZooKeeper subtree (``/laminar/<pipeline>``)."""
        return self._base

    def _connect(self) -> Any:
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        quiet = logging.getLogger(f"{__name__}.kazoo")
        quiet.setLevel(logging.CRITICAL)
        client = KazooClient(hosts=self._hosts, timeout=10.0, logger=quiet,
                             connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1.0))
        client.start(timeout=30)
        return client

    def reconnect(self) -> None:
        """A new ZooKeeper session, for a server whose data was replaced or restored: it refuses a
        client that saw a newer transaction than it has (kazoo would retry forever)."""
        old, self._zk = self._zk, self._connect()
        with self._lock:
            self._manifest_key, self._cursors = (-1, -1), {}
        with contextlib.suppress(Exception):
            old.stop()
            old.close()

    def _store(self) -> Any:
        """The coordinator's store over the current session, for its observer's reads (read only)."""
        from laminar_kafka.coordinator.config import CoordinatorConfig
        from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
        from laminar_kafka.coordinator.zk.store import ZooKeeperStore

        return ZooKeeperStore(self._zk, CoordinatorConfig(pipeline=self._pipeline), CoordinatorMetrics())

    def control(self) -> ControlState | None:
        try:
            return self._store().read_register()
        except Exception:  # noqa: BLE001 - malformed, ZooKeeper unreachable: poll again
            return None

    def watch_register(self, callback: Callable[[ControlState], bool]) -> None:
        """Call ``callback`` (on kazoo's thread, at once) with the register now and on every change,
        until it returns False."""
        def on_data(data: bytes | None, _stat: object) -> bool:
            if not data:
                return True
            try:
                return callback(ControlState.from_json(data))
            except Exception:  # a failing callback ends the watch; the waiter times out
                logger.exception("register watch failed")
                return False
        self._zk.DataWatch(f"{self._base}/assignment", on_data)

    def durable(self) -> dict[PartitionKey, int] | None:
        """The latest committed manifest's cursors (``topic:partition`` -> next offset to read)."""
        from laminar_kafka.coordinator.engine.model import epoch_name

        control = self.control()
        if control is None:
            return None
        path = f"{self._base}/checkpoints/{epoch_name(control.last_epoch)}"
        try:  # the manifest's creation zxid tells a manifest rewritten under the same epoch apart
            stat = self._zk.exists(path) if control.last_epoch else None
        except Exception:  # noqa: BLE001 - ZooKeeper away: poll again
            return None
        key = (control.last_epoch, stat.czxid if stat is not None else 0)
        with self._lock:
            if key == self._manifest_key:
                return dict(self._cursors)
        manifest = None
        if control.last_epoch:
            try:  # the coordinator's reader: a chunked manifest reassembled, a delta over its base
                stored = self._store().read_stored_manifest(control.last_epoch)
            except Exception:  # noqa: BLE001 - malformed, ZooKeeper away: poll again
                return None
            if stored is None:  # garbage-collected meanwhile: poll again
                return None
            manifest = stored.manifest
        cursors = dict(manifest.cursors.get(self._source, {})) if manifest is not None else {}
        with self._lock:
            self._manifest_key, self._cursors = key, {k: int(v) for k, v in cursors.items()}
            return dict(self._cursors)

    def acked_by(self, epoch: int) -> list[int] | None:
        """The ids of the nodes that acked committed ``epoch`` (its manifest's ``acked_by``); None
        when the manifest cannot be read now (poll again)."""
        try:
            stored = self._store().read_stored_manifest(epoch)
        except Exception:  # noqa: BLE001 - malformed, ZooKeeper away: poll again
            return None
        return sorted({node for node, _boot in stored.manifest.acked_by}) if stored is not None else None

    def leader(self) -> int | None:
        try:
            return self._store().read_leader()
        except Exception:  # noqa: BLE001 - ZooKeeper unreachable: no leader seen, poll again
            return None

    def members(self) -> dict[int, int]:
        """node id -> the session id that owns its member node."""
        try:
            result = {}
            for name in self._zk.get_children(f"{self._base}/members"):
                stat = self._zk.exists(f"{self._base}/members/{name}")
                if stat is not None and name.isdigit():
                    result[int(name)] = stat.ephemeralOwner
            return result
        except Exception:  # noqa: BLE001 - not created yet, ZooKeeper unreachable: poll again
            return {}

    def high_watermarks(self, partitions: Sequence[TopicPartitionId], timeout: float = 10.0) -> dict[PartitionKey, int]:
        """High watermarks now, by cursor key; a partition whose leader does not answer in time is
        left out (:func:`~laminar_kafka.kafka_source.read.positions.answered_high_watermarks`)."""
        with self._lock:
            answered = answered_high_watermarks(self._consumer.client, partitions, timeout)
            if len(answered) < len(set(partitions)):
                self._consumer.failed(TimeoutError(f"{len(set(partitions)) - len(answered)} partition(s) unanswered"))
            else:
                self._consumer.succeeded()
        return {format_partition_key(topic, partition): high for (topic, partition), high in answered.items()}

    def broker_leaders(self, topics: Sequence[str]) -> dict[int, int]:
        """broker id -> how many partitions of ``topics`` it leads."""
        counts: dict[int, int] = {}
        with self._lock:
            metadata = self._consumer.client.list_topics(timeout=10)
        for topic in topics:
            info = metadata.topics.get(topic)
            for p in (info.partitions.values() if info is not None else ()):
                if p.leader >= 0:
                    counts[p.leader] = counts.get(p.leader, 0) + 1
        return counts

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._zk.stop()
            self._zk.close()
        with contextlib.suppress(Exception):
            self._consumer.client.close()


# --------------------------------------------------------------------------------------------------
# ZooKeeper session expiry from outside


def zk_session_password(session_id: int) -> bytes:
    """The password a ZooKeeper server gives session ``session_id``: ZooKeeperServer.generatePasswd,
    i.e. 16 bytes of ``java.util.Random(session_id ^ 0xB3415C00).nextBytes``. This is what lets a
    test expire *another process's* session (a twin client with the same id and password closes it)."""
    mask = (1 << 48) - 1
    seed = ((session_id ^ 0xB3415C00) ^ 0x5DEECE66D) & mask
    out = bytearray()
    while len(out) < 16:
        seed = (seed * 0x5DEECE66D + 0xB) & mask
        value = seed >> 16  # next(32)
        for _ in range(min(4, 16 - len(out))):
            out.append(value & 0xFF)
            value >>= 8
    return bytes(out)


def expire_session(zk_hosts: str, session_id: int, timeout: float = 10.0) -> None:
    """End session ``session_id`` on the server: a twin client attaches to it (same id and password)
    and closes it; the owner learns that its session expired. Raises :class:`ChaosError` when the
    twin cannot attach."""
    from kazoo.client import KazooClient

    quiet = logging.getLogger(f"{__name__}.twin")
    quiet.setLevel(logging.CRITICAL)
    twin = KazooClient(hosts=zk_hosts, client_id=(session_id, zk_session_password(session_id)),
                       timeout=timeout, logger=quiet)
    try:
        twin.start(timeout=timeout)
        if twin.client_id is None or twin.client_id[0] != session_id:
            raise ChaosError(f"could not attach to session 0x{session_id:x} (got a different session)")
    except ChaosError:
        raise
    except Exception as exc:  # any failure to attach (refused, timed out) is the fault's failure
        raise ChaosError(f"could not attach to session 0x{session_id:x}: {exc!r}") from exc
    finally:
        with contextlib.suppress(Exception):
            twin.stop()
            twin.close()


# --------------------------------------------------------------------------------------------------
# Output mount


class OutputMount:
    """The output directory as a tmpfs of its own (``size_mb``), so faults can make it read-only
    (``mount -o remount,ro``) or full (a ballast file that takes every free byte). Needs root and
    mount permission; :meth:`mount` raises :class:`ChaosError` with one line when it is refused."""

    BALLAST = "_chaos_ballast"

    def __init__(self, path: Path, size_mb: int = 64) -> None:
        self.path = path
        self.size_mb = size_mb
        self.mounted = False

    def _mount(self, *args: str) -> None:
        result = subprocess.run(["mount", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise ChaosError(f"mount {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}")

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._mount("-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(self.path))
        except ChaosError as exc:
            raise ChaosError(
                f"output faults need to mount a tmpfs and remount it (root, mount permission): {exc}") from exc
        self.mounted = True

    def make_readonly(self) -> None:
        self._mount("-o", "remount,ro", str(self.path))

    def make_writable(self) -> None:
        self._mount("-o", "remount,rw", str(self.path))

    def fill(self) -> int:
        """Write the ballast until the file system is full; returns the bytes written."""
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(self.path / self.BALLAST, "wb", buffering=0) as handle:
            for size in (1 << 20, 4096):
                piece = chunk[:size]
                while True:
                    try:
                        written += handle.write(piece)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / self.BALLAST).unlink()

    def unmount(self, save_to: Path | None = None) -> None:
        """Undo the faults, optionally copy the contents to ``save_to``, unmount."""
        if not self.mounted:
            return
        with contextlib.suppress(ChaosError):
            self.make_writable()
        self.free()
        if save_to is not None:
            with contextlib.suppress(OSError):
                shutil.copytree(self.path, save_to, dirs_exist_ok=True)
        result = subprocess.run(["umount", str(self.path)], capture_output=True, text=True)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, text=True)
        self.mounted = False
