"""Topic metadata from Kafka: the current :class:`~cluster.topology.Topology` of a topic selector.

One long-lived admin client per reader; every call blocks (run it off the event loop). Names come
from a metadata request, topic ids and partition counts from ``describe_topics``; a topic deleted
between the two is simply absent from the observation.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from cluster.errors import ClusterError
from cluster.topology import TopicInfo, Topology
from kafka_source.topics import TopicSelector

logger = logging.getLogger(__name__)

__all__ = ["MetadataUnavailable", "TopologyReader", "uuid_text"]


class MetadataUnavailable(ClusterError):
    """Kafka did not answer a metadata request in time (transient: try again later)."""


def uuid_text(uuid: object) -> str:
    """A Kafka topic id as 32 hex digits (stable across client versions)."""
    high = uuid.get_most_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    low = uuid.get_least_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    return f"{high:016x}{low:016x}"


class TopologyReader:
    """Reads the topology of ``selector`` from the cluster at ``bootstrap``. Thread-safe enough
    for one caller at a time; :meth:`close` is idempotent."""

    def __init__(
        self,
        bootstrap: str,
        selector: TopicSelector,
        client_config: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.selector = selector
        self.timeout_s = timeout_s
        self._admin = AdminClient(
            {**dict(client_config or {}), "bootstrap.servers": bootstrap,
             "socket.timeout.ms": int(timeout_s * 1000)},
            logger=logger,
        )

    def read(self) -> Topology:
        """The selected topics that exist now. Raises :class:`MetadataUnavailable` when Kafka does
        not answer; a named topic that does not exist is simply absent (the caller decides)."""
        try:
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise MetadataUnavailable(f"topic metadata unavailable: {exc}", cause=exc) from exc
        names = [
            t for t in self.selector.select(metadata.topics)
            if metadata.topics[t].error is None and metadata.topics[t].partitions
        ]
        if not names:
            return Topology()
        futures = self._admin.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
        topics: list[TopicInfo] = []
        for name, future in futures.items():
            try:
                description = future.result(timeout=self.timeout_s + 1)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if getattr(error, "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                    continue  # deleted since the metadata request
                raise MetadataUnavailable(f"describing topic {name!r} failed: {exc}", cause=exc) from exc
            except Exception as exc:  # noqa: BLE001 - a timed-out future
                raise MetadataUnavailable(f"describing topic {name!r} failed: {exc!r}", cause=exc) from exc
            topics.append(TopicInfo(name, uuid_text(description.topic_id), len(description.partitions)))
        return Topology.of(*topics)

    def close(self) -> None:
        """Nothing to release explicitly (the admin client closes when collected)."""
