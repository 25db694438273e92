"""What a chaos fault sees and returns: :class:`FaultContext`, :class:`Injection`, the
:class:`Fault` base class, and the resolution of node roles (a random node, the leader).

The kinds themselves are in :mod:`laminar_kafka.chaos.faults_nodes` (processes and sessions),
:mod:`laminar_kafka.chaos.faults_infra` (topics, servers, network, producer, output) and
:mod:`laminar_kafka.chaos.faults_state` (lost, replaced or old control state, a rolled-back lake, a
misconfigured node); the registry is :data:`laminar_kafka.chaos.faults.FAULTS`.
"""
from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from laminar_kafka.chaos.lake import LakeServices, RunLake
from laminar_kafka.chaos.nodes import NodeSet
from laminar_kafka.chaos.plan import FaultEvent
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.servers import ChaosError, ClusterProbe, OutputMount
from laminar_kafka.devstack.stack import DevStack

__all__ = ["Fault", "FaultContext", "Injection", "TopicBook", "kill_node", "resolve_node", "restart_heal"]


@dataclass
class TopicBook:
    """The run's topics (``<prefix>.t<k>``) and their partition counts."""

    prefix: str
    partitions: dict[str, int] = field(default_factory=dict)

    def name(self, index: int) -> str:
        return f"{self.prefix}.t{index}"

    def all_partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, n in self.partitions.items() for p in range(n)]


@dataclass
class FaultContext:
    """Everything a fault may touch in one run. ``wait_until`` polls a predicate (bounded) while the
    run keeps supervising; ``note`` adds a line to the run's event log."""

    stack: DevStack
    nodes: NodeSet
    probe: ClusterProbe
    producer: ChaosProducer
    topics: TopicBook
    output: OutputMount | None
    session_timeout_s: float
    checkpoint_interval_s: float
    source_identity: str
    rng: random.Random
    note: Callable[[str], None]
    wait_until: Callable[[Callable[[], bool], float, str], float]
    #: the run's pipeline name, output directory, directory (logs, copies) and table format
    pipeline: str = ""
    output_dir: Path | None = None
    run_dir: Path | None = None
    table_format: str = "parquet"
    #: the nodes' ``partition-by``
    partition_by: str = "day"
    #: a node's argv by node id (the flags every node of the run gets)
    node_argv: Callable[[int], list[str]] | None = None
    #: the run's lake (its output, catalog, and how nodes and the harness reach them)
    lake: RunLake | None = None
    #: the object store and the catalog of the s3-rest lake (None for the local lake)
    services: LakeServices | None = None

    def highs(self) -> dict[str, int]:
        """High watermarks of every partition of the run now (taken just before a fault hits: the
        recovery targets)."""
        return self.probe.high_watermarks(self.topics.all_partitions())

    @property
    def bootstrap(self) -> str:
        return str(self.stack.bootstrap)

    @property
    def zk_hosts(self) -> str:
        return str(self.stack.zk_hosts)

    @property
    def replication(self) -> int:
        assert self.stack.kafka is not None
        return len(self.stack.kafka.brokers)


@dataclass
class Injection:
    """What :meth:`Fault.inject` did; ``heal`` (if any) is called ``heal_after_s`` after ``at``.
    ``targets``: the high watermarks taken just before the fault hit (the recovery targets)."""

    at: float
    targets: dict[str, int]
    details: dict[str, object] = field(default_factory=dict)
    heal: Callable[[], None] | None = None
    heal_after_s: float = 0.0
    new_partitions: list[tuple[str, int]] = field(default_factory=list)
    #: take the recovery targets again just before the heal (a node cut from Kafka still makes what
    #: it had fetched before the cut durable: only records written during the cut show the stall)
    targets_at_heal: bool = False


class Fault(abc.ABC):
    """One fault kind. ``role``: what the fault acts on (for the report and the docs)."""

    kind = ""
    role = ""

    @abc.abstractmethod
    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        """Apply ``event``; the :class:`Injection` says how it heals and what it hit."""


# --------------------------------------------------------------------------------------------------
# Role resolution


def resolve_node(ctx: FaultContext, target: str) -> int:
    """``node:any`` -> a random running node; ``node:leader`` -> the elected leader (waits up to
    20 s for one that is a running node of this run)."""
    if target == "node:leader":
        found: list[int] = []

        def leader_known() -> bool:
            leader = ctx.probe.leader()
            if leader is not None and leader in ctx.nodes.running():
                found[:] = [leader]
                return True
            return False

        ctx.wait_until(leader_known, 20.0, "a running leader")
        return found[0]
    running = ctx.nodes.running()
    if not running:
        raise ChaosError("no running node to aim at")
    return ctx.rng.choice(running)


def restart_heal(ctx: FaultContext, node_id: int) -> Callable[[], None]:
    def heal() -> None:
        ctx.nodes.start(node_id)
        ctx.note(f"node {node_id} restarted")
    return heal


def kill_node(ctx: FaultContext, node_id: int, event: FaultEvent, details: dict[str, object]) -> Injection:
    targets = ctx.highs()
    ctx.nodes.kill(node_id)
    at = time.monotonic()
    details["victim"] = node_id
    control = ctx.probe.control()
    details["last_epoch"] = control.last_epoch if control else None
    ctx.note(f"SIGKILL node {node_id}")
    if event.flag("restart"):
        return Injection(at, targets, details, restart_heal(ctx, node_id), event.number("restart_after_s", 1.0))
    return Injection(at, targets, details)
