"""What becomes of one node's source generation: a new assignment version retires it or lets it
acquire partitions in place, and the next one starts from the latest durable manifest.

- A version not newer than the one adopted is ignored (unless a rejoin forces a restart).
- Owning no partition: the generation is retired (a planned leave is complete once the node owns no
  vnode either).
- Embedded mode (no vnodes: one node reads everything): a generation starts if none runs.
- Partitions lost without a committed drain, a forced restart, or no generation running: the
  generation is retired, and the runtime starts the next one from the latest manifest.
- Otherwise partitions gained are acquired in place: at the handoff cursors of a committed drain,
  or offered from the manifest when the source waits for explicit cursors.

A live handoff's pause (the round's start to the first row written here) starts on the gained
partitions (:class:`~laminar_kafka.cluster.runtime.measures.HandoffClock`).

A generation starts (:meth:`Reassignment.restart_from_manifest`) when this node owns partitions but
runs no source, and every epoch it acked is committed: a generation started from an older manifest
would read the acked rows again while the epoch can still commit them.
"""
from __future__ import annotations

import logging

from laminar_kafka.cluster.runtime.acquisition import AssignmentFollower
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.drain import DrainRounds
from laminar_kafka.cluster.runtime.epochs import EpochBarriers
from laminar_kafka.cluster.runtime.generation import Generations
from laminar_kafka.cluster.runtime.measures import HandoffClock
from laminar_kafka.cluster.runtime.topology_follower import TopologyFollower
from laminar_kafka.coordinator.base import AssignmentChanged

logger = logging.getLogger(__name__)

__all__ = ["Reassignment"]


class Reassignment:
    """Adopts assignment versions and starts generations for one node's runtime (its parts, shared
    with the runtime)."""

    def __init__(self, context: RuntimeContext, assignment: AssignmentFollower, generations: Generations,
                 rounds: DrainRounds, epochs: EpochBarriers, topology: TopologyFollower,
                 handoff_clock: HandoffClock) -> None:
        self._context = context
        self._assignment = assignment
        self._generations = generations
        self._rounds = rounds
        self._epochs = epochs
        self._topology = topology
        self._handoff_clock = handoff_clock

    async def adopt(self, event: AssignmentChanged, *, force_restart: bool = False, leaving: bool = False) -> bool:
        """Take ``event``'s version (see the module docstring). Returns True when a planned leave
        (``leaving``) is complete: at this version the node owns no vnode."""
        assignment, generations, rounds = self._assignment, self._generations, self._rounds
        snapshot, current = event.snapshot, assignment.snapshot
        if current is not None and snapshot.version <= current.version and not force_restart:
            return False
        previous = assignment.owned if generations.current is not None else frozenset()
        self._epochs.close_version(snapshot.version)
        assignment.adopt(snapshot, event.manifest_epoch, self._topology.partitions)
        owned = assignment.owned
        committed_in_place, rounds.committed_in_place = rounds.committed_in_place, False
        round_started, rounds.round_started_at = rounds.round_started_at, None
        metrics = self._context.metrics
        owned_gauge = metrics.owned_partitions.labels(metrics.node)
        if owned is not None and not owned:
            if generations.current is not None:
                logger.info("version %d: this node owns no partition; closing its source", snapshot.version)
                await generations.retire()
            owned_gauge.set(0)
            if leaving and not snapshot.vnodes_of(self._context.options.node_id):
                logger.info("planned leave complete at version %d", snapshot.version)
                return True
            return False
        owned_gauge.set(len(owned) if owned is not None else len(self._topology.partitions))
        if owned is None:  # embedded: one node reads everything
            if generations.current is None or force_restart:
                await generations.retire()  # the runtime's next turn starts the next generation
            return False
        gained = owned - (previous or frozenset())
        lost = (previous or frozenset()) - owned
        if generations.current is None or force_restart or (lost and not committed_in_place):
            logger.info(
                "version %d: %d partition(s) owned, %d acquired, %d released; starting a source generation",
                snapshot.version, len(owned), len(gained), len(lost),
            )
            await generations.retire()  # the next turn starts the next generation from the latest manifest
        elif gained:
            # acquired in place: at the handoff cursors of a committed drain, or offered from
            # the manifest when the source waits for explicit cursors
            logger.info(
                "version %d: %d partition(s) owned, %d acquired in place, %d released",
                snapshot.version, len(owned), len(gained), len(lost),
            )
            await assignment.offer_cursors(generations.current, generations.is_current)
        if round_started is not None:  # a live handoff: the pause lasts until the first row here
            self._handoff_clock.start(gained, round_started)
        return False

    def needs_generation(self) -> bool:
        """Whether a source generation should start now (the runtime asks while it runs): see the
        module docstring."""
        assignment = self._assignment
        if assignment.snapshot is None:
            return False
        owned = assignment.owned
        if not self._generations.may_start() or (owned is not None and not owned):
            return False
        return not self._epochs.awaits_commit()

    async def restart_from_manifest(self) -> None:
        """Start a generation at the latest durable manifest's cursors (the truth for recovery:
        a later manifest carries every partition's cursor), publishing that manifest first."""
        context, epochs = self._context, self._epochs
        await self._generations.retire()
        manifest = await context.executors.in_control(context.coordinator.latest_manifest)
        epochs.check_not_behind(manifest)  # never go on from an older truth
        if manifest is not None and manifest.epoch > epochs.latest_committed_epoch:
            await epochs.publish(manifest)
        await self._generations.start(self._assignment.registry, manifest)
