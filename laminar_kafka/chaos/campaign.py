"""`laminar-kafka chaos`: a seeded chaos campaign over real processes, ending each run with the audit.

One run per seed (:func:`run_seed`):

1. plan (:mod:`laminar_kafka.chaos.plan`, pure): the seed's fault kinds and their schedule;
2. stack: a 3-broker Kafka (replication 3, min.insync.replicas 2) when the plan kills brokers, a
   3-server ZooKeeper ensemble when it kills ZooKeeper servers, else one of each; a stack of the
   same shape is reused by the next run (each run has its own topics, pipeline and output); with the
   ``s3-rest`` lake also SeaweedFS and Iceberg's REST catalog behind their fault proxies
   (:class:`laminar_kafka.chaos.lake.LakeServices`, started once, repaired between runs);
3. a topic ``<prefix>.t0``, a producer (idempotent, ``acks=all``; transactional with aborted
   transactions when the plan has ``transactions``), ``node_count`` ``laminar-kafka run`` processes
   (``--topic re:<prefix>\\..*`` when the plan grows topics; each in its own network namespace when
   it has network faults; the output on a tmpfs of its own when it has output faults; with the
   ``s3-rest`` lake each in a working directory of its own with its own ``--state-dir``, the output
   ``s3://laminar-chaos/<prefix>``, the tables committed through the REST catalog);
4. the faults (:mod:`laminar_kafka.chaos.faults`), in order, each no earlier than its ``at_s`` and after the
   previous one recovered (bounded); a monitor thread measures each fault's recovery (defined in
   :mod:`laminar_kafka.chaos.report`) and supervises the nodes (an unexpected exit is recorded and the node
   restarted, as a service manager would);
5. production stops; catch-up: every partition's durable cursor reaches its final high watermark
   (bounded); then the exactly-once audit (:func:`laminar_kafka.chaos.evidence.audit_run`) of every
   topic, reading the lake as users do (Iceberg: each table's current snapshot through the catalog),
   plus the producer's own view: every acknowledged offset is in the output, no aborted one is.

A run's directory (node logs, ``events.log``, ``plan.json``, ``result.json``) is removed when the run
is OK and kept (its path printed) otherwise, or when a node exited by itself in a run without output
faults and no state fault explains the exit (not an exactly-once violation, but worth reading). The
command (`laminar-kafka chaos`, in :mod:`laminar_kafka.cli.tools`) exits 0 only when every run ended
exact and caught up.

Modules: ``kinds`` (the fault kinds and the lakes), ``plan`` (the pure schedule), ``faults`` (the
registry; kinds in ``faults_nodes``, ``faults_infra`` and ``faults_state``, shared types in
``fault_api``), ``lake`` (the run's lake and the s3-rest lake's services), ``nodes`` (processes,
their argv and network namespaces, supervision), ``producer``,
``servers`` (probe, session expiry, output mount), ``monitor`` (stack reuse, recovery), ``report``
(results, table), ``evidence`` (the audit, first evidence of a violation), ``cdc`` (``--pipeline cdc``).
"""
from __future__ import annotations

import contextlib
import json
import logging
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.chaos.cdc.pipelines import auditor, new_producer, node_flags
from laminar_kafka.chaos.evidence import log_evidence
from laminar_kafka.chaos.faults import FAULTS, FaultContext, TopicBook
from laminar_kafka.chaos.lake import LakeServices, local_lake
from laminar_kafka.chaos.monitor import Monitor, StackPool
from laminar_kafka.chaos.nodes import NodeSet, network_factory, node_argv
from laminar_kafka.chaos.plan import KINDS, LAKES, SPECS, FaultEvent, RunPlan, kinds_of_lake, plan_run
from laminar_kafka.chaos.producer import ChaosProducer
from laminar_kafka.chaos.report import FaultResult, RunResult
from laminar_kafka.chaos.servers import ChaosError, ClusterProbe, OutputMount
from laminar_kafka.cluster.lake.settings import TableFormat
from laminar_kafka.coordinator.codec import format_partition_key
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.stack import DevStack
from laminar_kafka.devstack.topics import create_topic
from laminar_kafka.devstack.waiting import wait_until

logger = logging.getLogger(__name__)

__all__ = ["CampaignConfig", "run_campaign", "run_seed"]


