"""One chaos run's state (:class:`ChaosRun`) and its pipeline: the output mount, the first topic,
the producer, the nodes (each in its own network namespace when the plan has network faults), the
probe and the monitor that :func:`start_pipeline` starts, and :func:`release_run`, which stops
exactly what was started (:class:`Started`). The sequence of a run is in
:mod:`laminar_kafka.chaos.campaign`.
"""
from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from laminar_kafka.chaos.faults import FaultContext, TopicBook
from laminar_kafka.chaos.lake import LakeServices, local_lake
from laminar_kafka.chaos.monitor import Monitor
from laminar_kafka.chaos.nodes import NodeSet
from laminar_kafka.chaos.plan import SPECS, RunPlan
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.report import RunResult
from laminar_kafka.chaos.servers import ChaosError, ClusterProbe, OutputMount
from laminar_kafka.coordinator.codec import format_partition_key
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.processes import node_command
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

if TYPE_CHECKING:
    from laminar_kafka.chaos.campaign import CampaignConfig

logger = logging.getLogger(__name__)

__all__ = ["ChaosRun", "Started", "release_run", "start_pipeline"]


class ChaosRun:
    """The state of one seed's run (see the module docstring for the sequence)."""

    def __init__(self, plan: RunPlan, config: CampaignConfig, directory: Path, token: str,
                 say: Callable[[str], None], services: LakeServices | None = None) -> None:
        self.plan = plan
        self.config = config
        self.dir = directory
        self.say = say
        self.prefix = f"chaos-{token}-s{plan.seed}"
        self.topics = TopicBook(self.prefix)
        self.result = RunResult(seed=plan.seed, kinds=plan.kinds)
        self.started = time.monotonic()
        self.phase_start = 0.0
        #: where the nodes of a local lake land (a tmpfs of its own when the plan has output faults)
        self.output = directory / "output"
        self.services = services
        #: the run's lake: the local output, or the deployment shape's object store and catalog
        self.lake = (services.run_lake(directory, self.prefix) if services is not None
                     else local_lake(directory, self.output, config.table_format, self.prefix))
        self._events_log = directory / "events.log"

    def note(self, line: str) -> None:
        stamp = time.monotonic() - self.started
        with open(self._events_log, "a") as handle:
            handle.write(f"[{stamp:7.2f}s] {line}\n")
        logger.info("seed %d: %s", self.plan.seed, line)

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        """:func:`laminar_kafka.devstack.waiting.wait_until` polling every 0.1 s; a timeout raises ChaosError."""
        try:
            return wait_until(predicate, timeout, what, interval=0.1)
        except WaitTimeout as exc:
            raise ChaosError(str(exc)) from exc


def _node_flags(run: ChaosRun, stack: DevStack, topic_arg: str) -> Callable[[int], list[str]]:
    """A node's argv by id: the run's servers, topics and pipeline, its lake's flags
    (:meth:`RunLake.node_flags`), the campaign's timings."""
    from laminar_kafka.cluster.config import SETTING_NAMES

    config = run.config
    extra = ["--checkpoint-interval-ms", str(config.checkpoint_interval_ms),
             "--session-timeout-ms", str(config.session_timeout_ms),
             "--drain-timeout-ms", str(config.drain_timeout_ms)]
    if run.plan.pattern and "topology-interval-ms" in SETTING_NAMES:
        extra += ["--topology-interval-ms", "1000"]
    if config.partition_by != "day":
        extra += ["--partition-by", config.partition_by]

    def argv(node_id: int) -> list[str]:
        return node_command([
            "--bootstrap", stack.bootstrap, "--zk", stack.zk_hosts,
            "--topic", topic_arg, "--pipeline", run.prefix, "--node-id", str(node_id),
            *run.lake.node_flags(node_id), *extra,
        ])
    return argv


_namespace_counter = 0


def _network_factory(run: ChaosRun, stack: DevStack) -> Callable[[int], object]:
    """Each node in a network namespace of its own (laminar_kafka.devstack.netfaults.faults); ChaosError when unavailable."""
    from laminar_kafka.devstack.netfaults import faults as netfaults

    available, reason = netfaults.network_faults_available()
    if not available:
        raise ChaosError(f"network faults are not available here: {reason}")
    netfaults.cleanup_stale()  # namespaces a killed campaign left behind
    endpoints = netfaults.Endpoints.from_stack(stack)
    if run.services is not None:  # the object store's and the catalog's proxies, relayed too
        endpoints = endpoints.merged(netfaults.Endpoints(extra_ports=run.services.proxy_ports()))

    def make(node_id: int) -> object:
        global _namespace_counter
        _namespace_counter += 1
        index = _namespace_counter % 250 + 1  # unique among live networks (a run has a handful)
        network = netfaults.NodeNetwork(f"c{run.plan.seed % 1000}n{node_id}", endpoints, index)
        network.start()
        return network
    return make


