"""Reconcile on every start: the control state and the lake in, one decision out. Pure, no I/O.

The lake is the durable truth (docs/settings.md); ZooKeeper or the embedded state directory only
coordinates. Before a node joins, :mod:`laminar_kafka.cluster.lake.startup` gathers the facts (the control state's
latest manifest, the lake's latest epoch and cursors, the topics' ids) and :func:`reconcile` decides:

=====================================  =======================================================
facts                                  decision
=====================================  =======================================================
the lake holds another pipeline        REFUSE (one line)
a topic's id differs lake / Kafka      REFUSE: the topic was re-created, its offsets restarted
the lake lost epochs between kept ones REFUSE: no cursor lands them without landing others twice
no control state, empty lake           START_FRESH: resolve and pin the start (epoch 0)
no control state, rows but no record   REFUSE: where the rows end is unknown
no control state, lake has epochs      RESEED from the lake (one WARNING line)
a RESEED, latest epoch partly landed   REFUSE (routed tables: some hold the epoch, some not)
control and lake agree                 CONTINUE
control behind the lake                RESEED: advance to the lake (ZooKeeper restored from a backup)
lake behind control, ``rewind``        RESEED: rewind to the lake, so nothing is missing
lake behind control, ``fail``          REFUSE (one line), the lake untouched
=====================================  =======================================================

A reseed writes a new control state whose only manifest is the seed: epoch ``S`` above every epoch
either side ever used (so no epoch number, file name or Iceberg commit is reused), cursors = the
lake's for every partition the lake knows, else the pinned start's, else none (its first offset).

"Behind" needs care, because publishing trails the manifest: the adapter first publishes the control
state's latest epoch ``published_through`` into the lake, then reads the lake, then reads the control
state again (``control``). A lake that keeps a record of every epoch (``dense``: the Parquet tree) is
behind when its latest complete epoch is below ``published_through``; any lake is behind when it
shows an epoch it recorded and lost (``rolled_back_from``: a record whose files are gone, an Iceberg
table whose current snapshot is older than the pipeline's last commit into it). The control state is
behind when the lake shows a later epoch than it, or a partition further on than it.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar_kafka.coordinator.codec import Cursors
from laminar_kafka.coordinator.values import Manifest

__all__ = ["OnLakeBehind", "ControlFacts", "LakeFacts", "Action", "Reconciliation", "reconcile"]


class OnLakeBehind(enum.Enum):
    """What a node does when the lake is behind the control state (setting ``on-lake-behind``)."""

    #: re-read from the lake's cursors: every record the lake lost lands again, none twice
    REWIND = "rewind"
    #: refuse to start, touching nothing, so an operator can restore the lake first
    FAIL = "fail"


@dataclass(frozen=True)
class ControlFacts:
    """The control state as read at start. ``latest``: the newest manifest (or the pinned start);
    None when the control state holds nothing. ``pinned_start``: manifest 0, the resolved start."""

    latest: Manifest | None
    pinned_start: Manifest | None = None
    #: the epoch the adapter published into the lake before reading it (0: nothing published)
    published_through: int = 0


@dataclass(frozen=True)
class LakeFacts:
    """What the lake shows of the pipeline (see the module docstring)."""

    #: the latest epoch complete in the lake (0: none)
    epoch: int = 0
    #: the highest epoch number the lake ever recorded (>= epoch)
    high_epoch: int = 0
    #: the cursors of the epoch(s) the lake shows (per table for Iceberg, merged)
    cursors: Cursors = field(default_factory=dict)
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    #: pipelines other than this one whose records the lake holds
    other_pipelines: tuple[str, ...] = ()
    #: every epoch leaves a record (Parquet tree); an Iceberg table is committed only with rows
    dense: bool = True
    #: the highest epoch the lake recorded and no longer shows (0: none lost)
    rolled_back_from: int = 0
    #: the lake holds records of this pipeline
    has_records: bool = False
    #: the lake holds published rows (with or without records: an older version wrote none)
    has_data: bool = False
    #: why the lake cannot be continued from at all ("" when it can): epochs lost between kept ones
    hole: str = ""
    #: where the facts were read, for log lines ("record _laminar/epochs/epoch-0000000042.json")
    where: str = ""
    #: why the lake's latest epoch is only partly there ("" when whole): a routed pipeline's epoch
    #: committed into some of its tables only. Continuing needs the control state; a reseed is refused
    partial: str = ""


class Action(enum.Enum):
    START_FRESH = "start-fresh"
    CONTINUE = "continue"
    RESEED = "reseed"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Reconciliation:
    """The decision: ``reason`` is one line for the log (WARNING for a reseed) or the refusal;
    ``seed`` the manifest a RESEED pins (epoch S, no outputs, no acks)."""

    action: Action
    reason: str = ""
    seed: Manifest | None = None
    #: the latest epoch the lake showed
    lake_epoch: int = 0


def reconcile(
    pipeline: str,
    control: ControlFacts,
    lake: LakeFacts,
    topic_ids: Mapping[str, str],
    on_lake_behind: OnLakeBehind,
) -> Reconciliation:
    """The decision for ``pipeline`` given the facts (see the module docstring); ``topic_ids`` are the
    ids Kafka shows now for the selected topics. A RESEED from a lake whose latest epoch is only
    partly there (``lake.partial``) is refused instead: no cursor lands the rest exactly."""
    decision = _decide(pipeline, control, lake, topic_ids, on_lake_behind)
    if decision.action is Action.RESEED and lake.partial:
        return Reconciliation(Action.REFUSE, (
            f"pipeline {pipeline!r} cannot resume from its lake exactly: {lake.partial} (a node stopped between "
            "one epoch's table commits, and the control state that would finish them is gone); restore the control "
            "state, or roll those tables back to their snapshot before that epoch and start again"))
    return decision


def _decide(
    pipeline: str,
    control: ControlFacts,
    lake: LakeFacts,
    topic_ids: Mapping[str, str],
    on_lake_behind: OnLakeBehind,
) -> Reconciliation:
    if lake.other_pipelines:
        return Reconciliation(Action.REFUSE, (
            f"the lake holds epochs of pipeline {lake.other_pipelines[0]!r}, not {pipeline!r} ({lake.where}): "
            "give each pipeline its own output, or run this node as that pipeline"))
    if lake.hole:
        return Reconciliation(Action.REFUSE, f"the lake of pipeline {pipeline!r} has a hole: {lake.hole}")
    for topic in sorted(set(lake.topic_ids) & set(topic_ids)):
        if lake.topic_ids[topic] != topic_ids[topic]:
            return Reconciliation(Action.REFUSE, (
                f"topic {topic!r} has id {topic_ids[topic]} in Kafka but the lake landed id {lake.topic_ids[topic]} "
                "(the topic was deleted and re-created, its offsets restarted): land it as a new pipeline"))

    latest = control.latest
    if latest is None:
        if not lake.has_records and lake.has_data:
            return Reconciliation(Action.REFUSE, (
                f"pipeline {pipeline!r} has no control state, and its lake holds rows but no record of where they "
                "end (written before lake records existed, or by another tool): starting over would land them "
                "twice; restore the control state, or land into an empty output"))
        if not lake.has_records:
            return Reconciliation(Action.START_FRESH)
        seed = _seed(_seed_epoch(0, lake), lake.cursors)
        return Reconciliation(Action.RESEED, (
            f"no control state for pipeline {pipeline!r}: resuming from the lake at epoch {lake.epoch} "
            f"({lake.where}), {_count(lake.cursors)} partition cursor(s)"), seed)

    behind = _lake_behind(control, lake)
    ahead = _lake_ahead(latest, lake)
    if behind:
        if on_lake_behind is OnLakeBehind.FAIL:
            return Reconciliation(Action.REFUSE, (
                f"the lake is behind the control state of pipeline {pipeline!r}: {behind} "
                "(on-lake-behind=fail): restore the lake, or start with on-lake-behind=rewind to land the "
                "missing epochs again"))
        start: Cursors = control.pinned_start.cursors if control.pinned_start is not None else {}
        cursors = _overlay(_known(latest.cursors, start), lake.cursors)
        return Reconciliation(Action.RESEED, (
            f"the lake is behind the control state of pipeline {pipeline!r}: {behind}; rewinding to the lake's "
            f"cursors ({lake.where or 'no record'}) so nothing is missing"),
            _seed(_seed_epoch(latest.epoch, lake), cursors))
    if ahead:
        return Reconciliation(Action.RESEED, (
            f"the control state of pipeline {pipeline!r} is behind the lake: {ahead}; advancing to the lake's "
            f"cursors ({lake.where})"),
            _seed(_seed_epoch(latest.epoch, lake), _overlay(latest.cursors, lake.cursors)))
    return Reconciliation(Action.CONTINUE)


def _lake_behind(control: ControlFacts, lake: LakeFacts) -> str:
    """Why the lake is behind the control state ("" when it is not)."""
    if lake.rolled_back_from > lake.epoch:
        return f"it recorded epoch {lake.rolled_back_from} but shows epoch {lake.epoch}"
    if not lake.dense or control.published_through == 0:
        return ""
    if not lake.has_records:
        if lake.has_data:  # rows landed before lake records existed: nothing to compare with
            return ""
        return f"the control state committed epoch {control.published_through} but the lake holds no epoch"
    if lake.epoch < control.published_through:
        return f"the control state committed epoch {control.published_through} but the lake shows epoch {lake.epoch}"
    return ""


def _lake_ahead(latest: Manifest, lake: LakeFacts) -> str:
    """Why the control state is behind the lake ("" when it is not)."""
    if lake.epoch > latest.epoch:
        return f"its latest epoch is {latest.epoch}, the lake shows epoch {lake.epoch}"
    for source, cursors in sorted(lake.cursors.items()):
        mine = latest.cursors.get(source, {})
        for key, offset in sorted(cursors.items()):
            if offset > mine.get(key, -1):
                return f"partition {key} is at offset {mine.get(key, 'none')} there, {offset} in the lake"
    return ""


def _seed_epoch(control_epoch: int, lake: LakeFacts) -> int:
    """Above every epoch number either side used: nothing is named or committed twice."""
    return max(control_epoch, lake.epoch, lake.high_epoch, lake.rolled_back_from) + 1


def _known(cursors: Cursors, start: Cursors) -> dict[str, dict[str, int]]:
    """For every partition of ``cursors``: the pinned start's cursor, or none (its first offset)."""
    return {s: {k: start[s][k] for k in c if k in start.get(s, {})} for s, c in cursors.items()}


def _overlay(base: Cursors, top: Cursors) -> dict[str, dict[str, int]]:
    merged = {s: dict(c) for s, c in base.items()}
    for source, cursors in top.items():
        merged.setdefault(source, {}).update(cursors)
    return merged


def _seed(epoch: int, cursors: Cursors) -> Manifest:
    """The manifest a reseed pins: epoch ``epoch``, ``cursors``, no outputs, no acks."""
    return Manifest(epoch=epoch, assignment_version=0, cursors={s: dict(c) for s, c in cursors.items()})


def _count(cursors: Cursors) -> int:
    return sum(len(c) for c in cursors.values())
