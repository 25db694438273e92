"""The chaos campaign's node processes: ``laminar-kafka run`` by node id, each optionally inside its
own network namespace (:mod:`laminar_kafka.devstack.netfaults.faults`); a supervisor restarts a node that exits without
being told to (as systemd or Kubernetes would) and records every such exit."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.devstack.processes import NodeProcess, node_command
from laminar_kafka.devstack.stack import DevStack

__all__ = ["ExpectedExit", "NodeSet", "NodeSlot", "network_factory", "node_argv"]


@dataclass
class NodeSlot:
    """A node id of the run: its process (restarts reuse the slot, the log and the namespace).

    ``state``: ``running`` | ``paused`` | ``leaving`` (SIGTERMed) | ``left`` | ``killed`` | ``failed``
    (restarted too often) | ``held`` (stopped by a fault that starts it again) | ``stopped``.
    ``exits``: unexpected exits (the supervisor's record): (seconds since the node set started, code,
    last log line, ``running`` or ``leaving``: a planned leave that did not exit 0, and the fault
    kind that explains the exit or '').
    """

    node_id: int
    process: NodeProcess
    network: Any | None = None
    state: str = "running"
    starts: int = 1
    exits: list[tuple[float, int | None, str, str, str]] = field(default_factory=list)
    restart_at: float | None = None


@dataclass(frozen=True)
class ExpectedExit:
    """Exits a fault causes by design (:meth:`NodeSet.expect_exits`): a running node exiting with
    ``code`` and a last log line containing ``marker`` before ``until`` (monotonic) is explained by
    ``kind``; the supervisor restarts it as usual."""

    kind: str
    code: int
    marker: str
    until: float


class NodeSet:
    """The run's node processes. All methods are thread-safe (the monitor thread supervises)."""

    #: a node that exits by itself more often than this in one run is not restarted again
    MAX_RESTARTS = 25

    def __init__(self, argv: Callable[[int], list[str]], log_dir: Path,
                 network_factory: Callable[[int], Any] | None = None, *,
                 node_dir: Callable[[int], Path | None] | None = None, env: Mapping[str, str] | None = None) -> None:
        """``argv``: a node's command by id; ``node_dir``: prepares and returns a node's own working
        directory (None, or no callable: the nodes share ours); ``env``: added to every node's
        environment."""
        self._argv = argv
        self._log_dir = log_dir
        self._network_factory = network_factory
        self._node_dir = node_dir
        self._env = dict(env or {})
        self._lock = threading.RLock()
        self.slots: dict[int, NodeSlot] = {}
        self._started = time.monotonic()
        self._next_id = 1
        self._expected: list[ExpectedExit] = []

    def new_id(self) -> int:
        with self._lock:
            node_id = self._next_id
            self._next_id += 1
            return node_id

    def _spawn(self, slot: NodeSlot | None, node_id: int) -> NodeSlot:
        network = slot.network if slot is not None else None
        if network is None and self._network_factory is not None:
            network = self._network_factory(node_id)
        args = self._argv(node_id)
        if network is not None:
            args = network.wrap(args)
        log = self._log_dir / f"node-{node_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as handle:
            handle.write(f"=== chaos: node {node_id} start #{(slot.starts + 1) if slot else 1} "
                         f"at +{time.monotonic() - self._started:.1f}s ===\n")
        cwd = self._node_dir(node_id) if self._node_dir is not None else None
        process = NodeProcess(node_id, args, log, cwd=cwd, env=self._env)
        process.start()
        if slot is None:
            slot = NodeSlot(node_id, process, network)
        else:
            slot.process, slot.starts, slot.state, slot.restart_at = process, slot.starts + 1, "running", None
        return slot

    def start(self, node_id: int | None = None) -> int:
        """Start a node (a new id unless ``node_id`` names a known, not running slot)."""
        with self._lock:
            if node_id is None:
                node_id = self.new_id()
            self._next_id = max(self._next_id, node_id + 1)
            slot = self.slots.get(node_id)
            if slot is not None and slot.process.alive():
                raise ChaosError(f"node {node_id} is already running")
            self.slots[node_id] = self._spawn(slot, node_id)
            return node_id

    def running(self) -> list[int]:
        """Ids of nodes that run and were not told to leave or pause."""
        with self._lock:
            return sorted(n for n, s in self.slots.items() if s.state == "running" and s.process.alive())

    def pid(self, node_id: int) -> int:
        with self._lock:
            return self.slots[node_id].process.pid

    def network(self, node_id: int) -> Any:
        with self._lock:
            network = self.slots[node_id].network
        if network is None:
            raise ChaosError(f"node {node_id} has no network namespace")
        return network

    def kill(self, node_id: int) -> None:
        with self._lock:
            slot = self.slots[node_id]
            slot.state = "killed"
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.process.pid, signal.SIGCONT)  # a stopped process dies only once resumed
            slot.process.kill()

    def terminate(self, node_id: int) -> None:
        """SIGTERM: a planned leave; the exit code is checked by :meth:`supervise`."""
        with self._lock:
            slot = self.slots[node_id]
            slot.state = "leaving"
            slot.process.terminate()

    def pause(self, node_id: int) -> None:
        with self._lock:
            slot = self.slots[node_id]
            slot.state = "paused"
            os.kill(slot.process.pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        with self._lock:
            slot = self.slots[node_id]
            with contextlib.suppress(ProcessLookupError):
                os.kill(slot.process.pid, signal.SIGCONT)
            if slot.state == "paused":
                slot.state = "running"

    def wait_exit(self, node_id: int, timeout: float) -> int | None:
        """The exit code once the node's process ended, or None after ``timeout``."""
        with self._lock:
            process = self.slots[node_id].process
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def supervise(self) -> list[str]:
        """Notice exits: a leaver's exit is checked (0 expected), a running node's unexpected exit is
        recorded and the node restarted after a back-off (1, 2, 4, 8, then 10 s; at most
        :attr:`MAX_RESTARTS` times, then its state is ``failed``). Returns one line per notable exit."""
        notes: list[str] = []
        now = time.monotonic()
        with self._lock:
            for slot in self.slots.values():
                code = slot.process.process.poll() if slot.process.process is not None else None
                if slot.state == "leaving" and code is not None:
                    slot.state = "left"
                    if code != 0:  # -15: SIGTERMed before the node installed its handler (still starting)
                        slot.exits.append((now - self._started, code, _last_line(slot.process), "leaving", ""))
                        notes.append(f"node {slot.node_id}: planned leave exited with code {code}")
                elif slot.state == "running" and code is not None and slot.restart_at is None:
                    line = _last_line(slot.process)
                    explained = self._explained(now, code, line)
                    slot.exits.append((now - self._started, code, line, "running", explained))
                    how = f"as {explained} makes it" if explained else "unexpectedly"
                    notes.append(f"node {slot.node_id} exited {how} with code {code}: {line}")
                    if len(slot.exits) <= self.MAX_RESTARTS:  # back off: 1, 2, 4, 8, 10, 10... s
                        slot.restart_at = now + min(10.0, 2.0 ** (len(slot.exits) - 1))
                    else:
                        slot.state = "failed"
                        notes.append(f"node {slot.node_id} is not restarted again")
                elif slot.state == "running" and slot.restart_at is not None and now >= slot.restart_at:
                    self.slots[slot.node_id] = self._spawn(slot, slot.node_id)
        return notes

    def expect_exits(self, kind: str, code: int, marker: str, within_s: float) -> None:
        """Exits of running nodes with ``code`` and ``marker`` in their last log line during the next
        ``within_s`` seconds are caused by fault ``kind`` by design (see :class:`ExpectedExit`)."""
        with self._lock:
            self._expected.append(ExpectedExit(kind, code, marker, time.monotonic() + within_s))

    def _explained(self, now: float, code: int, line: str) -> str:
        for expected in reversed(self._expected):  # the latest fault first
            if now <= expected.until and code == expected.code and expected.marker in line:
                return expected.kind
        return ""

    def stop_running(self, timeout: float = 60.0) -> dict[int, int | None]:
        """SIGTERM every running (or paused) node, and cancel the restart of one that waits for it;
        wait for their exits (SIGKILL after ``timeout``); leave them ``held`` (the supervisor does not
        restart them: :meth:`start` does). Returns node id -> exit code (None: not running then)."""
        with self._lock:
            slots = [s for s in self.slots.values() if s.state in ("running", "paused")]
            waiting = [s for s in slots if s.process.alive()]
            for slot in slots:
                slot.state, slot.restart_at = ("leaving" if slot in waiting else "held"), None
            for slot in waiting:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGCONT)
                slot.process.terminate()
        codes: dict[int, int | None] = {s.node_id: None for s in slots}
        deadline = time.monotonic() + timeout
        for slot in waiting:
            try:
                codes[slot.node_id] = slot.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                slot.process.kill()
                codes[slot.node_id] = slot.process.wait(10)
        with self._lock:
            for slot in slots:
                slot.state = "held"
        return codes

    def crash_looping(self, exits: int = 3) -> str | None:
        """A line naming a node that exited by itself at least ``exits`` times, or None."""
        with self._lock:
            for slot in self.slots.values():
                if len(slot.exits) >= exits:
                    return f"node {slot.node_id} exited {len(slot.exits)} times; last: {slot.exits[-1][2]}"
        return None

    def unexpected_exits(self) -> list[dict[str, object]]:
        with self._lock:
            return [{"node": s.node_id, "at_s": round(at, 1), "code": code, "last_line": line, "while": state,
                     "explained": explained}
                    for s in self.slots.values() for at, code, line, state, explained in s.exits]

    def stop_all(self) -> None:
        """SIGKILL every node (the audit is done; a graceful leave would only cost time), close
        their namespaces."""
        with self._lock:
            slots = list(self.slots.values())
            for slot in slots:
                slot.state = "stopped"
        for slot in slots:
            if slot.process.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGCONT)
                with contextlib.suppress(Exception):
                    slot.process.kill()
        for slot in slots:
            if slot.network is not None:
                with contextlib.suppress(Exception):
                    slot.network.close()


