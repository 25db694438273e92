"""The events of the CDC pipeline's fault kinds (:data:`laminar_kafka.chaos.kinds.CDC_KINDS`), for
the planner (:mod:`laminar_kafka.chaos.plan`). Pure: no I/O, no clock; the planner's seeded random
generator draws every parameter.

- ``kill-committer``: target ``node:committer``; ``delay_s`` (0-0.4 s) after an epoch's manifest is
  committed, the node whose turn it is to commit that epoch's tables is SIGKILLed; ``restart`` and
  ``restart_after_s`` as for the other kills (restarted when the floor of live nodes needs it).
- ``compact-during-upserts``: target ``table:any``; ``passes`` (1-3) compactions one after the other.
- ``hot-keys``: target ``keys``; ``keys`` (1-8) keys take ``share`` (0.5-0.9) of the production for
  the hold (5-12 epochs), with deletes and re-creations when ``deletes``.
- ``move-hot-partition``: target ``partition:any``; ``keys`` (5-20) keys of one partition take most
  of the production; ``lead_s`` (1.5-3 epochs) later the partition's owner leaves (SIGTERM), the burst
  goes on for the hold (3-6 s); with ``rejoin`` (when the floor of live nodes needs it) a new node
  joins once the leaver exited.
"""
from __future__ import annotations

import random
from typing import Protocol

__all__ = ["Members", "cdc_event"]

Param = tuple[str, object]


class Members(Protocol):
    """The planner's live node count (see :mod:`laminar_kafka.chaos.plan`)."""

    live: int

    def can_remove(self) -> bool: ...

    def can_add(self) -> bool: ...


def _round(value: float) -> float:
    return round(value, 2)


def cdc_event(kind: str, rng: random.Random, members: Members, epoch_s: float) -> tuple[str, list[Param], float]:
    """(target, params, hold_s) of one event of a CDC kind; updates the membership count like the
    planner's other kinds (a kill keeps its victim dead only when the floor allows it; a leave at the
    floor is followed by a join). Raises ValueError for another kind."""
    if kind == "kill-committer":
        restart = (not members.can_remove()) or rng.random() < 0.5
        if not restart:
            members.live -= 1
        return "node:committer", [("delay_s", _round(rng.uniform(0.0, 0.4))), ("restart", restart),
                                  ("restart_after_s", _round(rng.uniform(0.5, 3.0)))], 0.0
    if kind == "compact-during-upserts":
        return "table:any", [("passes", rng.randint(1, 3))], 0.0
    if kind == "hot-keys":
        params: list[Param] = [("keys", rng.randint(1, 8)), ("share", _round(rng.uniform(0.5, 0.9))),
                               ("deletes", rng.random() < 0.5)]
        return "keys", params, _round(rng.uniform(5.0, 12.0) * epoch_s)
    if kind == "move-hot-partition":
        rejoin = not members.can_remove()
        if not rejoin:
            members.live -= 1
        return "partition:any", [("keys", rng.randint(5, 20)), ("lead_s", _round(rng.uniform(1.5, 3.0) * epoch_s)),
                                 ("rejoin", rejoin)], _round(rng.uniform(3.0, 6.0))
    raise ValueError(f"unknown fault kind {kind!r}")
