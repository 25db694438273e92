"""Following the topics' topology while the node runs (docs/settings.md), and pinning the start.

The selected topics are read every ``topology_interval_s`` (off the loop, in the metadata
executor); the runtime adopts an observation between two turns. New topics have their ids pinned
durably (a topic re-created under its name is then a loud error); new partitions are routed by
the current assignment and handed to the running source generation (``add_partitions``). A topic re-created (a new topic id), with
fewer partitions, or absent from several observations in a row stops the node with a
:class:`~laminar_kafka.cluster.errors.RuntimeFailure`.

Pinned start: before any node reads, the start position is resolved once and written as the
pipeline's initial manifest (create-once); every generation starts from a manifest.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.runtime.acquisition import AssignmentFollower
from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.generation import Generations
from laminar_kafka.cluster.runtime.topology import (
    MISSING_OBSERVATIONS,
    Topology,
    TopologyChange,
    TopologyError,
    TopologyView,
)
from laminar_kafka.connector.checkpoint import format_key
from laminar_kafka.connector.errors import ConnectorError
from laminar_kafka.coordinator.base import Coordinator, Manifest
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, vnode_loads
from laminar_kafka.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["TopologyFollower"]


class TopologyFollower:
    """The current topology of the selected topics, as this node last adopted it."""

    def __init__(
        self,
        context: RuntimeContext,
        read_topology: Callable[[], Topology],
        resolve_start: Callable[[], dict[str, int]] | None,
        assignment: AssignmentFollower,
        generations: Generations,
        pin_settings: Callable[[Coordinator], None] | None = None,
    ) -> None:
        """``read_topology`` reads the selected topics now (blocking; may raise: retried later);
        ``resolve_start`` resolves the configured start to ``"topic:partition" -> offset`` once
        (None: no initial manifest, the source's own initial position; for tests without a broker);
        ``pin_settings`` pins pipeline-wide settings at every start (see :meth:`pin_start`)."""
        self._context = context
        self._assignment = assignment
        self._generations = generations
        self.read_topology = read_topology
        self._resolve_start = resolve_start
        self._pin_settings = pin_settings
        self._view = TopologyView()
        self._observed: Topology | None = None
        #: every selected partition, sorted
        self.partitions: list[TopicPartitionId] = []

    async def first(self) -> Topology:
        """The topology at start; a transient failure (a controller failover, a broker restarting)
        is retried for up to ``start_timeout_s``."""
        deadline = time.monotonic() + self._context.options.start_timeout_s
        while True:
            try:
                return await self._context.executors.in_metadata(self.read_topology)
            except Exception as exc:  # any failure to read metadata is retried, bounded
                if time.monotonic() >= deadline:
                    raise RuntimeFailure(f"cannot read the topics' metadata: {exc}", cause=exc) from exc
                logger.warning("reading topic metadata failed (%s); retrying", exc)
                await asyncio.sleep(1.0)

    async def watch(self, period_s: float, wake: asyncio.Event) -> None:
        """Every ``period_s``: read the topics' metadata for the runtime to adopt between two
        turns (``wake`` is set). A failed read is retried at the next period."""
        while True:
            await asyncio.sleep(period_s)
            try:
                observed = await self._context.executors.in_metadata(self.read_topology)
            except Exception as exc:  # noqa: BLE001 - transient: Kafka may be restarting
                logger.warning("reading topic metadata failed (%s); retrying in %.0fs", exc, period_s)
                continue
            self._observed = observed
            wake.set()

    def topic_ids(self) -> dict[str, str]:
        """The ids of every selected topic seen so far (pinned: a re-created topic stops the node)."""
        return self._view.topology.ids()

    def take_observed(self) -> Topology | None:
        observed, self._observed = self._observed, None
        return observed

    async def adopt(self, observed: Topology, *, first: bool = False) -> None:
        """Take an observation: pin new topics' ids durably; partitions added after the first
        observation are routed and handed to the running source generation."""
        context = self._context
        try:
            view, change = self._view.observe(observed)
            for topic in sorted(change.missing):
                logger.warning("topic %r is absent from the topic metadata (%d of %d reads)", topic,
                               view.missing_streak[topic], MISSING_OBSERVATIONS)
            if change.new_topics:
                durable = await context.executors.in_control(context.coordinator.pin_topic_ids, dict(change.new_topics))
                view = view.with_pinned(change.new_topics, durable)
        except TopologyError as exc:
            raise RuntimeFailure(str(exc), cause=exc) from exc
        except (CoordinatorError, ConfigurationError) as exc:  # a topic id the coordinator refuses too
            if first:
                raise
            # e.g. the session expired meanwhile: nothing adopted, the next metadata read tries again
            logger.warning("pinning the ids of new topics failed (%s); tried again at the next metadata read", exc)
            return
        self._view = view
        if change.grew or first:
            self.partitions = sorted(view.topology.partitions())
        if change.grew and not first:
            await self._grew(change)

    async def _grew(self, change: TopologyChange) -> None:
        context = self._context
        new = sorted(change.new_partitions)
        context.metrics.partitions_discovered.labels(context.node_label).inc(len(new))
        if context.options.vnode_mode:
            await self.publish_vnode_load()
        mine = new
        self._assignment.topology_grew(self.partitions)
        owned = self._assignment.owned
        if self._assignment.snapshot is not None and owned is not None:
            mine = [tp for tp in new if tp in owned]
            context.metrics.owned_partitions.labels(context.node_label).set(len(owned))
        logger.info(
            "topology grew: %d new partition(s) (%d here): %s%s", len(new), len(mine),
            ", ".join(format_key(*tp) for tp in new[:20]), " ..." if len(new) > 20 else "",
        )
        generation = self._generations.current
        if generation is not None:
            try:
                generation.connector.add_partitions(change.new_partitions)
            except (ConnectorError, ConfigurationError) as exc:
                raise RuntimeFailure(f"the source cannot follow new partitions: {exc}", cause=exc) from exc

    async def pin_start(self) -> None:
        """Make sure the pipeline has its initial manifest: the start position resolved once, before
        any node reads, and written create-once (another node may win the race: its pin is used)."""
        context = self._context
        in_control, coordinator = context.executors.in_control, context.coordinator
        if self._pin_settings is not None:  # every start: the settings every generation then uses
            await in_control(self._pin_settings, coordinator)
        if await in_control(coordinator.latest_manifest) is not None or self._resolve_start is None:
            return
        cursors = await in_control(self._resolve_start)
        proposed = Manifest(epoch=0, assignment_version=0, cursors={context.source_identity: cursors})
        pinned = await in_control(coordinator.pin_start, proposed)
        logger.info(
            "start position pinned for %d partition(s)%s", len(pinned.cursors.get(context.source_identity, {})),
            "" if pinned == proposed else " (by another node)",
        )

    async def publish_vnode_load(self) -> None:
        """Tell the leader how many partitions each vnode carries (placement's input)."""
        context = self._context
        snapshot = await context.executors.in_control(context.coordinator.assignment)
        load = vnode_loads(context.source_identity, self.partitions, snapshot.vnode_count)
        await context.executors.in_control(context.coordinator.set_vnode_load, load)
