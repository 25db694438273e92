"""The CDC pipeline's fault kinds (``laminar-kafka chaos --pipeline cdc``; planned by
:mod:`laminar_kafka.chaos.cdc.plan`): the committer of an epoch's tables killed while it commits,
compaction of the upserted tables, hot keys, and a hot partition moved to another node.

They need the run's producer to be a :class:`~laminar_kafka.chaos.cdc.producer.CdcProducer` (hot
keys) and its lake to be Iceberg (compaction)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from laminar_kafka.chaos.cdc.producer import CdcProducer
from laminar_kafka.chaos.fault_api import Fault, FaultContext, Injection, restart_heal
from laminar_kafka.chaos.plan import FaultEvent
from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.cluster.lake.commits import committer_of
from laminar_kafka.coordinator.engine.model import ControlState
from laminar_kafka.coordinator.vnodes.routing import partitions_by_vnode
from laminar_kafka.devstack.processes import node_environment

__all__ = ["CompactDuringUpserts", "HotKeys", "KillCommitter", "MoveHotPartition"]

#: one compaction pass, at most
COMPACT_BOUND_S = 120.0


def _cdc_producer(ctx: FaultContext, kind: str) -> CdcProducer:
    if not isinstance(ctx.producer, CdcProducer):
        raise ChaosError(f"{kind} needs the cdc pipeline's producer (--pipeline cdc)")
    return ctx.producer


class KillCommitter(Fault):
    """SIGKILL the node whose turn it is to commit an epoch's tables, ``delay_s`` after the epoch's
    manifest is committed: while it commits (a copy-on-write upsert rewrites files). The turn is
    :func:`~laminar_kafka.cluster.lake.commits.committer_of` the next epoch over the nodes that acked
    the last one (the same nodes in a steady pipeline); the kill is made from a ZooKeeper watch on the
    register, as the epoch appears committed. ``committer`` in the details: the turn computed again
    from the killed epoch's own ``acked_by``. Another node commits the epoch one epoch later."""

    kind, role = "kill-committer", "committer"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        delay = event.number("delay_s", 0.0)
        for _attempt in range(5):  # the register skipped the epoch, or its committer no longer runs: again
            control = ctx.probe.control()
            last = control.last_epoch if control is not None else 0
            running = ctx.nodes.running()
            victim = committer_of(last + 1, (ctx.probe.acked_by(last) if last else None) or running)
            if victim is None or victim not in running:
                _next_committed_epoch(ctx)
                continue
            kill = _CommitterKill()

            def on_register(now: ControlState, victim: int = victim, last: int = last,
                            kill: _CommitterKill = kill) -> bool:
                if kill.done.is_set() or now.last_epoch <= last:
                    return not kill.done.is_set()
                if now.last_epoch == last + 1:
                    time.sleep(delay)
                    ctx.nodes.kill(victim)
                    kill.at, kill.epoch = time.monotonic(), now.last_epoch
                kill.done.set()
                return False

            ctx.probe.watch_register(on_register)
            ctx.wait_until(kill.done.is_set, 3.0 * ctx.checkpoint_interval_s + 20.0, "the next epoch to commit")
            if not kill.epoch:
                continue
            targets = ctx.highs()  # just after the kill: at least the high watermarks at the kill
            committer = committer_of(kill.epoch, ctx.probe.acked_by(kill.epoch) or [])
            details: dict[str, object] = {"epoch": kill.epoch, "victim": victim, "committer": committer,
                                          "delay_s": delay}
            ctx.note(f"SIGKILL node {victim}, committer of epoch {kill.epoch} (turn from its acks: {committer})")
            if event.flag("restart"):
                return Injection(kill.at, targets, details, restart_heal(ctx, victim),
                                 event.number("restart_after_s", 1.0))
            return Injection(kill.at, targets, details)
        raise ChaosError("no epoch in 5 had its committer running when it committed")


@dataclass
class _CommitterKill:
    """What the register watch of :class:`KillCommitter` did (written on kazoo's thread before
    ``done`` is set, read after it)."""

    done: threading.Event = field(default_factory=threading.Event)
    at: float = 0.0
    epoch: int = 0


def _next_committed_epoch(ctx: FaultContext) -> int:
    """The next epoch committed from now (polled every 0.1 s; bounded)."""
    control = ctx.probe.control()
    before = control.last_epoch if control is not None else 0
    found: list[int] = []

    def committed() -> bool:
        now = ctx.probe.control()
        if now is not None and now.last_epoch > before:
            found[:] = [now.last_epoch]
            return True
        return False

    ctx.wait_until(committed, 3.0 * ctx.checkpoint_interval_s + 20.0, "an epoch to commit")
    return found[0]


