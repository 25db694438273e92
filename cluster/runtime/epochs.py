"""Epochs as one node sees them: admit a barrier, ack it, publish a committed epoch.

Barrier alignment: the runtime calls :meth:`EpochBarriers.ack` between two ``poll_batch`` calls,
so the cursor it acks and the staged files it seals hold exactly the same rows. The ack carries the
cursors of the partitions this node owns at the epoch's version and the sealed files; nothing
written after the barrier belongs to the epoch. An ack that fails without being fenced is kept and
sent again, unchanged (the leader waits for every live owner's ack). ``EpochCommitted``: every
output the manifest lists is published (idempotent, any node's), then the source's advisory offsets
follow.

Acks carry what changed. The leader overlays an epoch's acks on the previous manifest, and while
epoch E is open the previous manifest is always E-1's (the register opens E only as ``last_epoch + 1``).
So when this node saw manifest E-1 committed, its ack of E leaves out every partition whose cursor
equals that manifest's (:func:`~laminar_kafka.cluster.runtime.state.changed_cursors`); otherwise (the
first epoch of a boot, a commit it did not see) it carries them all. Checked end to end: when a
manifest commits with this node's ack, each cursor the ack stood for must be the manifest's, or the
node stops (:class:`RuntimeFailure`) before it publishes any of that epoch or acks again.
"""
from __future__ import annotations

import enum
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.lake.commits import committer_of
from laminar_kafka.cluster.lake.outputs import LakeOutput
from laminar_kafka.cluster.lake.record import LakeRecord
from laminar_kafka.cluster.lake.staged_names import final_path
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.measures import FreshnessTracker, VisibleAfter, ask_in, epoch_due
from laminar_kafka.cluster.runtime.state import ACK_RETRY_S, ack_cursors, changed_cursors
from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.protocol import SourceConnector
from laminar_kafka.coordinator.base import AckRejected, Coordinator, EpochAck, EpochOpened, Manifest
from laminar_kafka.coordinator.errors import CoordinatorError, CoordinatorUnavailable, FencedError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot

logger = logging.getLogger(__name__)

#: how often a running node settles the staging directory again (stale files of dead boots)
RECOVER_EVERY_EPOCHS = 10
#: with a freshness target, how long after a failed ask a node asks again
ASK_RETRY_S = 0.5
#: how often the runtime's turns set ``laminar_freshness_seconds`` between publishes
FRESHNESS_EXPORT_S = 1.0

__all__ = ["AckOutcome", "EpochBarriers", "EpochRecords", "UnsentAck"]


class AckOutcome(enum.Enum):
    #: recorded by the coordinator
    SENT = "sent"
    #: failed transiently: kept, and sent again by :meth:`EpochBarriers.resend_if_due`
    RETRY = "retry"
    #: fenced: this membership is over (the runtime rejoins)
    FENCED = "fenced"


@dataclass(frozen=True)
class UnsentAck:
    """An ack whose send failed transiently: the ack, its barrier time, the next attempt."""

    ack: EpochAck
    barrier_at: float
    retry_at: float


@dataclass(frozen=True)
class EpochRecords:
    """The record each epoch leaves in the lake (a :data:`laminar_kafka.cluster.lake.record.RecordOf`,
    given to the lake output): its manifest's cursors and published files, and the ids of the
    selected topics (``topic_ids``: the topology the runtime follows)."""

    coordinator: Coordinator
    pipeline: str
    topic_ids: Callable[[], Mapping[str, str]]

    def __call__(self, epoch: int) -> LakeRecord | None:
        """Epoch ``epoch``'s record; None when its manifest is unknown. Blocking (a sink-thread
        callback); raises :class:`CoordinatorUnavailable` when the coordinator cannot answer now."""
        try:
            manifest = self.coordinator.manifest(epoch)
        except CoordinatorUnavailable:
            raise
        except CoordinatorError:
            return None
        return LakeRecord(self.pipeline, epoch, manifest.assignment_version, manifest.cursors,
                          dict(self.topic_ids()), tuple(final_path(o) for o in manifest.outputs))


