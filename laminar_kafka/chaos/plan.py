"""Seeded fault schedules for the chaos campaign (`laminar-kafka chaos`). Pure: no I/O, no clock.

:func:`plan_run` turns ``(seed, duration_s, kinds, node_count)`` into a :class:`RunPlan`: the fault
kinds of the run and a deterministic, time-ordered tuple of :class:`FaultEvent`. The same arguments
always give the same plan (the random generator is seeded from the seed alone, with a string seed,
so the plan does not depend on ``PYTHONHASHSEED`` or on the Python process).

Which kinds a seed draws: seed ``s`` takes ``n`` *primary* kinds round-robin
(``kinds[(s * n + j) % len(kinds)]``), so any ``ceil(len(kinds) / n)`` consecutive seeds draw every
kind. ``n`` is ``kinds_per_run``, raised to ``ceil(len(kinds) / EVERY_KIND_WITHIN)`` when that is
more, so that any :data:`EVERY_KIND_WITHIN` (20) consecutive seeds draw every kind however many
kinds there are (with the 26 kinds, ``n`` is 2 and any 13 consecutive seeds draw them all); then up to ``max_extras`` random *extra* kinds that need no
heavier stack than the primaries already do (a 3-broker Kafka, a 3-server ensemble and network
namespaces are only paid for when a primary asks for them); then, while the schedule is shorter than
``duration_s``, repeats of the run's kinds (at most ``MAX_EVENTS`` events in all).

Spacing contract (what the unit tests check):

- Events never overlap: event ``i+1`` starts at least ``MIN_GAP_S`` after event ``i``'s fault is
  healed *and* its expected recovery budget has passed (``at_s[i] + hold_s[i] + budget <= at_s[i+1]``).
  So a ZooKeeper quorum loss never coincides with a node kill, a broker kill never with a network
  cut, and so on; a burst (``churn``) is one event whose steps the runner applies in order.
- Membership stays survivable: the plan simulates the live node count; no event ever leaves fewer
  than ``MIN_LIVE`` (2) live nodes or more than ``node_count + 1``; a kill that would go below the
  floor restarts the victim (a crash followed by a supervisor restart), a leave at the floor is
  followed by a join, a join at the ceiling replaces a node (a burst of one leave and one join).
- Holds: a zombie is paused past the session timeout; a network cut to ZooKeeper is either shorter
  than the session timeout (the session survives) or longer (it expires), both are drawn; an
  unreachable object store stays so for at least 3 epochs (``epoch_s``) and 3 s.

Which kinds a campaign has depends on its lake (:func:`kinds_of_lake`): the default ``local`` lake
has :data:`KINDS`; ``s3-rest`` (the deployment shape: SeaweedFS S3 through an Iceberg REST catalog)
has them without the output-mount kinds, plus :data:`LAKE_KINDS` (the object store restarted or
unreachable, the catalog restarted, unreachable or slow); the ``cdc`` pipeline has its own kinds
first, then :data:`KINDS` (their events: :mod:`laminar_kafka.chaos.cdc.plan`). Neither is in
:data:`KINDS`, so the default campaign's round-robin, and every plan it makes, is what it was before them.

The runner (``laminar_kafka.chaos.campaign``) treats ``at_s`` as the earliest start, relative to the start of the
fault phase, and also waits (bounded) for the previous fault's recovery before injecting the next.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from laminar_kafka.chaos.cdc.plan import cdc_event
from laminar_kafka.chaos.kinds import (
    ALL_KINDS,
    CDC_KINDS,
    KINDS,
    LAKE_KINDS,
    LAKES,
    MISCONFIGURED_SETTINGS,
    SPECS,
    KindSpec,
    kinds_of_lake,
    parse_kinds,
)

__all__ = [
    "ALL_KINDS", "EVERY_KIND_WITHIN", "FaultEvent", "KINDS", "KindSpec", "LAKES", "LAKE_KINDS", "MAX_EVENTS",
    "MIN_GAP_S", "MIN_LIVE", "MISCONFIGURED_SETTINGS", "RunPlan", "SPECS", "kinds_of_lake", "live_counts",
    "parse_kinds", "plan_faults", "plan_run", "primaries_per_run",
]  # the kinds' names re-exported from laminar_kafka.chaos.kinds

#: at least this many seconds between one event's budget end and the next event's start
MIN_GAP_S = 1.0
#: never fewer live nodes than this after an event
MIN_LIVE = 2
#: events of one run, at most
MAX_EVENTS = 8
#: any this many consecutive seeds draw every kind as a primary (``make chaos SEEDS=20``)
EVERY_KIND_WITHIN = 20

Param = tuple[str, object]


@dataclass(frozen=True)
class FaultEvent:
    """One fault: injected ``at_s`` seconds into the fault phase (at the earliest), healed ``hold_s``
    later (0: instantaneous or self-healing), aimed at ``target``.

    ``target`` names a role the runner resolves when it injects: ``node:any``, ``node:leader``,
    ``node:donor``, ``node:recipient``, ``node:new``, ``node:all``, ``nodes`` (a burst),
    ``broker:leader``, ``broker:<i>``, ``broker:any``, ``zk:leader``, ``zk:<i>``, ``zk:<i>,<j>``, ``topic:any``,
    ``topic:new``, ``producer``, ``output``. ``params`` is a tuple of (name, value) pairs (hashable).
    """

    at_s: float
    kind: str
    target: str
    params: tuple[Param, ...] = ()
    hold_s: float = 0.0

    def param(self, name: str, default: object = None) -> object:
        for key, value in self.params:
            if key == name:
                return value
        return default

    def number(self, name: str, default: float = 0.0) -> float:
        value = self.param(name, default)
        return float(value) if isinstance(value, (int, float)) else default

    def flag(self, name: str) -> bool:
        return bool(self.param(name, False))

    def items(self, name: str) -> tuple[object, ...]:
        value = self.param(name, ())
        return tuple(value) if isinstance(value, tuple) else ()

    def params_json(self) -> dict[str, object]:
        """``params`` as a JSON object (tuple values as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params}

    def to_json(self) -> dict[str, object]:
        return {"at_s": self.at_s, "kind": self.kind, "target": self.target, "hold_s": self.hold_s,
                "params": self.params_json()}