@dataclass(frozen=True)
class CampaignConfig:
    """Settings of a campaign (every run uses the same)."""

    seeds: int = 1
    seed_start: int = 0
    duration_s: float = 40.0
    kinds: tuple[str, ...] = KINDS
    node_count: int = 3
    rate: int = 400
    partitions: int = 6
    kinds_per_run: int = 1
    max_extras: int = 2
    workdir: Path | None = None
    keep: bool = False
    session_timeout_ms: int = 4000
    checkpoint_interval_ms: int = 1000
    drain_timeout_ms: int = 15000
    ready_timeout_s: float = 120.0
    recovery_timeout_s: float = 90.0
    catch_up_timeout_s: float = 150.0
    #: what the nodes land into: a Parquet tree, or Iceberg tables (embedded SQLite catalog)
    table_format: TableFormat = TableFormat.PARQUET
    #: the nodes' ``partition-by`` (a field spec such as ``bucket[4](_partition),hour(_timestamp)``
    #: drives the sink's field levels through every fault)
    partition_by: str = "day"
    #: ``local`` (one output directory the nodes share) or ``s3-rest`` (each node in its own
    #: directory, Iceberg on SeaweedFS S3 through a REST catalog: :mod:`laminar_kafka.chaos.lake`)
    lake: str = "local"
    #: ``append`` or ``cdc`` (``keys`` keys' changes upserted into Iceberg: :mod:`laminar_kafka.chaos.cdc.pipelines`)
    pipeline: str = "append"
    keys: int = 2000

    def __post_init__(self) -> None:
        if self.lake not in LAKES:
            raise ValueError(f"unknown lake {self.lake!r} (lakes: {', '.join(LAKES)})")
        if self.pipeline == "cdc" and self.table_format is not TableFormat.ICEBERG:
            raise ValueError("the cdc pipeline upserts into Iceberg tables (table_format iceberg)")
        if self.lake == "s3-rest" and self.table_format is not TableFormat.ICEBERG:
            raise ValueError("the s3-rest lake lands Iceberg tables (table_format iceberg)")
        foreign = [k for k in self.kinds if k not in kinds_of_lake(self.lake, self.pipeline)]
        if foreign:
            raise ValueError(f"kinds {foreign} do not apply to the {self.lake} lake")

    def plan(self, seed: int) -> RunPlan:
        return plan_run(seed, self.duration_s, self.kinds, self.node_count,
                        session_timeout_s=self.session_timeout_ms / 1000.0,
                        kinds_per_run=self.kinds_per_run, max_extras=self.max_extras,
                        epoch_s=self.checkpoint_interval_ms / 1000.0)


# --------------------------------------------------------------------------------------------------
# One run


class _Run:
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


def _wait_ready(run: _Run, probe: ClusterProbe, nodes: NodeSet) -> float:
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


@dataclass
class _Started:
    """What a run started so far, each recorded as soon as it exists: :func:`_release` stops exactly
    these, whatever step failed."""

    mount: OutputMount | None = None
    producer: ChaosProducer | None = None
    nodes: NodeSet | None = None
    probe: ClusterProbe | None = None
    monitor: Monitor | None = None


def _start_pipeline(run: _Run, stack: DevStack, started: _Started) -> tuple[FaultContext, Monitor]:
    """The output mount (when planned), the first topic, the producer, the nodes, the probe and the
    monitor, each recorded in ``started`` as soon as it is built; returns, once the nodes are ready,
    what the faults may touch and the monitor."""
    from laminar_kafka.cluster.config import SETTING_NAMES

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
    producer = started.producer = new_producer(
        config.pipeline, stack.bootstrap, config.rate, seed=plan.seed, keys=config.keys, partitions=config.partitions,
        transactional_id=f"{run.prefix}-txn" if plan.transactional else None)
    producer.add_partitions(first, config.partitions)
    producer.start()
    topic_arg = f"re:{run.prefix}\\..*" if plan.pattern else first
    extra_ports = run.services.proxy_ports() if run.services is not None else ()
    network = network_factory(plan.seed, stack, extra_ports) if plan.network else None
    settings = ["--checkpoint-interval-ms", str(config.checkpoint_interval_ms),
                "--session-timeout-ms", str(config.session_timeout_ms),
                "--drain-timeout-ms", str(config.drain_timeout_ms)]
    if plan.pattern and "topology-interval-ms" in SETTING_NAMES:
        settings += ["--topology-interval-ms", "1000"]
    if config.partition_by != "day":
        settings += ["--partition-by", config.partition_by]
    settings += node_flags(config.pipeline)
    argv = node_argv(stack, topic_arg, run.prefix, run.lake.node_flags, settings)
    nodes = started.nodes = NodeSet(argv, run.dir / "logs", network, node_dir=run.lake.prepare_node,
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
                       node_argv=argv, lake=run.lake,
                       services=run.services)
    return ctx, monitor


