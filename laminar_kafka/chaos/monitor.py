"""Long-lived helpers of the chaos campaign: the dev stack reused across runs (:class:`StackPool`)
and the per-run :class:`Monitor` that supervises the nodes and measures each fault's recovery (the
definition is in :mod:`laminar_kafka.chaos.report`)."""
from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.chaos.lake import LakeServices
from laminar_kafka.chaos.nodes import NodeSet
from laminar_kafka.chaos.report import FaultResult
from laminar_kafka.chaos.servers import ClusterProbe
from laminar_kafka.devstack.stack import DevStack

logger = logging.getLogger(__name__)

__all__ = ["Monitor", "StackPool"]


# --------------------------------------------------------------------------------------------------
# Stacks


class StackPool:
    """One dev stack at a time, reused while runs ask for the same shape (brokers, ZooKeeper servers);
    and the lake services of the ``s3-rest`` lake (:class:`~laminar_kafka.chaos.lake.LakeServices`),
    started at the first run that asks, kept for every later run."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._stack: DevStack | None = None
        self._shape: tuple[int, int] | None = None
        self._count = 0
        self._lake: LakeServices | None = None
        self._lakes = 0

    def lake_services(self, say: Callable[[str], None]) -> LakeServices:
        """The object store and the catalog, repaired (faults healed, servers up) or started anew."""
        if self._lake is not None and self._lake.repair(say):
            return self._lake
        if self._lake is not None:
            self._lake.stop()
        self._lake = None
        self._lakes += 1
        while (self._base / f"lake-{self._lakes}").exists():  # an earlier campaign's, in the same workdir
            self._lakes += 1
        self._lake = LakeServices.start(self._base / f"lake-{self._lakes}", say)
        return self._lake

    def get(self, brokers: int, zk_servers: int, say: Callable[[str], None]) -> DevStack:
        if self._stack is not None and self._shape == (brokers, zk_servers) and self._repair(say):
            return self._stack
        self._close_stack()
        say(f"starting Kafka ({brokers} broker(s)) and ZooKeeper ({zk_servers} server(s)) ...")
        stack = DevStack.launch(kafka_brokers=brokers, zookeeper_servers=zk_servers, base_dir=self.next_dir())
        say(f"stack healthy in {stack.startup_seconds:.1f}s: kafka {stack.bootstrap}, zookeeper {stack.zk_hosts}")
        self._stack, self._shape = stack, (brokers, zk_servers)
        return stack

    def next_dir(self) -> Path:
        """A stack directory no stack used yet: a campaign directory given again (``--workdir``) may
        hold an earlier campaign's server data, which a new Kafka refuses ("Invalid cluster.id")."""
        self._count += 1
        while (self._base / f"stack-{self._count}").exists():
            self._count += 1
        return self._base / f"stack-{self._count}"

    def _repair(self, say: Callable[[str], None]) -> bool:
        """Restart servers a failed run left stopped; False when the stack cannot be used again."""
        stack = self._stack
        assert stack is not None
        try:
            for server in stack.servers():
                if not server.running():
                    say(f"restarting {server.name} left down by the previous run")
                    server.start()
            for server in stack.servers():
                server.wait_healthy(120.0)
            return True
        except Exception as exc:  # noqa: BLE001 - any failure to revive it means a new stack
            say(f"the previous stack is unusable ({exc}); starting a new one")
            return False

    def _close_stack(self, clean: bool = False) -> None:
        if self._stack is not None:
            with contextlib.suppress(Exception):
                self._stack.stop(clean=clean)
        self._stack = self._shape = None

    def close(self, clean: bool = False) -> None:
        """Stop the current stack and the lake services; ``clean``: also remove every stack's
        directory (server logs and data of earlier shapes are kept until then, for a failed run's
        post-mortem)."""
        self._close_stack(clean)
        if self._lake is not None:
            self._lake.stop(clean)
            self._lake = None
        if clean:
            shutil.rmtree(self._base, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# Monitor: supervision and recovery measurement


@dataclass
class _Watch:
    result: FaultResult
    targets: dict[str, int]
    at: float


class Monitor:
    """Every ``interval`` seconds: supervise the nodes, read the durable cursors, resolve the recovery
    of every pending fault. A background thread; :meth:`stop` joins it."""

    def __init__(self, probe: ClusterProbe, nodes: NodeSet, note: Callable[[str], None], interval: float = 0.5) -> None:
        self._probe = probe
        self._nodes = nodes
        self._note = note
        self._interval = interval
        self._lock = threading.Lock()
        self._pending: list[_Watch] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-monitor", daemon=True)
        self.durable: dict[str, int] = {}

    def start(self) -> Monitor:
        self._thread.start()
        return self

    def watch(self, result: FaultResult, targets: dict[str, int], at: float) -> None:
        with self._lock:
            self._pending.append(_Watch(result, targets, at))

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                for line in self._nodes.supervise():
                    self._note(line)
                durable = self._probe.durable()
            except Exception as exc:  # noqa: BLE001 - keep monitoring
                logger.debug("monitor pass failed: %r", exc)
                continue
            if durable is None:
                continue
            now = time.monotonic()
            with self._lock:
                self.durable = durable
                for watch in list(self._pending):
                    if all(durable.get(key, -1) >= high for key, high in watch.targets.items()):
                        watch.result.recovery_s = round(now - watch.at, 2)
                        self._pending.remove(watch)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