def _wait_ready(run: ChaosRun, probe: ClusterProbe, nodes: NodeSet) -> float:
    """Until the base nodes own every partition of the first topic and a manifest holds all its cursors."""
    expected = {format_partition_key(t, p) for t, p in run.topics.all_partitions()}

    def ready() -> bool:
        looping = nodes.crash_looping()
        if looping:
            raise ChaosError(f"nodes do not start: {looping}")
        control = probe.control()
        durable = probe.durable() or {}
        running = set(nodes.running())
        return (control is not None and control.round is None
                and set(control.snapshot.owners) <= running and len(set(control.snapshot.owners)) == len(running)
                and expected <= set(durable))
    return run.wait_until(ready, run.config.ready_timeout_s, "the nodes to share every partition durably")


def _log_evidence(log_dir: Path, exits: list[dict[str, object]], limit: int = 6) -> list[str]:
    """The first error lines of the node logs and the nodes' unexpected exits (for a failed run)."""
    lines = [f"node {e['node']} exited with code {e['code']} while {e['while']} at +{e['at_s']}s: {e['last_line']}"
             for e in exits[:3]]
    for log in sorted(log_dir.glob("node-*.log")):
        try:
            text = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        errors = [line for line in text if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]
        lines += [f"{log.name}: {line[:300]}" for line in errors[:2]]
    return lines[:limit]


@dataclass
class Started:
    """What a run started so far, each recorded as soon as it exists: :func:`release_run` stops exactly
    these, whatever step failed."""

    mount: OutputMount | None = None
    producer: ChaosProducer | None = None
    nodes: NodeSet | None = None
    probe: ClusterProbe | None = None
    monitor: Monitor | None = None


def start_pipeline(run: ChaosRun, stack: DevStack, started: Started) -> tuple[FaultContext, Monitor]:
    """The output mount (when planned), the first topic, the producer, the nodes, the probe and the
    monitor, each recorded in ``started`` as soon as it is built; returns, once the nodes are ready,
    what the faults may touch and the monitor."""
    config, plan = run.config, run.plan
    if plan.services and run.services is None:
        raise ChaosError(f"kinds {[k for k in plan.kinds if SPECS[k].services]} need the s3-rest lake")
    if plan.output_mount:
        if not run.lake.local:
            raise ChaosError("output faults need the local lake (an output mount)")
        started.mount = OutputMount(run.output)
        started.mount.mount()
    assert stack.kafka is not None
    replication = len(stack.kafka.brokers)
    first = run.topics.name(0)
    create_topic(stack.bootstrap, first, config.partitions, replication=replication)
    run.topics.partitions[first] = config.partitions
    run.result.topics = (first,)
    producer = started.producer = ChaosProducer(
        stack.bootstrap, config.rate, seed=plan.seed,
        transactional_id=f"{run.prefix}-txn" if plan.transactional else None)
    producer.add_partitions(first, config.partitions)
    producer.start()
    topic_arg = f"re:{run.prefix}\\..*" if plan.pattern else first
    network = _network_factory(run, stack) if plan.network else None
    node_argv = _node_flags(run, stack, topic_arg)
    nodes = started.nodes = NodeSet(node_argv, run.dir / "logs", network, node_dir=run.lake.prepare_node,
                                    env=run.lake.node_env)
    for _ in range(config.node_count):
        nodes.start()
    probe = started.probe = ClusterProbe(stack.bootstrap, stack.zk_hosts, run.prefix)
    monitor = started.monitor = Monitor(probe, nodes, run.note).start()
    took = _wait_ready(run, probe, nodes)
    run.note(f"{config.node_count} nodes ready in {took:.1f}s")
    ctx = FaultContext(stack=stack, nodes=nodes, probe=probe, producer=producer, topics=run.topics,
                       output=started.mount, session_timeout_s=config.session_timeout_ms / 1000.0,
                       checkpoint_interval_s=config.checkpoint_interval_ms / 1000.0, source_identity="kafka",
                       rng=random.Random(f"targets/{plan.seed}"), note=run.note, wait_until=run.wait_until,
                       pipeline=run.prefix, output_dir=run.output if run.lake.local else None, run_dir=run.dir,
                       table_format=config.table_format.value, partition_by=config.partition_by,
                       node_argv=node_argv, lake=run.lake,
                       services=run.services)
    return ctx, monitor


def release_run(run: ChaosRun, started: Started) -> None:
    """Stop what the run started (monitor, producer, nodes, probe, then the output mount, saved when
    the run failed), recording the producer's counts, the nodes' unexpected exits (and, for a failed
    run, the first errors of their logs) and the run's elapsed time."""
    result = run.result
    if started.monitor is not None:
        started.monitor.stop()
    producer = started.producer
    if producer is not None:
        with contextlib.suppress(Exception):  # broad on purpose: a producer that fails to stop still has its counts
            producer.stop()
        result.acked = producer.acked_count
        result.producer = {"produced": producer.produced, "acked": producer.acked_count, "failed": producer.failed,
                           "uncertain": producer.uncertain, "without_offset": producer.without_offset,
                           "transactions": dict(producer.transactions),
                           "error": producer.error}
    if started.nodes is not None:
        result.node_exits = started.nodes.unexpected_exits()
        started.nodes.stop_all()
        if not result.ok:
            result.evidence += _log_evidence(run.dir / "logs", result.node_exits)
    if started.probe is not None:
        started.probe.close()
    result.elapsed_s = round(time.monotonic() - run.started, 1)
    if started.mount is not None:
        started.mount.unmount(save_to=None if result.ok else run.dir / "output-saved")