@dataclass(frozen=True)
class RunPlan:
    """One seed's run: its kinds and events, and what the stack must offer for them."""

    seed: int
    duration_s: float
    node_count: int
    session_timeout_s: float
    kinds: tuple[str, ...]
    events: tuple[FaultEvent, ...] = field(default=())

    def _specs(self) -> list[KindSpec]:
        return [SPECS[k] for k in self.kinds]

    @property
    def brokers(self) -> int:
        return max((s.brokers for s in self._specs()), default=1)

    @property
    def zk_servers(self) -> int:
        return max((s.zk_servers for s in self._specs()), default=1)

    @property
    def pattern(self) -> bool:
        return any(s.pattern for s in self._specs())

    @property
    def network(self) -> bool:
        return any(s.network for s in self._specs())

    @property
    def transactional(self) -> bool:
        return any(s.transactional for s in self._specs())

    @property
    def output_mount(self) -> bool:
        return any(s.output_mount for s in self._specs())

    @property
    def services(self) -> bool:
        """Whether a kind of the run acts on the object store or the catalog (``--lake s3-rest``)."""
        return any(s.services for s in self._specs())

    @property
    def span_s(self) -> float:
        """When the last event's hold and recovery budget end (the fault phase lasts at least this)."""
        return max((e.at_s + e.hold_s + SPECS[e.kind].budget_s for e in self.events), default=0.0)

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.seed, "duration_s": self.duration_s, "node_count": self.node_count,
            "kinds": list(self.kinds), "brokers": self.brokers, "zk_servers": self.zk_servers,
            "pattern": self.pattern, "network": self.network, "transactional": self.transactional,
            "output_mount": self.output_mount, "services": self.services,
            "events": [e.to_json() for e in self.events],
        }


def _round(value: float) -> float:
    return round(value, 2)


class _Membership:
    """Live node count while planning: keeps every event survivable (see the module docstring)."""

    def __init__(self, node_count: int) -> None:
        self.live = node_count
        self.ceiling = node_count + 1

    def can_remove(self) -> bool:
        return self.live - 1 >= MIN_LIVE

    def can_add(self) -> bool:
        return self.live + 1 <= self.ceiling


