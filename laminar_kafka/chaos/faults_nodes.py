"""Chaos faults on node processes and their sessions: kills (mid-epoch, the leader, a drain donor or
recipient), a zombie, planned leaves, joins, bursts of both, and ZooKeeper session expiry."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from laminar_kafka.chaos.fault_api import Fault, FaultContext, Injection, kill_node, resolve_node, restart_heal
from laminar_kafka.chaos.plan import FaultEvent
from laminar_kafka.chaos.servers import ChaosError, expire_session
from laminar_kafka.coordinator.engine.model import ControlState
from laminar_kafka.coordinator.vnodes.routing import partitions_by_vnode

__all__ = ["Churn", "Join", "LeaderKill", "Leave", "NodeKill", "RoundKill", "SessionExpiry", "Zombie"]


# --------------------------------------------------------------------------------------------------
# Nodes


class NodeKill(Fault):
    """SIGKILL a random node mid-epoch: ``phase`` (0..1) of a checkpoint interval after an epoch opens."""

    kind, role = "node-kill", "node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victim = resolve_node(ctx, event.target)
        control = ctx.probe.control()
        opened = control.open_epoch if control else 0
        new_epoch = threading.Event()

        def on_register(now: ControlState) -> bool:
            if now.open_epoch not in (0, opened):
                new_epoch.set()
                return False
            return not new_epoch.is_set()

        ctx.probe.watch_register(on_register)
        with contextlib.suppress(ChaosError):  # no epoch opens (e.g. a stalled pipeline): kill anyway
            ctx.wait_until(new_epoch.is_set, 3.0 * ctx.checkpoint_interval_s + 2.0, "an epoch to open")
        new_epoch.set()  # ends the watch at its next call
        phase = event.number("phase", 0.5)
        time.sleep(phase * ctx.checkpoint_interval_s)
        return kill_node(ctx, victim, event, {"phase": phase})


class LeaderKill(Fault):
    kind, role = "kill-leader", "leader"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        return kill_node(ctx, resolve_node(ctx, "node:leader"), event, {"leader": True})


class RoundKill(Fault):
    """SIGKILL a drain donor or recipient while a round runs.

    The round is started by a join (a new node id: it is the recipient, the other nodes donors) or a
    planned leave (the leaver is the donor, the others recipients). Rounds last a few hundred
    milliseconds, so the kill is made from a ZooKeeper watch on the register, ``delay_s`` (0-0.1 s)
    after the round appears. The victim is chosen among the nodes that give (donors: the round's
    participants) or take a vnode holding a partition. ``round_after_kill`` in the details: whether
    the round was still undecided when the kill had landed."""

    role = ""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.role = "donor" if kind == "kill-donor" else "recipient"

    def _victim(self, ctx: FaultContext, control: ControlState, leaver: int | None) -> tuple[int | None, int]:
        assert control.round is not None
        moving = [v for v, (old, new) in enumerate(zip(control.snapshot.owners, control.round.target_owners, strict=True))
                  if old != new]
        with_data = partitions_by_vnode(ctx.source_identity, {tp: 0 for tp in ctx.topics.all_partitions()},
                                        control.snapshot.vnode_count)
        pool = [v for v in moving if with_data.get(v)] or moving
        moving_partitions = sum(len(with_data.get(v, ())) for v in moving)
        if self.role == "donor":
            if leaver is not None:
                return leaver, moving_partitions
            candidates = sorted({control.snapshot.owners[v] for v in pool} & set(control.round.participants))
        else:
            candidates = sorted({control.round.target_owners[v] for v in pool} - {leaver})
        return (ctx.rng.choice(candidates) if candidates else None), moving_partitions

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        control = ctx.probe.control()
        before = control.version if control else 0
        delay = event.number("delay_s", 0.0)
        done = threading.Event()
        kill = _RoundKill()

        def on_register(now: ControlState) -> bool:
            if done.is_set():
                return False
            if now.round is None or now.version < before:
                return True
            victim, kill.moving_partitions = self._victim(ctx, now, kill.leaver)
            kill.round = str(now.round.drain_id)
            if victim is not None:
                if delay:
                    time.sleep(delay)
                ctx.nodes.kill(victim)
                kill.at, kill.victim = time.monotonic(), victim
            done.set()
            return False

        trigger = str(event.param("trigger"))
        if trigger == "join":
            joined = ctx.nodes.start()
            ctx.note(f"node {joined} joins (to start a round)")
        else:
            kill.leaver = resolve_node(ctx, "node:any")
            ctx.nodes.terminate(kill.leaver)
            ctx.note(f"node {kill.leaver} leaves (to start a round)")
        ctx.probe.watch_register(on_register)
        ctx.wait_until(done.is_set, 60.0, f"a round with a {self.role} to kill")
        if kill.victim is None:
            raise ChaosError(f"round {kill.round} has no {self.role} to kill")
        targets = ctx.highs()  # just after the kill: at least the high watermarks at the kill
        after = ctx.probe.control()
        running = after is not None and after.round is not None and str(after.round.drain_id) == kill.round
        details: dict[str, object] = {
            "trigger": trigger, "victim": kill.victim, "round": kill.round,
            "moving_partitions": kill.moving_partitions, "round_after_kill": "running" if running else "decided",
        }
        ctx.note(f"SIGKILL node {kill.victim} ({self.role} of round {kill.round})")
        if event.flag("restart"):
            return Injection(kill.at, targets, details, restart_heal(ctx, kill.victim),
                             event.number("restart_after_s", 1.0))
        return Injection(kill.at, targets, details)


@dataclass
class _RoundKill:
    """What the register watch of :class:`RoundKill` did (written on kazoo's thread before the
    event is set, read after it)."""

    leaver: int | None = None
    victim: int | None = None
    at: float = 0.0
    round: str = ""
    moving_partitions: int = 0


class Zombie(Fault):
    """SIGSTOP a node past its session timeout (its session expires, its partitions move), then SIGCONT:
    the zombie must notice it was fenced, drop what it had not sealed and rejoin."""

    kind, role = "zombie", "node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victim = resolve_node(ctx, event.target)
        targets = ctx.highs()
        ctx.nodes.pause(victim)
        ctx.note(f"SIGSTOP node {victim} for {event.hold_s:.1f}s")

        def heal() -> None:
            ctx.nodes.resume(victim)
            ctx.note(f"SIGCONT node {victim}")
        return Injection(time.monotonic(), targets, {"victim": victim}, heal, event.hold_s)


class Leave(Fault):
    """SIGTERM (planned leave); with ``rejoin``, a new node joins once the leaver exited."""

    kind, role = "leave", "node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victim = resolve_node(ctx, event.target)
        targets = ctx.highs()
        ctx.nodes.terminate(victim)
        ctx.note(f"SIGTERM node {victim} (planned leave)")
        at = time.monotonic()
        details: dict[str, object] = {"victim": victim}
        if not event.flag("rejoin"):
            return Injection(at, targets, details)

        def heal() -> None:
            code = ctx.nodes.wait_exit(victim, 60.0)
            details["exit_code"] = code
            joined = ctx.nodes.start()
            ctx.note(f"node {victim} left with code {code}; node {joined} joins")
        return Injection(at, targets, details, heal, 0.0)


class Join(Fault):
    """Start a node with a new id; with ``replace``, SIGTERM another node at the same moment."""

    kind, role = "join", "new node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        details: dict[str, object] = {}
        targets = ctx.highs()
        if event.flag("replace"):
            leaver = resolve_node(ctx, "node:any")
            ctx.nodes.terminate(leaver)
            details["leaver"] = leaver
        joined = ctx.nodes.start()
        details["joined"] = joined
        ctx.note(f"node {joined} joins" + (f", node {details['leaver']} leaves" if "leaver" in details else ""))
        return Injection(time.monotonic(), targets, details)


def _seconds(value: object) -> float:
    """A plan's number of seconds (the plan makes floats; TypeError for anything else, as float() would)."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"a number of seconds is expected, not {value!r}")
    return float(value)


