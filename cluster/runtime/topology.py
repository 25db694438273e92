"""The topics a pipeline lands, as Kafka describes them now, and how they may change (pure).

A node's owned partitions are a function of the *current* topology and the published assignment,
never of a list read once at start (docs/settings.md). :class:`Topology` is one observation
(selected topics with their topic ids and partition counts); :func:`topology_change` compares two
observations against the topic ids pinned durably in the coordinator:

- partitions added to a topic, and new topics matching a pattern, are *growth*: they are read
  from their first offset by their vnode's owner;
- a topic whose id differs from the pinned one was deleted and re-created: :class:`TopologyError`
  (its offsets restarted from zero; continuing would silently skip or duplicate records);
- a selected topic missing from an observation is reported in ``missing``; the caller decides
  after how many consecutive observations that is a deletion (metadata can be briefly
  incomplete while brokers restart);
- fewer partitions than before cannot happen in Kafka: :class:`TopologyError`.

This module does no I/O; :mod:`laminar_kafka.cluster.kafka_metadata` reads topologies from Kafka.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from laminar_kafka.cluster.errors import ClusterError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

__all__ = [
    "MISSING_OBSERVATIONS", "TopicInfo", "Topology", "TopologyChange", "TopologyError", "TopologyView",
    "topology_change",
]

#: consecutive observations without a selected topic before it counts as deleted
MISSING_OBSERVATIONS = 3


class TopologyError(ClusterError):
    """The topics changed in a way the pipeline cannot continue through exactly once."""


@dataclass(frozen=True)
class TopicInfo:
    """One topic: its name, Kafka topic id (stable for the topic's life) and partition count."""

    name: str
    topic_id: str
    partitions: int


@dataclass(frozen=True)
class Topology:
    """The selected topics at one observation, by name."""

    topics: Mapping[str, TopicInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", MappingProxyType(dict(sorted(self.topics.items()))))

    @classmethod
    def of(cls, *topics: TopicInfo) -> Topology:
        return cls({t.name: t for t in topics})

    def partitions(self) -> frozenset[TopicPartitionId]:
        """Every (topic, partition) of every selected topic."""
        return frozenset((t.name, p) for t in self.topics.values() for p in range(t.partitions))

    def ids(self) -> dict[str, str]:
        return {name: t.topic_id for name, t in self.topics.items()}

    def merged(self, other: Topology) -> Topology:
        """This topology with ``other``'s topics added or replacing (topics absent from ``other``
        are kept: a missing topic is not forgotten until the caller declares it deleted)."""
        return Topology({**self.topics, **other.topics})


@dataclass(frozen=True)
class TopologyChange:
    """What changed from one observation to the next.

    ``new_partitions``: partitions not known before (of known or new topics). ``new_topics``:
    topics seen for the first time, with their ids (to pin durably). ``missing``: known topics
    absent from the new observation.
    """

    new_partitions: frozenset[TopicPartitionId] = frozenset()
    new_topics: Mapping[str, str] = field(default_factory=dict)
    missing: frozenset[str] = frozenset()

    @property
    def grew(self) -> bool:
        return bool(self.new_partitions)


def topology_change(before: Topology, after: Topology, pinned_ids: Mapping[str, str]) -> TopologyChange:
    """Compare two observations; raises :class:`TopologyError` for a re-created topic (its id is
    not the pinned or previously seen one) or a topic with fewer partitions than before."""
    for name, info in after.topics.items():
        known_id = pinned_ids.get(name) or (before.topics[name].topic_id if name in before.topics else None)
        if known_id is not None and info.topic_id != known_id:
            raise TopologyError(
                f"topic {name!r} was deleted and re-created (topic id {known_id} is now {info.topic_id}); "
                "its offsets restarted, so the pipeline cannot continue exactly once. Land the new topic "
                "with a new pipeline name (and output), or restore the original topic"
            )
        previous = before.topics.get(name)
        if previous is not None and info.partitions < previous.partitions:
            raise TopologyError(
                f"topic {name!r} has {info.partitions} partition(s), fewer than the {previous.partitions} seen before"
            )
    new_partitions = after.partitions() - before.partitions()
    new_topics = {name: info.topic_id for name, info in after.topics.items() if name not in before.topics}
    missing = frozenset(before.topics) - frozenset(after.topics)
    return TopologyChange(frozenset(new_partitions), MappingProxyType(new_topics), missing)


@dataclass(frozen=True)
class TopologyView:
    """What a node knows of the topology: the topics seen so far (never forgotten), their ids as
    pinned durably, and for each topic missing from the latest observations how many in a row.

    Immutable: :meth:`observe` and :meth:`with_pinned` return new values or raise
    :class:`TopologyError`.
    """

    topology: Topology = field(default_factory=Topology)
    pinned_ids: Mapping[str, str] = field(default_factory=dict)
    missing_streak: Mapping[str, int] = field(default_factory=dict)

    def observe(self, observed: Topology) -> tuple[TopologyView, TopologyChange]:
        """Take one observation. Raises :class:`TopologyError` for a re-created topic, fewer
        partitions, or a topic absent from :data:`MISSING_OBSERVATIONS` observations in a row.
        The new view knows every topic seen; new topics' ids still need :meth:`with_pinned`."""
        change = topology_change(self.topology, observed, self.pinned_ids)
        streak = {t: self.missing_streak.get(t, 0) + 1 for t in change.missing}
        for topic, count in sorted(streak.items()):
            if count >= MISSING_OBSERVATIONS:
                raise TopologyError(
                    f"topic {topic!r} was deleted (absent from {count} metadata reads in a row); "
                    "its records can no longer be landed exactly once"
                )
        view = TopologyView(self.topology.merged(observed), self.pinned_ids, MappingProxyType(streak))
        return view, change

    def with_pinned(self, seen: Mapping[str, str], durable: Mapping[str, str]) -> TopologyView:
        """Adopt the durable ids of topics seen with ids ``seen``; raises :class:`TopologyError`
        when a durable id differs (the topic was re-created since the pipeline pinned it)."""
        for topic, topic_id in sorted(seen.items()):
            pinned = durable.get(topic, topic_id)
            if pinned != topic_id:
                raise TopologyError(
                    f"topic {topic!r} was deleted and re-created (the pipeline pinned topic id {pinned}, "
                    f"Kafka now has {topic_id}); land it with a new pipeline name, or restore the topic"
                )
        return TopologyView(self.topology, MappingProxyType({**self.pinned_ids, **seen}), self.missing_streak)