def _kill_params(rng: random.Random, members: _Membership) -> list[Param]:
    """A kill: the victim stays dead when the floor allows it, else it is restarted after a while."""
    restart = (not members.can_remove()) or rng.random() < 0.5
    if not restart:
        members.live -= 1
    return [("restart", restart), ("restart_after_s", _round(rng.uniform(0.5, 3.0)))]


def _kill_in_round(kind: str, rng: random.Random, members: _Membership) -> list[Param]:
    """kill-donor / kill-recipient: a round is triggered by a join (the new node receives, the others
    give) or a planned leave (the leaver gives, the others receive); the victim is killed
    ``delay_s`` after the round starts. A donor of a leave-round is the leaver itself."""
    trigger = "join" if members.can_add() and (not members.can_remove() or rng.random() < 0.6) else "leave"
    params: list[Param] = [("trigger", trigger), ("delay_s", _round(rng.uniform(0.0, 0.1)))]
    if trigger == "join":
        members.live += 1
        return [*params, *_kill_params(rng, members)]
    members.live -= 1
    if kind == "kill-donor":  # the victim is the leaver: already counted out; a restart brings it back
        restart = rng.random() < 0.5
        members.live += 1 if restart else 0
        return [*params, ("restart", restart), ("restart_after_s", _round(rng.uniform(0.5, 3.0)))]
    return [*params, *_kill_params(rng, members)]


def _lake_event(kind: str, rng: random.Random, epoch_s: float) -> tuple[str, list[Param], float]:
    """(target, params, hold_s) of one event of a :data:`LAKE_KINDS` kind. ``epoch_s``: the nodes'
    epoch (checkpoint) interval; an unreachable object store stays so for 3 to 8 epochs and at least
    3 s (longer than an epoch, and than the S3 client's own retries of one request)."""
    if kind in ("store-restart", "catalog-restart"):
        target = "store" if kind == "store-restart" else "catalog"
        return target, [("signal", rng.choice(["kill", "term"])), ("down_s", _round(rng.uniform(0.0, 3.0)))], 0.0
    if kind == "store-unreachable":
        low = max(3.0, 3.0 * epoch_s)
        return "store", [("mode", rng.choice(["blackhole", "reset"]))], _round(rng.uniform(low, low + 5.0 * epoch_s))
    if kind == "catalog-unreachable":
        return "catalog", [("mode", rng.choice(["blackhole", "reset"]))], _round(rng.uniform(2.0, 10.0))
    if kind == "catalog-slow":
        return "catalog", [("latency_ms", rng.choice([100, 250, 500, 1000]))], _round(rng.uniform(4.0, 10.0))
    raise ValueError(f"unknown fault kind {kind!r}")