def _release(run: _Run, started: _Started) -> None:
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
            result.evidence += log_evidence(run.dir / "logs", result.node_exits)
    if started.probe is not None:
        started.probe.close()
    result.elapsed_s = round(time.monotonic() - run.started, 1)
    if started.mount is not None:
        started.mount.unmount(save_to=None if result.ok else run.dir / "output-saved")


def _apply(run: _Run, ctx: FaultContext, monitor: Monitor, event: FaultEvent) -> FaultResult:
    result = FaultResult(kind=event.kind, target=event.target, planned_at_s=event.at_s, params=event.params_json())
    run.result.faults.append(result)
    while time.monotonic() - run.phase_start < event.at_s:
        time.sleep(0.1)
    with contextlib.suppress(ChaosError):
        run.wait_until(lambda: monitor.pending() == 0, run.config.recovery_timeout_s, "the previous fault's recovery")
    run.note(f"fault {event.kind} ({event.target}, {dict(event.params)}, hold {event.hold_s}s)")
    try:
        injection = FAULTS[event.kind].inject(ctx, event)
    except Exception as exc:  # any failure is recorded on the fault's result, then raised
        result.error = f"{type(exc).__name__}: {exc}"
        raise
    result.injected_at_s = round(injection.at - run.phase_start, 2)
    result.details = injection.details
    grown = {format_partition_key(t, p): 1 for t, p in injection.new_partitions}
    if not (injection.heal is not None and injection.targets_at_heal):
        monitor.watch(result, {**injection.targets, **grown}, injection.at)
    if injection.heal is not None:
        while time.monotonic() < injection.at + injection.heal_after_s:
            time.sleep(0.1)
        if injection.targets_at_heal:
            monitor.watch(result, {**ctx.highs(), **grown}, injection.at)
        injection.heal()
        result.healed_at_s = round(time.monotonic() - run.phase_start, 2)
    return result


def _prepare_run(seed: int, config: CampaignConfig, base: Path, token: str, say: Callable[[str], None],
                 services: LakeServices | None = None) -> _Run:
    """A fresh ``base/seed-<seed>`` directory holding the seed's ``plan.json``, and the run's state;
    announces the plan."""
    plan = config.plan(seed)
    directory = base / f"seed-{seed}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    (directory / "plan.json").write_text(json.dumps(plan.to_json(), indent=2))
    run = _Run(plan, config, directory, token, say, services)
    say(f"seed {seed}: kinds {', '.join(plan.kinds)}; {len(plan.events)} fault(s): "
        + ", ".join(f"{e.kind}@{e.at_s:.0f}s" for e in plan.events))
    return run


def _inject_faults(run: _Run, ctx: FaultContext, monitor: Monitor) -> None:
    """The plan's faults in order (the fault phase starts now), then a bounded wait for the last
    one's recovery (a recovery that does not come is the monitor's to record, not an error)."""
    run.phase_start = time.monotonic()
    for event in run.plan.events:
        fault = _apply(run, ctx, monitor, event)
        run.say(f"seed {run.plan.seed}:   {event.kind} {fault.details} at {fault.injected_at_s}s")
    with contextlib.suppress(ChaosError):
        run.wait_until(lambda: monitor.pending() == 0, run.config.recovery_timeout_s, "the last fault's recovery")


def _stop_production_and_catch_up(run: _Run, ctx: FaultContext, monitor: Monitor) -> None:
    """Stop the producer, read every partition's final high watermark, and wait (bounded) until every
    durable cursor reaches it: ``result.caught_up`` and ``catch_up_s``, or the lagging partitions as
    evidence."""
    result = run.result
    ctx.producer.stop()
    result.topics = tuple(sorted(run.topics.partitions))
    finals: dict[str, int] = {}

    def all_highs() -> bool:
        finals.update(ctx.probe.high_watermarks(run.topics.all_partitions()))
        return len(finals) == len(run.topics.all_partitions())

    run.wait_until(all_highs, 60.0, "every partition's high watermark")
    run.note(f"production stopped: {ctx.producer.acked_count} acknowledged; catching up")
    caught = time.monotonic()
    try:
        run.wait_until(lambda: all(monitor.durable.get(k, -1) >= v for k, v in finals.items()),
                       run.config.catch_up_timeout_s, "catch-up (every durable cursor at its high watermark)")
        result.caught_up = True
        result.catch_up_s = round(time.monotonic() - caught, 2)
    except ChaosError as exc:
        lagging = {k: (monitor.durable.get(k), v) for k, v in finals.items() if monitor.durable.get(k, -1) < v}
        result.evidence.append(
            f"not caught up: (durable, high) per lagging partition {dict(list(lagging.items())[:8])}")
        run.note(str(exc))


