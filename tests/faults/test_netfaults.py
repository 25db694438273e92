"""laminar_kafka.devstack.netfaults.faults against real servers: a client process inside a node's network namespace
reaches Kafka and ZooKeeper through the relay, and loses exactly the server group that is cut.

Needs root and working network namespaces. Where they are missing these tests FAIL with the reason
(CI must prove the fault layer), unless LAMINAR_ALLOW_NO_NETNS=1 is set, which turns that into a skip.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from kazoo.client import KazooClient

from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.netfaults import faults as netfaults
from laminar_kafka.devstack.netfaults.faults import (
    Endpoints,
    NodeNetwork,
    cleanup_stale,
    network_faults_available,
    unused_index,
)
from laminar_kafka.devstack.processes import pid_alive
from laminar_kafka.devstack.waiting import wait_until
from tests.conftest import KafkaHandle, ZooKeeperHandle
from tests.support import create_topic, produce, read_all

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "lkt-"  # this module's own prefix: its cleanup never touches another run's networks
logger = logging.getLogger(__name__)


@pytest.fixture(scope="session", autouse=True)  # session: checked before the servers start
def _network_namespaces() -> None:
    ok, reason = network_faults_available()
    if ok:
        return
    if os.environ.get("LAMINAR_ALLOW_NO_NETNS") == "1":
        pytest.skip(f"network faults unavailable (LAMINAR_ALLOW_NO_NETNS=1): {reason}")
    pytest.fail(f"network faults unavailable: {reason} (set LAMINAR_ALLOW_NO_NETNS=1 to allow skipping)")


def _loopback_or_skip(kafka: KafkaHandle, zookeeper: ZooKeeperHandle) -> Endpoints:
    try:
        return Endpoints.from_hosts(kafka.bootstrap, zookeeper.hosts)
    except ValueError as exc:
        pytest.skip(f"the relay needs servers on 127.0.0.1: {exc}")


# ---- a client process inside the namespace ------------------------------------------------------

AGENT = r"""
import json, logging, os, sys, time
logging.disable(logging.CRITICAL)
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kazoo.client import KazooClient

bootstrap, zk_hosts = sys.argv[1], sys.argv[2]
states = []
zk = KazooClient(hosts=zk_hosts, timeout=6.0,
                 connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1, "max_delay": 0.5})
zk.add_listener(lambda state: states.append(str(state)))
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 0})
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "netfaults-agent",
                     "enable.auto.commit": False, "log_level": 0})