class CompactDuringUpserts(Fault):
    """``laminar-kafka compact`` on the first topic's table, ``passes`` times, while the nodes upsert
    into it. A pass that fails (e.g. losing a commit race to a node, which is the nodes' right) is
    recorded in the details, not an error of the fault; a pass that does not end in
    :data:`COMPACT_BOUND_S` is."""

    kind, role = "compact-during-upserts", "table"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        lake = ctx.lake
        if lake is None or lake.catalog_uri is None or ctx.run_dir is None:
            raise ChaosError(f"{self.kind} needs an Iceberg lake")
        topic = ctx.topics.name(0)
        argv = [sys.executable, "-m", "laminar_kafka.cli.main", "compact", "--output", lake.output,
                "--table-format", "iceberg", "--pipeline", ctx.pipeline, "--catalog-uri", lake.catalog_uri,
                "--topic", topic, "--log-level", "warning", "--json"]
        targets = ctx.highs()
        at = time.monotonic()
        passes: list[dict[str, object]] = []
        log = ctx.run_dir / "logs" / "compact.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(int(event.number("passes", 1))):
            started = time.monotonic()
            try:
                done = subprocess.run(argv, capture_output=True, text=True, env=node_environment(),
                                      stdin=subprocess.DEVNULL, timeout=COMPACT_BOUND_S)
            except subprocess.TimeoutExpired as exc:
                raise ChaosError(f"compact of {topic} did not end in {COMPACT_BOUND_S:.0f}s") from exc
            with open(log, "a") as handle:
                handle.write(f"argv: {argv}\nexit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}")
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            passes.append({"exit": done.returncode, "seconds": round(time.monotonic() - started, 1),
                           "stderr": lines[-1:]})
        ctx.note(f"compacted {topic}: {passes}")
        return Injection(at, targets, {"topic": topic, "passes": passes})


class HotKeys(Fault):
    """``keys`` keys of the first topic take ``share`` of the production for the hold (updates, and
    with ``deletes`` deletes and re-creations): many changes of one key in every epoch."""

    kind, role = "hot-keys", "keys"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        producer = _cdc_producer(ctx, self.kind)
        topic = ctx.topics.name(0)
        space = ctx.topics.partitions[topic] * producer.changes.keys_per_partition
        keys = sorted(ctx.rng.sample(range(space), min(space, int(event.number("keys", 3)))))
        targets = ctx.highs()
        producer.hot([(topic, k) for k in keys], event.number("share", 0.8), event.flag("deletes"))
        ctx.note(f"hot keys {keys} of {topic} for {event.hold_s:.1f}s")

        def heal() -> None:
            producer.cool()
            ctx.note("hot keys cooled")
        return Injection(time.monotonic(), targets, {"topic": topic, "keys": keys}, heal, event.hold_s)


class MoveHotPartition(Fault):
    """A burst of updates to ``keys`` keys of one partition of the first topic; ``lead_s`` later the
    node owning the partition leaves (SIGTERM: its partitions move to the others) while the burst goes
    on for the hold; with ``rejoin``, a new node joins once the leaver exited."""

    kind, role = "move-hot-partition", "partition owner"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        producer = _cdc_producer(ctx, self.kind)
        topic = ctx.topics.name(0)
        control = ctx.probe.control()
        if control is None:
            raise ChaosError("the register cannot be read")
        running = set(ctx.nodes.running())
        owned = [(p, control.snapshot.owners[vnode])
                 for vnode, tps in partitions_by_vnode(ctx.source_identity, ctx.topics.all_partitions(),
                                                       control.snapshot.vnode_count).items()
                 for t, p in tps if t == topic and control.snapshot.owners[vnode] in running]
        if not owned:
            raise ChaosError(f"no partition of {topic} is owned by a running node")
        partition, owner = ctx.rng.choice(sorted(owned))
        pool = list(producer.changes.keys_of(partition))
        keys = sorted(ctx.rng.sample(pool, min(len(pool), int(event.number("keys", 10)))))
        producer.hot([(topic, k) for k in keys], 0.9)
        ctx.note(f"hot keys {keys} of {topic}:{partition} (owned by node {owner})")
        time.sleep(event.number("lead_s", 2.0))
        targets = ctx.highs()
        ctx.nodes.terminate(owner)
        at = time.monotonic()
        ctx.note(f"SIGTERM node {owner}, owner of the hot partition {topic}:{partition}")
        details: dict[str, object] = {"topic": topic, "partition": partition, "owner": owner, "keys": len(keys)}

        def heal() -> None:
            producer.cool()
            if event.flag("rejoin"):
                details["exit_code"] = ctx.nodes.wait_exit(owner, 60.0)
                details["joined"] = ctx.nodes.start()
            ctx.note(f"hot partition cooled; node {owner} left" +
                     (f", node {details['joined']} joined" if "joined" in details else ""))
        return Injection(at, targets, details, heal, event.hold_s)