def node_argv(stack: DevStack, topic_arg: str, pipeline: str, lake_flags: Callable[[int], list[str]],
              settings: list[str]) -> Callable[[int], list[str]]:
    """A node's argv by id: the stack's servers, ``topic_arg``, ``pipeline``, its lake's flags
    (``lake_flags(node_id)``) and the campaign's ``settings`` flags."""

    def argv(node_id: int) -> list[str]:
        return node_command([
            "--bootstrap", stack.bootstrap, "--zk", stack.zk_hosts,
            "--topic", topic_arg, "--pipeline", pipeline, "--node-id", str(node_id),
            *lake_flags(node_id), *settings,
        ])
    return argv


_namespace_counter = 0


def network_factory(seed: int, stack: DevStack, extra_ports: tuple[int, ...] = ()) -> Callable[[int], object]:
    """A maker of each node's network namespace (laminar_kafka.devstack.netfaults.faults), relaying the
    stack's servers and ``extra_ports``; ChaosError when network faults are unavailable here."""
    from laminar_kafka.devstack.netfaults import faults as netfaults

    available, reason = netfaults.network_faults_available()
    if not available:
        raise ChaosError(f"network faults are not available here: {reason}")
    netfaults.cleanup_stale()  # namespaces a killed campaign left behind
    endpoints = netfaults.Endpoints.from_stack(stack)
    if extra_ports:  # the object store's and the catalog's proxies, relayed too
        endpoints = endpoints.merged(netfaults.Endpoints(extra_ports=extra_ports))

    def make(node_id: int) -> object:
        global _namespace_counter
        _namespace_counter += 1
        index = _namespace_counter % 250 + 1  # unique among live networks (a run has a handful)
        network = netfaults.NodeNetwork(f"c{seed % 1000}n{node_id}", endpoints, index)
        network.start()
        return network
    return make


def _last_line(process: NodeProcess) -> str:
    lines = [line for line in process.log_text()[-4000:].splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