def handle(op, cmd):
    timeout = cmd.get("timeout", 10.0)
    if op == "pid":
        return {"pid": os.getpid()}
    if op == "zk_start":
        zk.start(timeout=timeout)
        return {}
    if op == "zk":
        zk.exists_async("/").get(timeout=timeout)
        return {}
    if op == "meta":
        return {"brokers": len(producer.list_topics(timeout=timeout).brokers)}
    if op == "produce":
        errors = []
        producer.produce(cmd["topic"], value=cmd["value"].encode(), partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
        if producer.flush(timeout) or errors:
            raise KafkaException(f"not delivered: {errors or 'timed out'}")
        return {}
    if op == "consume":
        consumer.assign([TopicPartition(cmd["topic"], 0, 0)])
        values, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline and not set(cmd["want"]) <= set(values):
            for message in consumer.consume(num_messages=100, timeout=0.2):
                if not message.error():
                    values.append(message.value().decode())
        if not set(cmd["want"]) <= set(values):
            raise TimeoutError(f"read {values}, not {cmd['want']}")
        return {"values": values}
    raise ValueError(op)


for line in sys.stdin:
    cmd = json.loads(line)
    started = time.monotonic()
    try:
        result = {"ok": True, **handle(cmd["op"], cmd)}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["elapsed"] = time.monotonic() - started
    result["states"] = list(states)
    print(json.dumps(result), flush=True)
"""


class Agent:
    """A Kafka + ZooKeeper client process started through `network.wrap()`, driven over stdin."""

    def __init__(self, network: NodeNetwork, bootstrap: str, zk_hosts: str, log: Path) -> None:
        self._log = log
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                network.wrap([sys.executable, "-c", AGENT, bootstrap, zk_hosts]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
            )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def call(self, op: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
        """Run one operation with its own `timeout`; the answer must come within timeout + 15 s."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "timeout": timeout, **args}) + "\n")
        self.process.stdin.flush()
        try:
            return json.loads(self._lines.get(timeout=timeout + 15))
        except queue.Empty:
            raise AssertionError(f"agent gave no answer to {op}; its log:\n{self._log.read_text()[-3000:]}") from None

    def until_ok(self, op: str, within: float, timeout: float = 2.0, **args: Any) -> dict[str, Any]:
        """Repeat `op` until it succeeds; fail after `within` seconds."""
        last: list[dict[str, Any]] = []

        def succeeded() -> bool:
            last.append(self.call(op, timeout=timeout, **args))
            return bool(last[-1]["ok"])

        try:
            wait_until(succeeded, within, f"{op} succeeding", interval=0.0)
        except WaitTimeout:
            raise AssertionError(f"{op} still failing after {within}s: {last[-1]}") from None
        return last[-1]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


class Node:
    def __init__(self, network: NodeNetwork, agent: Agent, topic: str) -> None:
        self.network = network
        self.agent = agent
        self.topic = topic


@pytest.fixture(scope="module")
def node(
    kafka: KafkaHandle, zookeeper: ZooKeeperHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    endpoints = _loopback_or_skip(kafka, zookeeper)
    topic = f"netfaults-{os.getpid()}-{int(time.time())}"
    create_topic(kafka.bootstrap, topic, partitions=1)
    network = NodeNetwork(f"nf{os.getpid()}", endpoints, unused_index(200), prefix=PREFIX)
    network.start()
    agent = Agent(network, kafka.bootstrap, zookeeper.hosts, tmp_path_factory.mktemp("agent") / "agent.log")
    try:
        assert agent.call("zk_start", timeout=20)["ok"]
        assert agent.until_ok("meta", within=30, timeout=5)["brokers"] >= 1
        yield Node(network, agent, topic)
    finally:
        agent.close()
        network.close()


@pytest.fixture
def healthy(node: Node) -> Iterator[Node]:
    """The node with no fault; afterwards faults are undone and both server groups answer again."""
    node.network.heal()
    node.network.set_latency(0)
    yield node
    node.network.heal()
    node.network.set_latency(0)
    node.agent.until_ok("zk", within=30)
    node.agent.until_ok("meta", within=30)


def host_zookeeper_ok(hosts: str) -> bool:
    """The test's own ZooKeeper client (host namespace, no relay) gets a session and an answer."""
    client = KazooClient(hosts=hosts, timeout=5.0)
    try:
        client.start(timeout=5)
        return client.exists("/") is not None
    finally:
        client.stop()
        client.close()


# ---- the tests ----------------------------------------------------------------------------------


def test_node_reaches_both_systems_at_their_advertised_addresses(healthy: Node, kafka: KafkaHandle) -> None:
    node = healthy
    produce(kafka.bootstrap, node.topic, [b"from-host"], partition=0)
    assert "from-host" in node.agent.call("consume", topic=node.topic, want=["from-host"], timeout=20)["values"]
    assert node.agent.call("produce", topic=node.topic, value="from-node", timeout=20)["ok"]
    assert b"from-node" in [v for _, v in read_all(kafka.bootstrap, node.topic, timeout=30)[0]]
    assert node.agent.call("zk", timeout=5)["ok"]
    stats = node.network.stats()
    for group in ("kafka", "zookeeper"):  # the traffic really went through this node's relay
        assert stats[group].accepted >= 1 and stats[group].bytes_to_server > 0 and stats[group].bytes_to_client > 0


def test_kafka_cut_times_out_kafka_only(healthy: Node, kafka: KafkaHandle, zookeeper: ZooKeeperHandle) -> None:
    node = healthy
    node.network.cut("kafka")
    result = node.agent.call("meta", timeout=3)
    assert not result["ok"] and result["elapsed"] >= 2.5, result  # a timeout, not an instant error
    zk = node.agent.call("zk", timeout=3)
    assert zk["ok"] and zk["elapsed"] < 1.0, zk
    produce(kafka.bootstrap, node.topic, [b"during-kafka-cut"], partition=0, timeout=20)  # the host is unaffected
    consumed = node.agent.call("consume", topic=node.topic, want=["during-kafka-cut"], timeout=3)
    assert not consumed["ok"], consumed
    node.network.heal("kafka")
    node.agent.until_ok("meta", within=30, timeout=3)
    assert node.agent.call("consume", topic=node.topic, want=["during-kafka-cut"], timeout=30)["ok"]


def test_zookeeper_cut_times_out_zookeeper_only(healthy: Node, zookeeper: ZooKeeperHandle) -> None:
    node = healthy
    node.network.cut("zookeeper")
    result = node.agent.call("zk", timeout=2)
    assert not result["ok"] and result["elapsed"] >= 1.5 and "Timeout" in result["error"], result
    meta = node.agent.call("meta", timeout=3)
    assert meta["ok"] and meta["elapsed"] < 1.0, meta
    assert host_zookeeper_ok(zookeeper.hosts)  # the test's own client is unaffected
    node.network.heal("zookeeper")
    node.agent.until_ok("zk", within=30)


def test_other_nodes_are_unaffected(healthy: Node, zookeeper: ZooKeeperHandle, kafka: KafkaHandle) -> None:
    node = healthy
    probe = (
        "import logging, sys; logging.disable(logging.CRITICAL)\n"
        "from kazoo.client import KazooClient\n"
        "c = KazooClient(hosts=sys.argv[1], timeout=5.0); c.start(timeout=10)\n"
        "assert c.exists('/') is not None; c.stop(); print('ok')\n"
    )
    endpoints = _loopback_or_skip(kafka, zookeeper)
    with NodeNetwork(f"nf{os.getpid()}b", endpoints, unused_index(200), prefix=PREFIX) as other:
        node.network.cut("zookeeper")
        result = subprocess.run(
            other.wrap([sys.executable, "-c", probe, zookeeper.hosts]),
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )
        assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
        assert not node.agent.call("zk", timeout=1)["ok"]  # while the cut node still cannot


def test_reset_mode_fails_fast(healthy: Node) -> None:
    node = healthy
    before = len(node.agent.call("zk", timeout=5)["states"])
    started = time.monotonic()
    node.network.cut("zookeeper", "reset")
    assert node.network.stats()["zookeeper"].open_connections == 0
    result = node.agent.call("zk", timeout=2)
    assert not result["ok"]
    assert "SUSPENDED" in result["states"][before:], result  # the client saw the connection drop ...
    assert time.monotonic() - started < 4.0  # ... long before a ping timeout (2/3 of 6 s) could tell it


def test_latency_slows_each_zookeeper_round_trip(healthy: Node) -> None:
    node = healthy
    node.network.set_latency(200, "zookeeper")
    for _ in range(3):
        result = node.agent.call("zk", timeout=5)
        assert result["ok"] and 0.4 <= result["elapsed"] < 3.0, result  # 200 ms each way
    meta = node.agent.call("meta", timeout=5)
    assert meta["ok"] and meta["elapsed"] < 0.35, meta  # Kafka is not slowed
    node.network.set_latency(0)
    fast = node.agent.call("zk", timeout=5)
    assert fast["ok"] and fast["elapsed"] < 0.2, fast


# ---- the namespace itself: process, reachability, throughput, cleanup -----------------------------


class _Sink:
    """A host loopback server that counts the bytes it receives on its first connection."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = 0
        self.seconds = 0.0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            started = None
            while data := conn.recv(1 << 20):
                started = started or time.monotonic()
                self.received += len(data)
            self.seconds = time.monotonic() - (started or time.monotonic())
            conn.sendall(b"k")
        self.done.set()

    def close(self) -> None:
        self.listener.close()


def test_relay_throughput_and_late_endpoints() -> None:
    sink = _Sink()
    megabytes = 200
    sender = (
        "import socket, sys\n"
        "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=30)\n"
        "block = b'x' * (1 << 20)\n"
        f"for _ in range({megabytes}): c.sendall(block)\n"
        "c.shutdown(socket.SHUT_WR); assert c.recv(1) == b'k'\n"
    )
    try:
        with NodeNetwork(f"nf{os.getpid()}t", Endpoints(), unused_index(200), prefix=PREFIX) as network:
            unreachable = subprocess.run(  # not relayed yet: nothing listens inside the namespace
                network.wrap([sys.executable, "-c", sender, str(sink.port)]), capture_output=True, text=True,
                timeout=30,
            )
            assert unreachable.returncode != 0 and "ConnectionRefusedError" in unreachable.stderr
            network.add_endpoints(Endpoints(extra_ports=(sink.port,)))
            subprocess.run(network.wrap([sys.executable, "-c", sender, str(sink.port)]), check=True, timeout=60)
            assert sink.done.wait(30)
    finally:
        sink.close()
    assert sink.received == megabytes << 20
    rate = sink.received / max(sink.seconds, 1e-6) / 1e6
    logger.info("relay throughput out of a namespace: %.0f MB/s", rate)
    assert rate >= 20, f"relay moved only {rate:.1f} MB/s"


def test_wrap_keeps_the_pid_and_the_host_reaches_node_services() -> None:
    server = (
        "import os, socket\n"
        "s = socket.create_server(('0.0.0.0', 0)); print(os.getpid(), s.getsockname()[1], flush=True)\n"
        "c, _ = s.accept(); c.sendall(b'metrics'); c.close()\n"
    )
    with NodeNetwork(f"nf{os.getpid()}w", Endpoints(), unused_index(200), prefix=PREFIX) as network:
        process = subprocess.Popen(network.wrap([sys.executable, "-c", server]), stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            pid, port = map(int, process.stdout.readline().split())
            assert pid == process.pid  # `ip netns exec` execs: signals reach the node itself
            with socket.create_connection((network.node_address, port), timeout=5) as conn:
                assert conn.recv(100) == b"metrics"
            with pytest.raises(OSError):  # the node's loopback is its own
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
        finally:
            process.kill()
            process.wait(10)


def _names() -> tuple[list[str], list[str]]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in namespaces.splitlines() if line.strip()], netfaults.parse_link_names(links)


def test_close_and_cleanup_leave_nothing() -> None:
    name = f"nf{os.getpid()}c"
    network = NodeNetwork(name, Endpoints(), unused_index(200), prefix=PREFIX)
    network.start()
    network.start()  # idempotent
    namespaces, links = _names()
    assert network.namespace in namespaces and network.host_interface in links
    network.close()
    network.close()  # idempotent
    namespaces, links = _names()
    assert network.namespace not in namespaces and network.host_interface not in links

    # A controlling process SIGKILLed with its network up (and a node running inside) leaves both
    # behind; cleanup_stale removes them, but not a network whose owner still runs (this process's).
    killed_name = f"nf{os.getpid()}k"
    index = unused_index(200)
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         "from laminar_kafka.devstack.netfaults.faults import Endpoints, NodeNetwork\n"
         "net = NodeNetwork(sys.argv[1], Endpoints(), int(sys.argv[2]), prefix=sys.argv[3]); net.start()\n"
         "node = subprocess.Popen(net.wrap(['sleep', '120']))\n"
         "print(node.pid, flush=True); time.sleep(120)\n",
         killed_name, str(index), PREFIX],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert owner.stdout is not None
    orphan = int(owner.stdout.readline())
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    with NodeNetwork(f"nf{os.getpid()}l", Endpoints(), unused_index(index + 1), prefix=PREFIX) as live:
        removed = cleanup_stale(PREFIX, kill_processes=True)
        namespaces, links = _names()
        assert f"{PREFIX}{killed_name}" in removed and f"{PREFIX}{killed_name}" not in namespaces
        assert netfaults.host_interface_name(killed_name, index, PREFIX) not in links
        assert live.namespace in namespaces and live.host_interface in links
    _wait_gone(orphan)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Until `pid` no longer runs (gone, or a zombie awaiting its parent)."""
    wait_until(lambda: not pid_alive(pid), timeout, f"process {pid} ending", interval=0.05)