def _event(kind: str, rng: random.Random, members: _Membership, session_timeout_s: float,
           node_count: int, epoch_s: float = 1.0) -> tuple[str, list[Param], float]:
    """(target, params, hold_s) of one event of ``kind``; updates the membership count."""
    if kind in LAKE_KINDS:
        return _lake_event(kind, rng, epoch_s)
    if kind in CDC_KINDS:
        return cdc_event(kind, rng, members, epoch_s)
    st = session_timeout_s
    if kind == "node-kill":
        return "node:any", [("phase", _round(rng.random())), *_kill_params(rng, members)], 0.0
    if kind == "kill-leader":
        return "node:leader", _kill_params(rng, members), 0.0
    if kind in ("kill-donor", "kill-recipient"):
        return f"node:{kind.split('-')[1]}", _kill_in_round(kind, rng, members), 0.0
    if kind == "zombie":
        return rng.choice(["node:any", "node:leader"]), [], _round(st + rng.uniform(1.5, 4.0))
    if kind == "leave":
        rejoin = not members.can_remove()
        if not rejoin:
            members.live -= 1
        return rng.choice(["node:any", "node:leader"]), [("rejoin", rejoin)], 0.0
    if kind == "join":
        replace = not members.can_add()
        if not replace:
            members.live += 1
        return "node:new", [("replace", replace)], 0.0
    if kind == "churn":
        steps: list[str] = []
        for _ in range(rng.randint(2, 4)):
            options = [s for s, ok in (("leave", members.can_remove()), ("join", members.can_add())) if ok]
            step = rng.choice(options)
            members.live += 1 if step == "join" else -1
            steps.append(step)
        gaps = tuple(_round(rng.uniform(0.2, 2.0)) for _ in steps)
        return "nodes", [("steps", tuple(steps)), ("gaps_s", gaps)], 0.0
    if kind == "add-partitions":
        return "topic:any", [("count", rng.randint(1, 3))], 0.0
    if kind == "new-topic":
        return "topic:new", [("partitions", rng.randint(1, 4))], 0.0
    if kind == "broker-kill":
        target = "broker:leader" if rng.random() < 0.5 else f"broker:{rng.randrange(3)}"
        return target, [], _round(rng.uniform(2.0, 8.0))
    if kind == "broker-freeze":
        # short: the clients see the broker fenced after it thaws (the wedge the reader's stall watch
        # replaces, 15 s on); long: past the stall, the probes fail during the freeze itself
        short = rng.random() < 0.5
        return "broker:any", [], _round(rng.uniform(4.0, 8.0) if short else rng.uniform(17.0, 23.0))
    if kind == "zk-kill":
        target = "zk:leader" if rng.random() < 0.5 else f"zk:{rng.randrange(3)}"
        return target, [], _round(rng.uniform(2.0, 8.0))
    if kind == "zk-quorum-loss":
        pair = sorted(rng.sample(range(3), 2))
        return f"zk:{pair[0]},{pair[1]}", [], _round(rng.uniform(2.0, 2.0 * st))
    if kind == "session-expiry":
        return rng.choice(["node:any", "node:leader"]), [], 0.0
    if kind == "net-zk":
        short = rng.random() < 0.5
        hold = rng.uniform(1.0, 0.6 * st) if short else rng.uniform(st + 1.0, st + 5.0)
        return rng.choice(["node:any", "node:leader"]), [("mode", "blackhole"), ("expires", not short)], _round(hold)
    if kind == "net-kafka":
        return "node:any", [("mode", "blackhole")], _round(rng.uniform(2.0, 10.0))
    if kind == "net-slow":
        group = rng.choice(["kafka", "zookeeper", "all"])
        return rng.choice(["node:any", "node:all"]), [("latency_ms", rng.choice([50, 100, 200, 400])),
                                                     ("group", group)], _round(rng.uniform(4.0, 10.0))
    if kind == "transactions":
        return "producer", [("aborts", rng.randint(2, 5))], 0.0
    if kind == "output-readonly":
        return "output", [], _round(rng.uniform(2.0, 8.0))
    if kind == "output-full":
        return "output", [], _round(rng.uniform(2.0, 8.0))
    if kind == "zk-subtree-lost":
        return "zk:subtree", [("while", rng.choice(["running", "stopped"]))], 0.0
    if kind == "zk-ensemble-replaced":
        return "zk:all", [("down_s", _round(rng.uniform(0.5, 3.0)))], 0.0
    if kind == "zk-rollback":
        return "zk:all", [("epochs", rng.randint(2, 6))], 0.0
    if kind == "lake-rollback":
        return "output", [("epochs", rng.randint(1, 2)), ("records", rng.random() < 0.5)], 0.0
    if kind == "misconfigured-node":
        return "node:new", [("setting", rng.choice(MISCONFIGURED_SETTINGS))], 0.0
    raise ValueError(f"unknown fault kind {kind!r}")


