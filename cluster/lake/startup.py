"""The start-up reconciliation of the control state with the lake: the I/O around :func:`reconcile`.

Run by every node after :meth:`~laminar_kafka.coordinator.base.Coordinator.connect` and before it joins
(:meth:`~laminar_kafka.coordinator.base.Coordinator.start`), inside the pipeline's reconcile lock, so nodes started
together reconcile one after the other and the later ones find the state the first one left:

1. read the control state's latest manifest and publish it into the lake (publishing trails the
   manifest: an epoch a crash left unpublished is not a lake that is behind);
2. read the lake's facts, then the control state again (:class:`~laminar_kafka.cluster.lake.reconcile.ControlFacts`);
3. decide (:func:`~laminar_kafka.cluster.lake.reconcile.reconcile`, pure);
4. act: REFUSE raises :class:`~laminar_kafka.errors.ConfigurationError` (one line, exit 2), touching nothing;
   RESEED waits until no other member is live (they run on the state being replaced), then rebases
   the control state on the seed (:meth:`~laminar_kafka.coordinator.base.Coordinator.rebase`) and seals the lake
   (:meth:`~laminar_kafka.cluster.lake.outputs.LakeOutput.seal`), in that order: a crash in between leaves a state the next
   start reconciles to the same seed.

The seed's cursors then reach every generation through the control state, exactly as a manifest's do.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from laminar_kafka.cluster.errors import RuntimeFailure, SinkError
from laminar_kafka.cluster.lake.deadline import LakeCalls
from laminar_kafka.cluster.lake.outputs import LakeOutput
from laminar_kafka.cluster.lake.reconcile import Action, ControlFacts, OnLakeBehind, Reconciliation, reconcile
from laminar_kafka.cluster.lake.record import LakeRecord
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.topology import Topology
from laminar_kafka.coordinator.base import Coordinator, Manifest
from laminar_kafka.coordinator.errors import CodecError, CoordinatorError, CoordinatorUnavailable
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["StartFacts", "reconcile_with_lake", "reconcile_before_join"]


@dataclass(frozen=True)
class StartFacts:
    """What the node knows before it joins: its pipeline, the selected topics and their ids now."""

    pipeline: str
    node_id: int
    topics: Sequence[str]
    topic_ids: Mapping[str, str]
    on_lake_behind: OnLakeBehind
    #: how long a reseed waits for other live members to stop
    members_timeout_s: float = 60.0


def _latest(coordinator: Coordinator) -> Manifest | None:
    """The control state's latest manifest; None when it holds none, or names one it lost (a reset
    interrupted by a crash, a subtree partly deleted): then the lake decides."""
    try:
        return coordinator.latest_manifest()
    except CoordinatorUnavailable:
        raise
    except CoordinatorError as exc:
        logger.warning("the control state is incomplete (%s); reconciling with the lake", exc)
        return None


def _pinned_start(coordinator: Coordinator) -> Manifest | None:
    try:
        return coordinator.manifest(0)
    except CoordinatorUnavailable:
        raise
    except CoordinatorError:
        return None


def reconcile_with_lake(
    coordinator: Coordinator,
    lake: LakeOutput,
    facts: StartFacts,
    publish: Callable[[Manifest], object],
    lake_calls: LakeCalls | None = None,
) -> Reconciliation:
    """Reconcile (see the module docstring); blocking. ``publish`` publishes a committed manifest
    into the lake, as the runtime does for every committed epoch. Returns the decision taken.
    ``lake_calls``: where its lake calls (publish, read, seal) are timed for the lake I/O deadline."""
    calls = lake_calls or LakeCalls()
    with coordinator.reconcile_lock():
        first = _latest(coordinator)
        if first is not None and first.epoch > 0:
            try:
                with calls.timing(f"publishing epoch {first.epoch} before reconciling"):
                    publish(first)
            except SinkError as exc:  # the facts below say what the lake holds
                logger.warning("publishing epoch %d before reconciling failed: %s", first.epoch, exc)
        try:
            with calls.timing("reading the lake's facts"):
                lake_facts = lake.read_facts(facts.pipeline, facts.topics)
        except CodecError as exc:
            raise ConfigurationError(f"the lake's record cannot be read: {exc}", cause=exc) from exc
        except Exception as exc:  # an unreadable lake (an object store, a catalog) is one line
            raise RuntimeFailure(f"the lake cannot be read to reconcile with it: {exc!r}", cause=exc) from exc
        latest = _latest(coordinator)
        control = ControlFacts(
            latest, _pinned_start(coordinator) if latest is not None else None,
            published_through=first.epoch if first is not None and latest is not None else 0,
        )
        decision = replace(reconcile(facts.pipeline, control, lake_facts, facts.topic_ids, facts.on_lake_behind),
                           lake_epoch=lake_facts.epoch)
        if decision.action is Action.REFUSE:
            raise ConfigurationError(decision.reason)
        if decision.action is Action.RESEED:
            assert decision.seed is not None
            _wait_for_no_members(coordinator, facts)
            logger.warning("%s", decision.reason)
            seed = decision.seed
            coordinator.rebase(seed)
            with calls.timing("sealing the lake on the seed"):
                lake.seal(LakeRecord(facts.pipeline, seed.epoch, seed.assignment_version, seed.cursors,
                                     {**lake_facts.topic_ids, **facts.topic_ids}), lake_facts.epoch)
            logger.info("control state reseeded at epoch %d; epochs continue from %d", seed.epoch, seed.epoch + 1)
        elif lake_facts.has_records:
            logger.info("control state and lake agree (control epoch %s, lake epoch %d, %s)",
                        latest.epoch if latest is not None else "none", lake_facts.epoch, lake_facts.where)
        return decision


def _wait_for_no_members(coordinator: Coordinator, facts: StartFacts) -> None:
    """A reseed replaces the state live members run on: wait (bounded) until none is left. This
    node's own id is not waited for: an entry of its previous process (killed, its session not yet
    expired) runs nothing, and an embedded coordinator always lists its one node."""
    deadline = time.monotonic() + facts.members_timeout_s
    logged = False
    while True:
        live = sorted(m.node_id for m in coordinator.members() if m.node_id != facts.node_id)
        if not live:
            return
        if time.monotonic() >= deadline:
            raise RuntimeFailure(
                f"the control state must be reseeded from the lake, but node(s) {', '.join(map(str, live))} "
                f"still run on it after {facts.members_timeout_s:.0f}s: stop them, then start the nodes again")
        if not logged:
            logger.warning("the control state must be reseeded from the lake; waiting for node(s) %s to stop",
                           ", ".join(map(str, live)))
            logged = True
        time.sleep(1.0)


async def reconcile_before_join(context: RuntimeContext, lake: LakeOutput, topology: Topology,
                                publish: Callable[[Manifest], object],
                                check_settings: Callable[[Coordinator], None] | None = None) -> Reconciliation:
    """:func:`reconcile_with_lake` of ``lake`` for a node's runtime, on its control executor: after
    ``Coordinator.connect()``, before ``start()``; ``topology`` is the topics as the node first read them.
    ``check_settings`` first compares the node's settings with the pinned ones (raising on a mismatch):
    a node pointed at another output must never judge the pipeline's lake, let alone reseed from it."""
    options = context.options
    if check_settings is not None:
        await context.executors.in_control(check_settings, context.coordinator)
    facts = StartFacts(options.pipeline, options.node_id, sorted(topology.topics), topology.ids(),
                       options.on_lake_behind)
    decision = await context.executors.in_control(reconcile_with_lake, context.coordinator, lake, facts,
                                                  publish, context.executors.lake_calls)
    metrics = context.metrics
    metrics.lake_reconciliations.labels(metrics.node, decision.action.value).inc()
    metrics.lake_epoch.labels(metrics.node).set(decision.lake_epoch)
    return decision
