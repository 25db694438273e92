"""The vnode driver: decides the ownership changes of one source generation in vnode mode.

One :class:`VnodeDriver` per generation. It pins the start to the published assignment,
reconciles with each later publication (releasing and acquiring partitions, with explicit cursors
offered by the runtime), routes partitions that appear in the topology, and runs drains (begin,
readiness, resolution). The pure state machine is :mod:`laminar_kafka.connector.ownership`; the execution of
its plans on the reader thread is :mod:`laminar_kafka.kafka_source.vnode.assignment`. Never blocks; the only
coroutine is :meth:`VnodeDriver.finish_drain`, which awaits the reader up to the resolution's deadline.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, DrainError, FatalError
from laminar_kafka.connector.ownership import Ownership, Reconcile, route_partitions
from laminar_kafka.connector.protocol import SourceDrainOutcome, SourceDrainRequest, SourceDrainResolution
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.vnode.assignment import AssignmentExecutor, VnodeBinding, cursor_offsets

logger = logging.getLogger(__name__)

__all__ = ["VnodeBinding", "VnodeDriver"]


class VnodeDriver(AssignmentExecutor):
    """Vnode ownership of one generation: start pinning, reconciliation with the published
    assignment, topology growth, explicit acquisitions and drains (executed by
    :class:`~laminar_kafka.kafka_source.vnode.assignment.AssignmentExecutor`).

    Set before ``start`` (the usual case), the start assigns only the partitions owned in the
    snapshot published at that moment (the pinned version): a Resume checkpoint's other partitions
    are ignored (this node reports only what it owns) and owned partitions it lacks start at their
    low watermark. Set after ``start``, the partitions not owned stop being emitted at once and are
    released by :meth:`drive`. The partition set is listed at ``start``; later partitions arrive
    through :meth:`add_partitions` (the reader does not look for them itself in vnode mode).
    """

    # -- start ----------------------------------------------------------------------------------

    def pin(self, offsets: Mapping[TopicPartitionId, int]) -> dict[TopicPartitionId, int]:
        """Pin to the published snapshot; the start ``offsets`` of the partitions owned there.

        Raises :class:`~laminar_kafka.connector.errors.UnassignedVnodeError` for an invalid owner map.
        """
        binding = self.binding
        routes = route_partitions(binding.source_identity, list(offsets), binding.registry.vnode_count)
        own = Ownership.at(binding.self_id, routes, binding.registry.snapshot())
        owned = {tp: o for tp, o in offsets.items() if tp in own.owned}
        self.own = own.started(frozenset(owned))
        return owned

    def adopt_running(self, cursor: Mapping[TopicPartitionId, int]) -> dict[TopicPartitionId, int]:
        """Vnode mode set after start: pin with ``cursor``'s partitions live; the partitions not
        owned stop being emitted at once (and are released by :meth:`drive`). Returns the
        cursor restricted to the owned partitions."""
        live = frozenset(cursor)
        binding = self.binding
        routes = route_partitions(binding.source_identity, list(live), binding.registry.vnode_count)
        own = Ownership.at(binding.self_id, routes, binding.registry.snapshot()).started(live)
        self.own = own
        self.dropping = self.dropping | (live - own.owned)
        return {tp: o for tp, o in cursor.items() if tp in own.owned}

    # -- reconciliation -------------------------------------------------------------------------

    def is_ready(self) -> bool:
        """True iff the live consumer assignment equals the partitions owned at the published
        version and this source is pinned to it (always True without vnode mode).

        False before :meth:`start`, while an ownership change runs on the reader thread, while
        owned partitions wait for explicit cursors, and between a committed drain and the
        publication of its target. Raises :class:`FatalError` once the generation failed or the
        published map contradicts the pinned one.
        """
        self._check_alive()
        own = self._require_own()
        if self._change is not None:
            return False
        try:
            return own.is_ready(self.registry.snapshot())
        except FatalError as exc:
            self.fail(str(exc))
            raise

    def drive(self) -> None:
        """Advance reconciliation with the published assignment without blocking; never raises
        (a failure surfaces from the next :meth:`checkpoint_ready` / :meth:`poll_batch`).

        Observes finished reader-thread work, consumes control markers at the FIFO head, and when
        the published version moved (and no drain is active) submits one assignment change: it
        releases the live partitions not owned any more (or that changed owner in between: a
        self -> other -> self move) and acquires gained partitions at the cursors offered by
        :meth:`acquire_partitions` for exactly that version. A change that touches no partition
        only moves the pinned version.
        """
        own = self.own
        if own is None or self.failure is not None:
            return
        try:
            self._set_own(own.expire(time.monotonic()))
            self._observe_pause()
            self.consume_head_controls()
            change = self._change
            if change is not None:
                if not change.future.done() or not isinstance(change.plan, Reconcile):
                    return
                self._apply(change.future.result())
            if self.failure is not None:
                return
            self._route_new_partitions()
            own = self._require_own()
            plan = own.plan_reconcile(self.registry.snapshot(), self._offer)
            if plan is None:
                return
            self._metrics.reconciliations += 1
            if not plan.needs_consumer:
                self._set_own(own.reconciled(plan, {}))
                logger.info("kafka source pinned to assignment version %d (no partition moved)", plan.version)
                return
            logger.info(
                "kafka source reconciling to version %d: releasing %d, acquiring %d partition(s)",
                plan.version, len(plan.release), len(plan.acquire),
            )
            self._submit(plan, release=plan.release, acquire=plan.acquire)
        except (ConnectorError, ConfigurationError) as exc:
            self.fail(f"reconciliation failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reader-thread failure; surfaced as terminal
            self.fail(f"reconciliation failed: {exc!r}")

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """New partitions (selected, not read yet) join the routing table.

        The ones whose vnode this node owns become owned and pending: :meth:`is_ready` turns
        False and :meth:`acquisition_needed` names them until :meth:`acquire_partitions` offers
        their cursors for the published version (a partition the offer lacks starts at its first
        offset). They join the table only while no round is active and the source is pinned to
        the published version; until then they wait and :meth:`drive` adds them.
        """
        wanted = frozenset(partitions) - frozenset(self._require_own().routes)
        if wanted:
            self._unrouted = self._unrouted | wanted
            self._offer = None  # offered before the growth: the runtime offers the latest cursors again

    def _route_new_partitions(self) -> None:
        own, unrouted = self.own, self._unrouted
        if not unrouted or own is None or self._change is not None:
            return
        snapshot = self.registry.snapshot()
        if not own.can_route_more(snapshot):
            return
        routes = route_partitions(self.binding.source_identity, unrouted, snapshot.vnode_count)
        grown = own.with_partitions(routes, snapshot)
        self._unrouted = frozenset()
        gained = grown.owned - own.owned
        self._set_own(grown)
        self._metrics.partitions_discovered += len(unrouted)
        logger.info(
            "kafka source routed %d new partition(s) at version %d; %d owned here: %s",
            len(unrouted), snapshot.version, len(gained), sorted(gained),
        )

    def acquire_partitions(self, cursors: Mapping[str, int] | SourceCheckpoint, version: int) -> None:
        """Offer explicit start cursors for partitions acquired *without* a drain at ``version``.

        Use it when the published ``version`` gives this node partitions it does not read (a dead
        node's vnodes, a first assignment after start, a partition that left and came back, or a
        committed drain whose handoff cursors were not passed to :meth:`finish_drain`).
        ``cursors`` maps ``"topic:partition"`` to the next offset to read, normally the cursors of
        the last durable manifest (all partitions may be passed; only the ones to acquire are
        used; one it lacks starts at its low watermark). :meth:`drive_control_plane` applies it
        when reconciling to exactly ``version``; an offer for another version is ignored, so offer
        again after a newer publication. :meth:`acquisition_needed` says what is waited for.
        Raises :class:`DrainError` for a version older than the pinned one.
        """
        own = self._require_own()
        if not isinstance(version, int) or version < own.version:
            raise DrainError(f"cursors for version {version!r} are stale (pinned to {own.version})")
        self._offer = (version, cursor_offsets(cursors))

    def acquisition_needed(self) -> tuple[int, frozenset[TopicPartitionId]] | None:
        """``(published version, partitions)`` when reconciling needs explicit cursors
        (:meth:`acquire_partitions`) for these partitions, else ``None``."""
        own = self.own
        if own is None or self.failure is not None or self._change is not None:
            return None
        return own.acquisition_needed(self.registry.snapshot())

    def moved_since(self, version: int) -> frozenset[TopicPartitionId]:
        """Partitions whose vnode changed owner after assignment ``version``: a checkpoint taken
        under ``version`` no longer speaks for them (another node may have read further)."""
        own = self.own
        if own is None:
            return frozenset()
        changed_at = self.registry.snapshot().changed_at
        return frozenset(tp for tp, vnode in own.routes.items() if changed_at[vnode] > version)

    # -- drains ---------------------------------------------------------------------------------

    def begin_drain(self, request: SourceDrainRequest, deadline: float) -> None:
        """Stop the partitions this node loses in ``request.round``; never blocks.

        Pre (else :class:`DrainError`, nothing changes): the round is the registry's pending round,
        its predecessor is the published version, this source is reconciled with it and no
        ownership change is running; no other round is active (the same round again is a no-op);
        the round is newer than the last resolved one. Post: the revoked partitions are paused by
        the reader thread, which then puts a boundary marker into the data FIFO, so every record
        fetched before the pause precedes it; records of revoked partitions fetched afterwards
        are dropped. Partitions that stay keep flowing. ``deadline`` (absolute
        :func:`time.monotonic`): if the boundary is not consumed by then the generation fails.
        """
        own = self._require_own()
        self._check_alive()
        reader = self._running_reader("begin_drain")
        drain = own.drain
        if drain is not None and drain.round == request.round and drain.active:
            return
        if self._change is not None:
            raise DrainError(f"drain {request.round}: an ownership change is still running")
        snapshot, pending = self.registry.state()
        own, started = own.begin_drain(request.round, deadline, time.monotonic(), snapshot, pending)
        if not started:
            return
        self._set_own(own)
        assert own.drain is not None
        revoked = own.drain.revoked
        self._pause_for_drain(reader, request.round, revoked)
        logger.info(
            "drain %s begun: %d partition(s) revoked, %d kept, %d gained under the target",
            request.round, len(revoked), len(own.owned - revoked), len(own.drain.target_owned - own.owned),
        )

    def poll_drain_ready(self, round: AssignmentDrainId) -> bool:
        """Whether every record fetched before ``round``'s boundary has been emitted.

        Once True the cut (next offset of every revoked partition) is fixed and in
        :meth:`checkpoint`. Raises :class:`DrainError` for a round that is not the current one and
        :class:`FatalError` once the generation failed (e.g. the deadline passed first).
        """
        own = self._require_own()
        if own.failure is None:
            self._set_own(own.expire(time.monotonic()))
            self._observe_pause()
            self.consume_head_controls()
        self._check_alive()
        return self._require_own().ready(round)

    async def finish_drain(
        self,
        resolution: SourceDrainResolution,
        deadline: float,
        handoff_cursors: Mapping[str, int] | SourceCheckpoint | None,
    ) -> None:
        """Resolve the active round: Commit adopts the target ownership, Abort rewinds to the cut.

        Commit (only once :meth:`poll_drain_ready` was True): the revoked partitions are released
        and the pinned version becomes the target; partitions gained under the target are
        assigned at ``handoff_cursors`` (``"topic:partition" -> next offset``, or a
        :class:`SourceCheckpoint`: the cursors of the durable manifest that holds the cut; every
        partition may be passed, only the gained ones are used; never the broker's group offsets).
        Without ``handoff_cursors`` the gained partitions stay pending until
        :meth:`acquire_partitions`. Handoff cursors that lack a gained partition raise
        :class:`DrainError` (nothing changes); ones that contradict this node's cut fail the
        generation. :meth:`checkpoint_ready` turns True once the registry publishes the target.

        Abort: each paused partition is rewound to its cut (or, before the boundary was consumed,
        to the pause position, which becomes the cut) and resumed; ownership does not change.

        Repeating a resolution already applied is a no-op; the other outcome, an unknown or a
        stale round raise :class:`DrainError`. A Commit before the drain is ready, a resolution
        whose ``deadline`` (absolute :func:`time.monotonic`) passes before the consumer change is
        done, or any failure of it, fail the generation (:class:`FatalError`): a timed-out
        resolution can never act later.
        """
        own = self._require_own()
        self._check_alive()
        self._running_reader("finish_drain")
        self._set_own(own.expire(time.monotonic()))
        self._check_alive()
        if resolution.outcome is SourceDrainOutcome.ABORT:
            await self._await_pause(resolution.round, deadline)
        handoff = cursor_offsets(handoff_cursors) if handoff_cursors is not None else None
        try:
            plan = self._require_own().plan_finish(resolution, time.monotonic(), deadline, handoff)
        except FatalError as exc:
            self.fail(str(exc))
            raise
        if plan is None:
            return
        change = self._submit(plan, release=plan.release, acquire=plan.acquire, resume=plan.resume)
        try:
            marker = await asyncio.wait_for(
                asyncio.wrap_future(change.future), max(0.0, deadline - time.monotonic())
            )
        except BaseException as exc:  # a timeout, a cancellation or the change's failure: retired as FatalError
            change.cancelled.set()
            self.fail(f"{resolution.outcome.value} of drain {resolution.round} did not complete: {exc!r}")
            raise FatalError(
                f"{resolution.outcome.value} of drain {resolution.round} did not complete in time; "
                "this source generation is retired", cause=exc,
            ) from exc
        self._apply(marker)
        if plan.outcome is SourceDrainOutcome.COMMIT:
            self._metrics.drains_committed += 1
        else:
            self._metrics.drains_aborted += 1
        logger.info("drain %s resolved: %s", resolution.round, resolution.outcome.value)