def primaries_per_run(kinds_per_run: int, kind_count: int) -> int:
    """How many primary kinds a run takes: ``kinds_per_run``, at least enough for every kind to be
    drawn within :data:`EVERY_KIND_WITHIN` consecutive seeds, at most every kind."""
    floor = -(-kind_count // EVERY_KIND_WITHIN)
    return min(max(1, kinds_per_run, floor), kind_count)


def _primaries(seed: int, kinds: Sequence[str], kinds_per_run: int) -> list[str]:
    count = primaries_per_run(kinds_per_run, len(kinds))
    return list(dict.fromkeys(kinds[(seed * count + j) % len(kinds)] for j in range(count)))


def _extras(rng: random.Random, primaries: Sequence[str], kinds: Sequence[str], max_extras: int) -> list[str]:
    specs = [SPECS[k] for k in primaries]
    brokers = max(s.brokers for s in specs)
    zk = max(s.zk_servers for s in specs)
    network = any(s.network for s in specs)
    allowed = [k for k in kinds if k not in primaries
               and SPECS[k].brokers <= brokers and SPECS[k].zk_servers <= zk and (network or not SPECS[k].network)]
    count = min(len(allowed), rng.randint(0, max(0, max_extras)))
    return rng.sample(allowed, count)


def plan_run(
    seed: int,
    duration_s: float,
    kinds: Sequence[str] = KINDS,
    node_count: int = 3,
    *,
    session_timeout_s: float = 4.0,
    kinds_per_run: int = 1,
    max_extras: int = 2,
    epoch_s: float = 1.0,
) -> RunPlan:
    """The deterministic plan of one seed's run (see the module docstring for the contract).
    ``epoch_s``: the nodes' epoch interval (the lake kinds' holds are measured in epochs).

    Pre: ``kinds`` non-empty and known, ``node_count >= MIN_LIVE``, ``duration_s > 0``, ``epoch_s > 0``.
    """
    kinds = tuple(kinds)
    if not kinds or any(k not in SPECS for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of {ALL_KINDS}, got {kinds}")
    if epoch_s <= 0:
        raise ValueError(f"epoch_s must be positive, got {epoch_s}")
    if node_count < MIN_LIVE:
        raise ValueError(f"node_count must be >= {MIN_LIVE}, got {node_count}")
    if duration_s <= 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    rng = random.Random(f"laminar-chaos/{seed}")
    primaries = _primaries(seed, kinds, kinds_per_run)
    chosen = primaries + _extras(rng, primaries, kinds, max_extras)
    order = chosen[:]
    rng.shuffle(order)
    members = _Membership(node_count)
    events: list[FaultEvent] = []
    at = _round(rng.uniform(2.0, 4.0))
    queue = list(order)
    while True:
        if queue:
            kind = queue.pop(0)
        elif at < duration_s and len(events) < MAX_EVENTS:
            kind = rng.choice(chosen)
        else:
            break
        target, params, hold = _event(kind, rng, members, session_timeout_s, node_count, epoch_s)
        events.append(FaultEvent(at, kind, target, tuple(params), hold))
        at = _round(at + hold + SPECS[kind].budget_s + MIN_GAP_S + rng.uniform(0.0, 3.0))
    return RunPlan(seed=seed, duration_s=duration_s, node_count=node_count, session_timeout_s=session_timeout_s,
                   kinds=tuple(dict.fromkeys(chosen)), events=tuple(events))


def plan_faults(seed: int, duration_s: float, kinds: Sequence[str] = KINDS, node_count: int = 3, *,
                session_timeout_s: float = 4.0, kinds_per_run: int = 1, max_extras: int = 2,
                epoch_s: float = 1.0) -> list[FaultEvent]:
    """Just the events of :func:`plan_run` (same arguments)."""
    return list(plan_run(seed, duration_s, kinds, node_count, session_timeout_s=session_timeout_s,
                         kinds_per_run=kinds_per_run, max_extras=max_extras, epoch_s=epoch_s).events)


def live_counts(events: Iterable[FaultEvent], node_count: int) -> list[int]:
    """The live node count after each event, as the runner will leave it (for checks and reports)."""
    live = node_count
    counts = []
    for event in events:
        if event.kind in ("node-kill", "kill-leader", "kill-donor", "kill-recipient", "kill-committer"):
            trigger = event.param("trigger")
            live += 1 if trigger == "join" else -1 if trigger == "leave" else 0
            if event.kind == "kill-donor" and trigger == "leave":
                live += 1 if event.param("restart") else 0
            else:
                live -= 0 if event.param("restart") else 1
        elif event.kind in ("leave", "move-hot-partition"):
            live -= 0 if event.param("rejoin") else 1
        elif event.kind == "join":
            live += 0 if event.param("replace") else 1
        elif event.kind == "churn":
            live += sum(1 if s == "join" else -1 for s in event.items("steps"))
        counts.append(live)
    return counts