class EpochBarriers:
    """The epoch state of one node: the admitted barrier, an unsent ack, what is acked and durable.
    Committed epochs are published into ``lake``."""

    def __init__(self, context: RuntimeContext, lake: LakeOutput) -> None:
        self._context = context
        self._lake = lake
        #: the admitted barrier not acked yet
        self.pending: EpochOpened | None = None
        self.unsent: UnsentAck | None = None
        #: the latest epoch this node acked (0 after a lost membership: the old boot's acks are dropped)
        self.last_acked_epoch = 0
        #: the latest epoch whose manifest this node published
        self.latest_committed_epoch = 0
        #: the latest manifest's cursors of this source (for the durable lag, and the base of an ack)
        self.durable_cursors: dict[str, int] = {}
        #: the epoch of the manifest ``durable_cursors`` come from (0: none seen by this process)
        self.durable_epoch = 0
        #: the latest ack sent: its epoch, boot id and every cursor it stands for (changed or not)
        self._acked: tuple[int, str, dict[str, int]] | None = None
        self.acked_count = 0
        self.committed_count = 0
        self._commit_wait_logged_at: float | None = None
        #: rows written since the last ack (the runtime counts them; an ack seals them)
        self.rows_since_ack = 0
        #: when this node last saw an epoch commit (or started), and the epoch it last asked after
        self.committed_at = time.monotonic()
        self._asked_after = -1
        #: the epoch after which the last failed ask asked (its warning is logged once)
        self._ask_failed_after = -1
        #: the timestamps of rows written here and not visible yet (freshness gauge, visibility histogram)
        self.freshness = FreshnessTracker()
        #: with a freshness target: when this node last asked (wall clock), and how long asks take
        self._asked_at: float | None = None
        self._ask_retry_at = 0.0
        self._freshness_exported_at = 0.0
        policy = context.options.freshness
        self.visible_after = VisibleAfter(0.25 * policy.target_s if policy else 0.0)

    def admit(self, event: EpochOpened, snapshot: AssignmentSnapshot | None, suspended: bool) -> None:
        """Take ``event`` as the pending barrier unless the session is suspended, the epoch is at a
        version this node has not seen, or this node owns no vnode at it (the leader does not wait)."""
        if suspended:
            logger.info("epoch %d not admitted: session suspended", event.epoch)
            return
        if snapshot is not None and event.assignment_version != snapshot.version:
            logger.warning(
                "epoch %d is at version %d but this node has seen version %d; skipping",
                event.epoch, event.assignment_version, snapshot.version,
            )
            return
        if snapshot is not None and not snapshot.vnodes_of(self._context.options.node_id):
            return
        self.pending = event

    def close_version(self, version: int) -> None:
        """A new version is published: epochs never straddle versions, so a barrier of another one is closed."""
        if self.pending is not None and self.pending.assignment_version != version:
            self.pending = None

    def awaits_commit(self) -> bool:
        """Whether an epoch this node acked may still commit (no generation may start from an older
        manifest: it would read the acked rows again). Warns every 10 s while it lasts."""
        if self.last_acked_epoch <= self.latest_committed_epoch:
            self._commit_wait_logged_at = None
            return False
        now = time.monotonic()
        if self._commit_wait_logged_at is None:
            self._commit_wait_logged_at = now
        elif now - self._commit_wait_logged_at > 10.0:
            logger.warning(
                "waiting for acked epoch %d to commit before starting a source generation", self.last_acked_epoch
            )
            self._commit_wait_logged_at = now
        return True

    def forget_membership(self) -> None:
        """The membership is lost: its barrier, its unsent ack and its acks are dropped."""
        self.pending = None
        self.unsent = None
        self.last_acked_epoch = 0
        self.freshness.forget_sealed()

    async def ack(self, checkpoint: SourceCheckpoint, snapshot: AssignmentSnapshot | None) -> AckOutcome:
        """Ack the pending barrier with ``checkpoint`` (empty: this node runs no source and owns no
        partition); seals the staged files as the epoch's output. ``snapshot`` routes the cursors
        (None: the node reads everything)."""
        context, event = self._context, self.pending
        assert event is not None
        self.pending = None
        started = time.monotonic()
        options = context.options
        cursors = ack_cursors(checkpoint.offsets, options.source_identity, snapshot, options.node_id)
        sent = changed_cursors(cursors, self.durable_cursors) if self.durable_epoch == event.epoch - 1 else cursors
        staged = await context.executors.in_sink(context.sink.seal, event.epoch)
        ack = EpochAck(
            node_id=options.node_id,
            boot_id=context.coordinator.boot_id,
            epoch=event.epoch,
            assignment_version=event.assignment_version,
            cursors={options.source_identity: sent},
            outputs=staged,
        )
        self._acked = (event.epoch, ack.boot_id, cursors)
        self.rows_since_ack = 0
        self.freshness.seal(event.epoch)
        counter = context.metrics.ack_cursors
        counter.labels(context.node_label, "sent").inc(len(sent))
        counter.labels(context.node_label, "unchanged").inc(len(cursors) - len(sent))
        # from here the ack may be recorded: no generation starts before the epoch commits
        self.last_acked_epoch = max(self.last_acked_epoch, event.epoch)
        return await self._send(ack, started)

    def note_rows(self, records: pa.RecordBatch, rejected: int) -> None:
        """Rows written to the sink (and ``rejected`` dead letters): the next ack seals them."""
        self.rows_since_ack += records.num_rows + rejected
        self.freshness.note(records, time.time() if records.num_rows + rejected else None)

    def _may_ask(self) -> bool:
        """This node holds rows no ack covers, has not asked after its latest committed epoch, and has
        no barrier, unsent ack or acked epoch in flight (that epoch's commit comes first)."""
        epoch = self.latest_committed_epoch
        return bool(self.rows_since_ack) and self._asked_after != epoch and self.pending is None \
            and self.unsent is None and self.last_acked_epoch <= epoch

    def ask_due_in(self) -> float | None:
        """With a freshness target: seconds until this node asks for an epoch (None: no target, nothing
        pending, or no ask possible until an event); the runtime's loop waits no longer than this."""
        policy = self._context.options.freshness
        if policy is None or not self._may_ask():
            return None
        wait = ask_in(policy, time.time(), self.freshness.oldest_pending_s(), self.visible_after.estimate())
        if wait is not None and policy.target_bytes and self.freshness.pending_bytes >= policy.target_bytes:
            wait = 0.0
        return None if wait is None else max(wait, self._ask_retry_at - time.monotonic())

    def _wants_epoch(self) -> bool:
        """Whether this node asks now: with a freshness target, when :func:`epoch_due`; otherwise when
        no epoch committed for ``epoch_ask_after_s`` since the last one it saw (the leader may be
        waiting its quiet checkpoint interval)."""
        options = self._context.options
        if options.freshness is not None:
            return time.monotonic() >= self._ask_retry_at and epoch_due(
                options.freshness, time.time(), self.freshness.oldest_pending_s(), self.freshness.pending_bytes,
                self.visible_after.estimate())
        after_s = options.epoch_ask_after_s
        return after_s is not None and time.monotonic() - self.committed_at >= after_s

    async def ask_if_quiet(self) -> None:
        """Set the freshness gauge (every :data:`FRESHNESS_EXPORT_S`); ask for the next epoch
        (``Coordinator.request_epoch``) when :meth:`_may_ask` and :meth:`_wants_epoch`. At most once
        per committed epoch; an ask that was not written is tried again ``epoch_ask_after_s`` later
        (with a freshness target: :data:`ASK_RETRY_S` later)."""
        if time.monotonic() >= self._freshness_exported_at + FRESHNESS_EXPORT_S:
            self.export_freshness()
        epoch = self.latest_committed_epoch
        if not self._may_ask() or not self._wants_epoch():
            return
        context = self._context
        try:
            await context.executors.in_control(context.coordinator.request_epoch, epoch)
        except CoordinatorError as exc:
            after_s = ASK_RETRY_S if context.options.freshness is not None else context.options.epoch_ask_after_s
            # one warning per epoch asked after: with a freshness target asks are retried every ASK_RETRY_S
            log = logger.warning if self._ask_failed_after != epoch else logger.debug
            log("asking for the epoch after %d failed (asking again in %.1f s): %s", epoch, after_s, exc)
            self._ask_failed_after = epoch
            self.committed_at = time.monotonic()
            self._ask_retry_at = time.monotonic() + ASK_RETRY_S
            return
        self._asked_after = epoch
        self._asked_at = time.time()
        context.metrics.epoch_asks.labels(context.node_label).inc()

    async def resend_if_due(self) -> AckOutcome | None:
        unsent = self.unsent
        if unsent is None or time.monotonic() < unsent.retry_at:
            return None
        return await self._send(unsent.ack, unsent.barrier_at)

    async def _send(self, ack: EpochAck, started: float) -> AckOutcome:
        context = self._context
        self.unsent = None
        try:
            await context.executors.in_control(context.coordinator.ack_epoch, ack)
        except FencedError as exc:
            logger.warning("epoch %d ack fenced (%s)", ack.epoch, exc)
            return AckOutcome.FENCED
        except CoordinatorError as exc:
            logger.warning("epoch %d ack failed: %s; retrying", ack.epoch, exc)
            self.unsent = UnsentAck(ack, started, time.monotonic() + ACK_RETRY_S)
            return AckOutcome.RETRY
        self.acked_count += 1
        context.metrics.checkpoint_seconds.labels(context.node_label).observe(time.monotonic() - started)
        return AckOutcome.SENT

    def publish_now(self, manifest: Manifest, tables_through: int | None = None) -> int:
        """Publish the outputs ``manifest`` lists into the lake (idempotent), and every earlier
        epoch the lake does not show yet (see :meth:`laminar_kafka.cluster.lake.outputs.LakeOutput.publish`;
        ``tables_through``: commit the tables only up to that epoch); blocking, on the sink's thread
        (or before the node joins). Returns the table commits made."""
        oldest = max(1, manifest.epoch - self._context.options.manifests_kept + 1)
        return self._lake.publish(manifest.epoch, manifest.outputs, self._manifest_outputs, oldest,
                                          tables_through=tables_through)

    async def publish(self, manifest: Manifest, *, in_turn: bool = False) -> None:
        """:meth:`publish_now` on the sink's thread, measured. ``in_turn`` (a newly committed epoch):
        when it is another node's turn to commit the epoch's tables
        (:func:`~laminar_kafka.cluster.lake.commits.committer_of`), this node commits them only up to
        the epoch before; otherwise (start, join, recovery) up to the epoch."""
        context = self._context
        started = time.monotonic()
        tables_through = None
        if in_turn:
            committer = committer_of(manifest.epoch, (node for node, _boot in manifest.acked_by))
            if committer is not None and committer != context.options.node_id:
                tables_through = manifest.epoch - 1
        commits = await context.executors.in_sink(self.publish_now, manifest, tables_through)
        metrics = context.metrics
        metrics.publish_seconds.labels(metrics.node).observe(time.monotonic() - started)
        metrics.lake_commits.labels(metrics.node).inc(commits)
        self.latest_committed_epoch = max(self.latest_committed_epoch, manifest.epoch)
        self._visible(manifest.epoch)

    def _visible(self, epoch: int) -> None:
        """Epochs up to ``epoch`` are visible here: the visibility of their rows observed, the time an
        ask took measured, the freshness gauge set."""
        now = time.time()
        metrics = self._context.metrics
        metrics.observe_visibility(self.freshness.published(epoch, now))
        if self._asked_at is not None and epoch > self._asked_after:
            self.visible_after.add(now - self._asked_at)
            self._asked_at = None
        self.export_freshness(now)

    def export_freshness(self, now: float | None = None) -> None:
        """Set ``laminar_freshness_seconds`` of every partition written here (0: caught up)."""
        metrics = self._context.metrics
        self._freshness_exported_at = time.monotonic()
        ages = self.freshness.ages(time.time() if now is None else now)
        metrics.set_partition_gauge(metrics.freshness, {(topic, partition): age for (topic, partition), age in ages.items()})

    def check_not_behind(self, manifest: Manifest | None) -> None:
        """Raise :class:`RuntimeFailure` when ``manifest`` (the control state's latest) is older than an
        epoch this node saw committed: the control state was lost or restored from an older copy, and
        going on from it would land epochs twice. Started again, the node reconciles with the lake."""
        seen = self.latest_committed_epoch
        if seen and (manifest is None or manifest.epoch < seen):
            raise RuntimeFailure(
                f"the pipeline's control state went back (its latest manifest is "
                f"{'gone' if manifest is None else f'epoch {manifest.epoch}'}, this node saw epoch {seen} "
                "committed): ZooKeeper lost or restored? start the node again: it reconciles with the lake")

    def _manifest_outputs(self, epoch: int) -> tuple[str, ...] | None:
        """Manifest ``epoch``'s outputs, None when it is unknown (not committed, or collected).
        Raises :class:`CoordinatorUnavailable` when the coordinator cannot answer now: an epoch
        that cannot be read is not an epoch that is gone (blocking; a sink-thread callback)."""
        try:
            return self._context.coordinator.manifest(epoch).outputs
        except CoordinatorUnavailable:
            raise
        except CoordinatorError:
            return None

    async def committed(
        self, manifest: Manifest, connector: SourceConnector | None, snapshot: AssignmentSnapshot | None
    ) -> None:
        """``EpochCommitted``: publish, then advance the source's advisory offsets to the
        manifest's cursors of the partitions this node owns (``snapshot``; None: all)."""
        context = self._context
        if self.unsent is not None and self.unsent.ack.epoch <= manifest.epoch:
            self.unsent = None  # recorded after all (only its answer was lost)
        identity = context.source_identity
        durable = manifest.cursors.get(identity, {})
        self._check_acked_cursors(manifest, durable)  # before this node publishes anything of it
        try:
            await self.publish(manifest, in_turn=True)
        except CoordinatorUnavailable as exc:  # durable all the same: a later publish or recovery finishes it
            logger.warning("epoch %d committed; publishing it waits for the coordinator (%s)", manifest.epoch, exc)
            self.latest_committed_epoch = max(self.latest_committed_epoch, manifest.epoch)
        if manifest.epoch > self.durable_epoch:
            self.durable_cursors, self.durable_epoch = dict(durable), manifest.epoch
        self.committed_count += 1
        self.committed_at = time.monotonic()
        context.metrics.epochs_committed.labels(context.node_label).inc()
        if connector is None:
            return
        mine = ack_cursors(self.durable_cursors, identity, snapshot, context.options.node_id)
        if mine:
            version = manifest.assignment_version if context.options.vnode_mode else 0
            await connector.notify_epoch_committed(manifest.epoch, SourceCheckpoint(mine, version))

    def _check_acked_cursors(self, manifest: Manifest, durable: Mapping[str, int]) -> None:
        """Raise :class:`RuntimeFailure` when ``manifest`` committed this boot's latest ack but does not
        hold every cursor the ack stood for (the ones it left out as unchanged included): the base
        the ack was computed against was not the leader's previous manifest. Never expected; going on
        would land or skip rows, so the node stops (started again, it reconciles with the lake)."""
        acked = self._acked
        if acked is None or acked[0] != manifest.epoch:
            return
        epoch, boot_id, cursors = acked
        if (self._context.options.node_id, boot_id) not in manifest.acked_by:
            return  # another ack of this node (a replacement, another boot) made the epoch
        wrong = sorted(key for key, offset in cursors.items() if durable.get(key) != offset)
        if wrong:
            key = wrong[0]
            raise RuntimeFailure(
                f"manifest {epoch} committed this node's ack but holds {key} = {durable.get(key)} where the ack "
                f"stood for {cursors[key]} ({len(wrong)} cursor(s) differ): the control state changed under "
                "this node? start the node again: it reconciles with the lake")

    def rejected(self, event: AckRejected) -> bool:
        """``AckRejected``: True when the epoch is still open for this node's boot, so the runtime
        retires the generation and acks the same epoch again (then the barrier is pending again)."""
        if event.epoch <= self.latest_committed_epoch:
            return False  # committed meanwhile, with a replacement
        logger.warning("epoch %d ack rejected by the leader (%s); restarting the source generation from "
                       "the latest manifest and acking again", event.epoch, event.reason)
        metrics = self._context.metrics
        metrics.acks_rejected.labels(metrics.node).inc()
        if self.unsent is not None and self.unsent.ack.epoch == event.epoch:
            self.unsent = None
        self.last_acked_epoch = self.latest_committed_epoch  # the rejected ack will never commit
        return True

    async def recover_periodically(self, epoch: int) -> None:
        """After every 10th committed epoch: :meth:`recover_sink` (postponed to the next time while
        the coordinator cannot answer), its tables committed in turn (the nodes reach this epoch
        together: all of them committing the latest epoch at once would race to the catalog)."""
        if epoch % RECOVER_EVERY_EPOCHS:
            return
        try:
            await self.recover_sink(in_turn=True)
        except CoordinatorUnavailable as exc:
            logger.warning("sink recovery postponed: %s", exc)

    async def recover_sink(self, *, in_turn: bool = False) -> None:
        """Publish what committed manifests list and delete the staged files nothing will list;
        then bring the lake up to the latest manifest (an Iceberg commit a crash left undone; with
        ``in_turn``, see :meth:`publish`). Raises :class:`CoordinatorUnavailable` when the
        coordinator cannot answer now."""
        context = self._context
        coordinator, in_control = context.coordinator, context.executors.in_control
        latest = await in_control(coordinator.latest_manifest)
        members = await in_control(coordinator.members)
        live = {m.boot_id for m in members} | {coordinator.boot_id}

        await context.executors.in_sink(functools.partial(
            context.sink.recover_staged,
            latest_epoch=latest.epoch if latest else 0, manifest_outputs=self._manifest_outputs, live_boots=live,
        ))
        if latest is not None and latest.epoch > 0:
            await self.publish(latest, in_turn=in_turn)