def _file_result(run: _Run) -> None:
    """Write ``result.json``; remove the run's directory when the run is OK, not to be kept and no
    node exited by itself unexplained (in a run without output faults), else name it in ``workdir``."""
    result = run.result
    (run.dir / "result.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
    unexplained_exits = not run.plan.output_mount and any(e["while"] == "running" and not e.get("explained")
                                                          for e in result.node_exits)
    if result.ok and not run.config.keep and not unexplained_exits:
        shutil.rmtree(run.dir, ignore_errors=True)
    else:
        result.workdir = str(run.dir)


def run_seed(seed: int, config: CampaignConfig, pool: StackPool, base: Path, token: str,
             say: Callable[[str], None]) -> RunResult:
    """One seed's run, start to audit. Never raises for a run failure: the result carries it."""
    services: LakeServices | None = None
    unavailable: Exception | None = None
    if config.lake == "s3-rest":
        try:
            services = pool.lake_services(say)
        except Exception as exc:  # noqa: BLE001 - the run fails with it (below), the campaign goes on
            unavailable = exc
    run = _prepare_run(seed, config, base, token, say, services)
    started = _Started()
    try:
        if unavailable is not None:
            raise ChaosError(f"the s3-rest lake's services did not start: {unavailable}") from unavailable
        stack = pool.get(run.plan.brokers, run.plan.zk_servers, say)
        ctx, monitor = _start_pipeline(run, stack, started)
        _inject_faults(run, ctx, monitor)
        _stop_production_and_catch_up(run, ctx, monitor)
        auditor(config.pipeline)(run.result, run.topics.partitions, ctx.producer, run.lake, stack.bootstrap)
    except Exception as exc:  # a run failure is a result, not a crash of the campaign
        run.result.error = f"{type(exc).__name__}: {exc}"
        logger.debug("seed %d failed", seed, exc_info=True)
        with contextlib.suppress(OSError):  # the events log cannot be written: the result still says it
            run.note(f"run error: {run.result.error}")
    finally:
        _release(run, started)
        _file_result(run)
    return run.result


# --------------------------------------------------------------------------------------------------
# Campaign


def run_campaign(config: CampaignConfig, say: Callable[[str], None] | None = None) -> tuple[list[RunResult], Path]:
    """Every seed's run, one after the other. Returns the results and the campaign directory (kept
    when a run failed or ``workdir`` was given)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    base = config.workdir or Path(tempfile.mkdtemp(prefix="laminar-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:6]
    pool = StackPool(base / "servers")
    results: list[RunResult] = []
    started = time.monotonic()
    try:
        for seed in range(config.seed_start, config.seed_start + config.seeds):
            result = run_seed(seed, config, pool, base, token, say)
            results.append(result)
            verdict = "OK" if result.ok else "FAILED"
            say(f"seed {seed}: {verdict} in {result.elapsed_s:.0f}s: {result.records} records, "
                f"{result.missing} missing, {result.duplicated} duplicated, "
                f"{len(result.node_exits)} unexpected node exit(s)"
                + (f"; error: {result.error}" if result.error else "")
                + (f"; kept {result.workdir}" if not result.ok else ""))
            for line in result.evidence[:6]:
                say(f"seed {seed}:   evidence: {line}")
            for exit_ in result.node_exits[:3]:
                how = "by itself" if exit_["while"] == "running" else "after SIGTERM (planned leave)"
                if exit_.get("explained"):
                    how += f" (as {exit_['explained']} makes it)"
                elif any(kind.startswith("output-") for kind in result.kinds):
                    how += " (an output fault was injected)"
                say(f"seed {seed}:   node {exit_['node']} exited {how} with code {exit_['code']} at "
                    f"+{exit_['at_s']}s: {exit_['last_line']}")
            if result.ok and result.workdir:
                say(f"seed {seed}:   kept {result.workdir}")
    finally:
        everything_ok = all(r.ok for r in results) and len(results) == config.seeds
        pool.close(clean=everything_ok)
        if everything_ok and config.workdir is None and not config.keep:
            shutil.rmtree(base, ignore_errors=True)
    logger.info("campaign took %.0fs", time.monotonic() - started)
    return results, base


