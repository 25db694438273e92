"""Helpers for coordinator tests against a real ZooKeeper: chroots, a simulated node runtime,
event waiting, server-side session expiry and a freezable TCP proxy."""
from __future__ import annotations

import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kazoo.client import KazooClient

from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    Coordinator,
    CoordinatorConfig,
    CoordinatorEvent,
    EpochAck,
    EpochOpened,
    RoundStarted,
)
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import owned_partitions
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from laminar_kafka.devstack import waiting
from laminar_kafka.devstack.waiting import EventLog

E = TypeVar("E")


def owned_keys(snapshot: AssignmentSnapshot, node_id: int) -> list[str]:
    """The test partitions (topic `t` of source identity `s`, 2 per vnode) that `node_id` owns:
    routed by the routing ABI, as the leader checks them."""
    partitions = [("t", p) for p in range(2 * snapshot.vnode_count)]
    return sorted(f"{t}:{p}" for t, p in owned_partitions("s", partitions, snapshot, node_id))


def make_chroot(hosts: str, name: str) -> str:
    """Create `/name` on the server and return the chrooted connection string."""
    root = KazooClient(hosts=hosts, timeout=5.0)
    root.start(timeout=15)
    try:
        root.ensure_path("/" + name)
    finally:
        root.stop()
        root.close()
    return f"{hosts}/{name}"


def config(hosts: str, **overrides: object) -> CoordinatorConfig:
    values: dict[str, object] = dict(
        pipeline="p", hosts=hosts, session_timeout=2.0, checkpoint_interval=0.2, round_deadline=10.0,
        vnode_count=16, manifests_to_keep=3,
    )
    values.update(overrides)
    return CoordinatorConfig(**values)  # type: ignore[arg-type]


def expire_session(hosts: str, coordinator: ZooKeeperCoordinator) -> None:
    """Expire `coordinator`'s session ON THE SERVER: attach a second client to the same session id
    and password, then close it. The server ends the session and deletes its ephemeral nodes."""
    session_id, password = coordinator.client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=5.0)
    twin.start(timeout=15)
    twin.stop()
    twin.close()


class SimulatedNode:
    """A stand-in for the cluster runtime: records events; acks epochs it owns vnodes in and
    reports drain receipts on its own worker thread (callbacks never block).

    Partitions: `t:0` .. `t:<2 * vnode_count - 1>` of source `s` (see `owned_keys`); the cursor after
    epoch E is 10 * E.
    """

    def __init__(self, coordinator: ZooKeeperCoordinator | Coordinator, auto: bool = True,
                 auto_ready: bool = True) -> None:
        self.coordinator = coordinator
        self.auto = auto
        self.auto_ready = auto_ready
        self.log: EventLog[CoordinatorEvent] = EventLog()
        self.events = self.log.events  # read-only view for assertions
        self.errors: list[Exception] = []
        self.acked: list[int] = []
        self._work: queue.Queue[CoordinatorEvent | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        coordinator.subscribe(self._on_event)

    def _on_event(self, event: CoordinatorEvent) -> None:
        self.log.append(event)
        self._work.put(event)

    def _run(self) -> None:
        while True:
            event = self._work.get()
            if event is None:
                return
            try:
                self._handle(event)
            finally:
                self._work.task_done()

    def drain(self) -> None:
        """Wait until every event received so far has been handled (acks in flight have returned)."""
        self._work.join()

    def _handle(self, event: CoordinatorEvent) -> None:
        if not self.auto:
            return
        try:
            if isinstance(event, EpochOpened):
                self.ack(event)
            elif isinstance(event, RoundStarted) and self.auto_ready:
                snapshot = self.coordinator.assignment()
                loses = any(
                    old == self.coordinator.node_id and new != old
                    for old, new in zip(snapshot.owners, event.target_owners, strict=True)
                )
                if loses:
                    self.coordinator.report_drain_ready(event.drain_id)
        except CoordinatorError as exc:
            self.errors.append(exc)

    def ack(self, event: EpochOpened) -> None:
        snapshot = self.coordinator.assignment()
        if snapshot.version != event.assignment_version:
            return
        if not snapshot.vnodes_of(self.coordinator.node_id):
            return
        cursors = {"s": {k: 10 * event.epoch for k in owned_keys(snapshot, self.coordinator.node_id)}}
        self.coordinator.ack_epoch(EpochAck(
            self.coordinator.node_id, self.coordinator.boot_id, event.epoch, event.assignment_version,
            cursors, (f"n{self.coordinator.node_id}-e{event.epoch}",),
        ))
        self.acked.append(event.epoch)

    def close(self) -> None:
        self._work.put(None)  # never task_done: drain() must not be called after close()

    def wait_for(self, kind: type[E], predicate: Callable[[E], bool] = lambda _e: True,
                 timeout: float = 15.0, after: int = 0) -> E:
        """The first event of `kind` (at index >= `after`) satisfying `predicate`."""
        return self.log.wait_for(kind, predicate, timeout, after)

    def latest_assignment(self) -> AssignmentChanged:
        return self.log.of(AssignmentChanged)[-1]


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, interval: float = 0.02) -> None:
    waiting.wait_until(predicate, timeout, "the condition", interval=interval)


def leader_of(coordinators: list[ZooKeeperCoordinator]) -> ZooKeeperCoordinator:
    leaders = [c for c in coordinators if c.is_leader()]
    if len(leaders) != 1:
        raise AssertionError(f"expected one leader, got {[c.node_id for c in leaders]}")
    return leaders[0]


class FreezableProxy:
    """A loopback TCP proxy to one ZooKeeper server; `freeze()` stops relaying bytes in both
    directions while keeping the sockets open, so the client's session really times out on the server."""

    def __init__(self, target: str) -> None:
        host, port = target.split(":")
        self._target = (host, int(port))
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._frozen = threading.Event()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._closed.is_set():
                if self._frozen.is_set():
                    time.sleep(0.02)
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.05)
                for sock in readable:
                    if self._frozen.is_set():
                        break
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()


@contextmanager
def coordinators(cfg: CoordinatorConfig, node_ids: list[int], auto: bool = True,
                 start: bool = True, auto_ready: bool = True) -> Iterator[tuple[list[ZooKeeperCoordinator], list[SimulatedNode]]]:
    coords = [ZooKeeperCoordinator(cfg, n, endpoint=f"127.0.0.1:{9000 + n}") for n in node_ids]
    nodes = [SimulatedNode(c, auto=auto, auto_ready=auto_ready) for c in coords]
    try:
        if start:
            for c in coords:
                c.start(timeout=20)
        yield coords, nodes
    finally:
        for n in nodes:
            n.close()
        for c in coords:
            c.stop()
