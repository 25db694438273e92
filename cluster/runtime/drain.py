"""Drain rounds as one node takes part in them: begin, watch, report, resolve.

``RoundStarted``: ``begin_drain`` with the round's deadline (a refusal, :class:`DrainError`, is
retried every turn until the deadline), ``poll_drain_ready`` every turn, then
``report_drain_ready``. ``RoundDecided``: ``finish_drain`` with the decision and, on a commit,
the handoff cursors of the manifest that holds the cut, so a gaining node takes its partitions
without restarting its source. A node without a source generation has nothing to drain and
reports ready at once.

Errors: a :class:`FatalError` from the connector retires the generation (in :meth:`DrainRounds.check`
it propagates to the runtime's turn, which does the same); ``finish_drain`` is cancelled shortly
after its deadline, and the generation's cancellation policy applies: ``RETIRE_CONNECTOR`` retires
it, a ``CANCEL_SAFE`` generation gets the same resolution again at the next turn.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from laminar_kafka.cluster.runtime.acquisition import AssignmentFollower
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.generation import CallCancelled, Generations, SourceGeneration, bounded
from laminar_kafka.cluster.runtime.state import CANCEL_GRACE_S, ActiveRound, RoundProgress
from laminar_kafka.connector.errors import ConnectorError, DrainError, FatalError
from laminar_kafka.connector.protocol import SourceDrainOutcome, SourceDrainRequest, SourceDrainResolution
from laminar_kafka.coordinator.base import RoundDecided, RoundOutcome, RoundStarted
from laminar_kafka.coordinator.errors import CoordinatorError, RoundError
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["DrainRounds", "PendingResolution"]


@dataclass(frozen=True)
class PendingResolution:
    """A decided round this node still has to apply to its source (``handoff``: commit cursors)."""

    resolution: SourceDrainResolution
    handoff: dict[str, int] | None


class DrainRounds:
    """The round this node drains for, and the resolution it still owes its source."""

    def __init__(self, context: RuntimeContext, assignment: AssignmentFollower, generations: Generations) -> None:
        self._context = context
        self._assignment = assignment
        self._generations = generations
        self.active: ActiveRound | None = None
        #: a decision whose ``finish_drain`` was cancelled under ``CANCEL_SAFE``: applied again next turn
        self.unresolved: PendingResolution | None = None
        #: the latest resolution applied committed (consumed by the next assignment change)
        self.committed_in_place = False
        #: when the latest round started (the handoff clock of partitions gained by it)
        self.round_started_at: float | None = None

    # -- begin, watch, report ---------------------------------------------------------------------

    async def started(self, event: RoundStarted) -> None:
        """``RoundStarted``: show the target to the sources, then begin draining (or report ready
        at once without a generation). A fatal refusal retires the generation; its successor
        begins the round again."""
        self._assignment.round_started(event)
        try:
            await self._start(event, self._generations.current)
        except FatalError as exc:
            await self._generations.failed(exc)

    async def _start(self, event: RoundStarted, generation: SourceGeneration | None) -> None:
        self.round_started_at = time.monotonic()
        if generation is None:
            await self._report_ready(event.drain_id)  # nothing to drain here
            return
        deadline = time.monotonic() + max(0.0, event.deadline_unix_ms / 1000.0 - time.time())
        self.active = ActiveRound(event.drain_id, deadline, time.monotonic())
        await self._begin(generation)

    async def _begin(self, generation: SourceGeneration) -> bool:
        """``begin_drain`` for the active round; False while the source refuses it (retried next turn)."""
        round_ = self.active
        assert round_ is not None
        if round_.progress is not RoundProgress.ANNOUNCED:
            return True
        try:
            generation.connector.begin_drain(SourceDrainRequest(round_.drain_id), round_.deadline)
        except DrainError as exc:
            logger.info("drain %s refused for now: %s", round_.drain_id, exc)
            return False
        self.active = round_.advanced(RoundProgress.BEGUN)
        return True

    async def check(self, generation: SourceGeneration) -> None:
        """One turn of the active round: begin it if not begun, report it once drained."""
        round_ = self.active
        assert round_ is not None
        if round_.progress is RoundProgress.REPORTED:
            return
        if round_.progress is RoundProgress.ANNOUNCED:
            if time.monotonic() > round_.deadline:
                logger.warning("drain %s could not begin before its deadline", round_.drain_id)
                self.active = None
                return
            if not await self._begin(generation):
                return
        try:
            ready = generation.connector.poll_drain_ready(round_.drain_id)
        except DrainError as exc:
            logger.warning("drain %s is not this source's round any more: %s", round_.drain_id, exc)
            self.active = None
            return
        if ready:
            metrics = self._context.metrics
            metrics.drain_seconds.labels(metrics.node).observe(time.monotonic() - round_.started)
            if await self._report_ready(round_.drain_id):
                self.active = round_.advanced(RoundProgress.REPORTED)

    async def _report_ready(self, drain_id: AssignmentDrainId) -> bool:
        """Tell the leader this node is drained; False when it was not recorded (asked again next turn)."""
        context = self._context
        try:
            await context.executors.in_control(context.coordinator.report_drain_ready, drain_id)
            return True
        except RoundError as exc:
            logger.info("drain %s no longer running: %s", drain_id, exc)
            return False
        except CoordinatorError as exc:  # transient: check() reports again next turn
            logger.warning("drain %s ready report failed: %s", drain_id, exc)
            return False

    def generation_retired(self) -> None:
        """The source generation is gone: its successor begins the active round again (unless
        already reported); a resolution owed to it is void."""
        if self.active is not None:
            self.active = self.active.for_next_generation()
        self.unresolved = None

    def forget_membership(self) -> None:
        self.active = None
        self.unresolved = None

    # -- decide -----------------------------------------------------------------------------------

    async def decided(self, event: RoundDecided) -> None:
        """``RoundDecided``: resolve the round in the running generation (a commit with the
        handoff cursors of the manifest that holds the cut)."""
        resolution = self._decide(event)
        self._assignment.round_decided(event.drain_id)
        generation = self._generations.current
        if resolution is None or generation is None:
            return
        manifest = None
        if resolution.outcome is SourceDrainOutcome.COMMIT:
            manifest = await self._assignment.manifest_or_latest(event.manifest_epoch)
        handoff: dict[str, int] | None = None
        if manifest is not None:
            handoff = dict(manifest.cursors.get(self._context.source_identity, {}))
        await self._resolve(generation, PendingResolution(resolution, handoff))

    async def apply_unresolved(self, generation: SourceGeneration) -> None:
        """Apply again a resolution whose ``finish_drain`` was cancelled (a ``CANCEL_SAFE`` generation)."""
        if self.unresolved is not None:
            await self._resolve(generation, self.unresolved)

    async def _resolve(self, generation: SourceGeneration, pending: PendingResolution) -> None:
        """``finish_drain``; its failure retires the generation (a cancellation: by its policy)."""
        try:
            await self._apply(generation, pending)
        except CallCancelled as exc:
            await self._generations.failed(exc, retire=generation.retired_by_cancellation)
        except FatalError as exc:
            await self._generations.failed(exc)
        except (ConnectorError, ConfigurationError) as exc:
            logger.warning("finish_drain failed: %s; restarting from the manifest", exc)
            await self._generations.failed(exc)

    def _decide(self, event: RoundDecided) -> SourceDrainResolution | None:
        """``RoundDecided``: the resolution to apply to the source, or None when this node did not
        begin that round's drain (nothing of it to resolve)."""
        self._context.metrics.rounds.labels(self._context.node_label, event.outcome.value).inc()
        round_, self.active = self.active, None
        if event.outcome is RoundOutcome.ABORT:
            self.round_started_at = None
        if round_ is None or round_.drain_id != event.drain_id or round_.progress is RoundProgress.ANNOUNCED:
            return None
        outcome = SourceDrainOutcome.COMMIT if event.outcome is RoundOutcome.COMMIT else SourceDrainOutcome.ABORT
        return SourceDrainResolution(event.drain_id, outcome)

    async def _apply(self, generation: SourceGeneration, pending: PendingResolution) -> None:
        """Apply ``pending`` to ``generation``; on a cancellation it stays owed (the runtime decides
        by the generation's policy whether it is applied again or the generation retired)."""
        timeout = self._context.options.finish_drain_timeout_s
        deadline = time.monotonic() + timeout
        connector, resolution = generation.connector, pending.resolution
        what = f"finish_drain({resolution.outcome.value})"
        self.unresolved = pending
        try:
            await bounded(connector.finish_drain(resolution, deadline, pending.handoff), timeout + CANCEL_GRACE_S, what)
        except DrainError as exc:
            if pending.handoff is None:
                raise
            # the manifest lacks a gained partition: commit without handoff cursors; the source
            # then waits for them and the cursor offers supply the latest manifest's
            logger.warning("handoff cursors refused (%s); committing without them", exc)
            await bounded(connector.finish_drain(resolution, deadline), timeout + CANCEL_GRACE_S, what)
        self.unresolved = None
        self.committed_in_place = resolution.outcome is SourceDrainOutcome.COMMIT