class Churn(Fault):
    """A burst of leaves and joins, ``gaps_s`` apart."""

    kind, role = "churn", "nodes"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        targets = ctx.highs()
        at = time.monotonic()
        steps = [str(step) for step in event.items("steps")]
        gaps = [_seconds(gap) for gap in event.items("gaps_s")]
        done: list[str] = []
        for step, gap in zip(steps, gaps, strict=True):
            if step == "join":
                done.append(f"+{ctx.nodes.start()}")
            else:
                victim = resolve_node(ctx, "node:any")
                ctx.nodes.terminate(victim)
                done.append(f"-{victim}")
            time.sleep(float(gap))
        ctx.note(f"churn {' '.join(done)}")
        return Injection(at, targets, {"steps": done})


class SessionExpiry(Fault):
    """Expire a node's ZooKeeper session on the server (Kafka stays reachable): a twin client attaches
    to the session that owns the node's member znode and closes it."""

    kind, role = "session-expiry", "node"

    def inject(self, ctx: FaultContext, event: FaultEvent) -> Injection:
        victim = resolve_node(ctx, event.target)
        sessions: list[int] = []

        def registered() -> bool:
            session = ctx.probe.members().get(victim)
            sessions[:] = [session] if session else []
            return bool(sessions)

        ctx.wait_until(registered, 20.0, f"node {victim}'s member znode")
        session = sessions[0]
        targets = ctx.highs()
        expire_session(ctx.zk_hosts, session)
        at = time.monotonic()
        ctx.note(f"expired node {victim}'s session 0x{session:x}")
        ctx.wait_until(lambda: ctx.probe.members().get(victim) != session, 15.0, "the expired member to vanish")
        return Injection(at, targets, {"victim": victim, "session": f"0x{session:x}"})
