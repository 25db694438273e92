"""The assignment as this node follows it: the published snapshot, the partitions it owns, the
vnode registry its source reads, and partitions acquired without a drain.

The owned set is a function of the current snapshot and the current topology (never of a list
fixed at start). Partitions gained without a drain (a dead node's, a first assignment, a
self -> other -> self move, a partition that appeared later) are acquired in place: the source
says what it waits for (``acquisition_needed``: the exact published version and the partitions)
and the runtime offers the durable manifest's cursors for that version (``acquire_partitions``),
once per version and partition set.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.generation import SourceGeneration
from laminar_kafka.coordinator.base import Manifest, RoundStarted
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, VnodeRegistry
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, owned_partitions

logger = logging.getLogger(__name__)

__all__ = ["AssignmentFollower"]

#: whether a generation is still the running one (an await may have retired it meanwhile)
SourceGenerationCheck = Callable[[SourceGeneration], bool]


class AssignmentFollower:
    """The latest published assignment, this node's partitions under it, and the cursor offers."""

    def __init__(self, context: RuntimeContext) -> None:
        self._context = context
        self.snapshot: AssignmentSnapshot | None = None
        #: the partitions this node owns at :attr:`snapshot`; None: it reads everything (embedded)
        self.owned: frozenset[TopicPartitionId] | None = None
        #: the epoch of the manifest partitions acquired without a drain start from, at this version
        self.manifest_epoch = 0
        #: the mirror of the published assignment that source generations read (vnode mode)
        self.registry = VnodeRegistry(1)
        self._registry_ready = False
        #: the last cursor offer: (version, partitions it was for)
        self._offered: tuple[int, frozenset[TopicPartitionId]] | None = None

    # -- the published assignment -----------------------------------------------------------------

    def owned_at(self, snapshot: AssignmentSnapshot, partitions: Iterable[TopicPartitionId]) -> frozenset[TopicPartitionId] | None:
        options = self._context.options
        if not options.vnode_mode:
            return None if snapshot.vnodes_of(options.node_id) else frozenset()
        return owned_partitions(options.source_identity, partitions, snapshot, options.node_id)

    def adopt(self, snapshot: AssignmentSnapshot, manifest_epoch: int, partitions: Iterable[TopicPartitionId]) -> None:
        """Take ``snapshot`` as published: mirror it for the sources, compute the owned set."""
        self.snapshot = snapshot
        self.manifest_epoch = manifest_epoch
        metrics = self._context.metrics
        metrics.assignment_version.labels(metrics.node).set(snapshot.version)
        if self._context.options.vnode_mode:
            self._mirror(snapshot)
        self.owned = self.owned_at(snapshot, partitions)

    def topology_grew(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Partitions were added: route them by the current snapshot."""
        if self.snapshot is not None:
            self.owned = self.owned_at(self.snapshot, partitions)

    def _mirror(self, snapshot: AssignmentSnapshot) -> None:
        """Publish ``snapshot`` into the registry the sources read, with the coordinator's own
        ``changed_at`` (this node may not see every version)."""
        if not self._registry_ready or self.registry.vnode_count != snapshot.vnode_count:
            self.registry = VnodeRegistry(snapshot.vnode_count)
            self._registry_ready = True
        if snapshot.version > self.registry.snapshot().version:
            self.registry.publish_snapshot(snapshot)

    def round_started(self, event: RoundStarted) -> None:
        """Show the round's target to the sources (vnode mode)."""
        if self._context.options.vnode_mode and self._registry_ready:
            try:
                self.registry.begin_round(event.drain_id, event.target_owners)
            except CoordinatorError as exc:
                logger.warning("round %s not mirrored: %s", event.drain_id, exc)

    def round_decided(self, drain_id: AssignmentDrainId) -> None:
        if self._context.options.vnode_mode and self._registry_ready:
            self.registry.clear_round(drain_id)

    def owns_any_vnode(self) -> bool:
        snapshot = self.snapshot
        return snapshot is not None and bool(snapshot.vnodes_of(self._context.options.node_id))

    def owns_vnodes_without_partitions(self) -> bool:
        """Vnode mode: this node owns vnodes at the current version but none carries a partition."""
        return self.owned is not None and not self.owned and self.owns_any_vnode()

    def routing_snapshot(self) -> AssignmentSnapshot | None:
        """The snapshot acks and advisory commits route partitions by (None: all are this node's)."""
        return self.snapshot if self._context.options.vnode_mode else None

    # -- manifests and cursor offers --------------------------------------------------------------

    async def manifest_or_latest(self, epoch: int) -> Manifest | None:
        """Manifest ``epoch`` (``0``: the latest), or the latest when it was garbage-collected."""
        context = self._context
        if epoch > 0:
            try:
                return await context.executors.in_control(context.coordinator.manifest, epoch)
            except CoordinatorError as exc:
                logger.info("manifest %d unavailable (%s); using the latest", epoch, exc)
        return await context.executors.in_control(context.coordinator.latest_manifest)

    def forget_offers(self) -> None:
        """A new generation waits for its own offers."""
        self._offered = None

    async def offer_cursors(self, generation: SourceGeneration, is_current: SourceGenerationCheck) -> None:
        """Offer the durable manifest's cursors for the partitions ``generation`` waits for (acquired
        without a drain) at the version it waits at; once per version and partition set."""
        if not self._context.options.vnode_mode:
            return
        needed = generation.connector.acquisition_needed()
        if needed is None:
            return
        version, partitions = needed
        if self._offered == (version, partitions):
            return
        snapshot = self.snapshot
        manifest_epoch = 0
        if snapshot is not None and snapshot.version == version and self.manifest_epoch:
            manifest_epoch = self.manifest_epoch
        manifest = await self.manifest_or_latest(manifest_epoch)
        if not is_current(generation):
            return
        cursors = dict(manifest.cursors.get(self._context.source_identity, {})) if manifest is not None else {}
        generation.connector.acquire_partitions(cursors, version)
        self._offered = (version, partitions)
        logger.info(
            "version %d: acquiring %d partition(s) at the cursors of %s",
            version, len(partitions), f"manifest {manifest.epoch}" if manifest is not None else "no manifest",
        )
