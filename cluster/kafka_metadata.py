"""Topic metadata from Kafka: the current :class:`~laminar_kafka.cluster.runtime.topology.Topology` of a topic selector.

One long-lived admin client per reader; every call blocks (run it off the event loop). Names come
from a metadata request, topic ids and partition counts from ``describe_topics``; a topic deleted
between the two is simply absent from the observation.

The node hands :meth:`TopologyReader.read` to its runtime as the ``topology`` collaborator: the
runtime itself never imports the Kafka client.
"""
from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, TopicCollection

from laminar_kafka.cluster.errors import ClusterError
from laminar_kafka.cluster.runtime.topology import TopicInfo, Topology
from laminar_kafka.kafka_source.clients import KafkaClientConfig, KafkaTarget, client_config, make_admin
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.read.client_watch import ClientKeeper, discard_in_background

logger = logging.getLogger(__name__)

__all__ = ["ClientErrors", "MetadataUnavailable", "TopologyReader", "uuid_text"]


class MetadataUnavailable(ClusterError):
    """Kafka did not answer a metadata request in time (transient: try again later)."""


class UuidBits(Protocol):
    """A Kafka ``Uuid`` as the C client makes it (its stub lacks these two methods, which it has)."""

    def get_most_significant_bits(self) -> int: ...

    def get_least_significant_bits(self) -> int: ...


def uuid_text(uuid: UuidBits) -> str:
    """A Kafka topic id as 32 hex digits (stable across client versions)."""
    high = uuid.get_most_significant_bits() & (2**64 - 1)
    low = uuid.get_least_significant_bits() & (2**64 - 1)
    return f"{high:016x}{low:016x}"


class ClientErrors:
    """The ``error_cb`` of a client: keeps the last error librdkafka reported (an authentication
    failure, an untrusted certificate, a refused connection), so a timed-out request can say why."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error

    def cause(self) -> str:
        """``": <the last error>"``, or ``""`` when none was reported."""
        return f": {self.last.str()}" if self.last is not None else ""


class TopologyReader:
    """Reads the topology of ``selector`` from the cluster ``kafka`` names. Thread-safe enough
    for one caller at a time; :meth:`close` is idempotent."""

    def __init__(self, kafka: KafkaTarget, selector: TopicSelector, timeout_s: float = 10.0) -> None:
        self.selector = selector
        self.timeout_s = timeout_s
        self.kafka: KafkaClientConfig = client_config(kafka)
        self.errors = ClientErrors()
        #: the admin client, replaced when its requests failed for a while (it may have lost every
        #: broker for good: :mod:`~laminar_kafka.kafka_source.read.client_watch`)
        self.admin = ClientKeeper(
            lambda: make_admin(self.kafka, {"socket.timeout.ms": int(timeout_s * 1000), "error_cb": self.errors}),
            discard_in_background,
        )

    def read(self) -> Topology:
        """The selected topics that exist now. Raises :class:`MetadataUnavailable` when Kafka does
        not answer, or answers a selected topic with an error other than "unknown topic" (e.g. not
        authorized); a named topic that does not exist is simply absent (the caller decides)."""
        admin = self.admin.client
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb: the last error says why (refused, auth, TLS...)
            error = exc.args[0] if exc.args else exc
            detail = error.str() if isinstance(error, KafkaError) else str(error)
            del admin
            self.admin.failed(exc)
            raise MetadataUnavailable(f"{detail}{self.errors.cause()}", cause=exc) from exc
        self.admin.succeeded()
        names = []
        for name in self.selector.select(metadata.topics):
            info = metadata.topics[name]
            if info.error is not None and info.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                # not absent: an existing topic the client may not see now (authorization revoked,
                # a leader being elected); counting it missing would end in "topic deleted"
                raise MetadataUnavailable(f"topic {name!r}: {info.error.str()}")
            if info.error is None and info.partitions:
                names.append(name)
        if not names:
            return Topology()
        futures = self.admin.client.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
        topics: list[TopicInfo] = []
        for name, future in futures.items():
            try:
                description = future.result(timeout=self.timeout_s + 1)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if getattr(error, "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                    continue  # deleted since the metadata request
                raise MetadataUnavailable(f"describing topic {name!r} failed: {exc}", cause=exc) from exc
            except Exception as exc:  # a timed-out future
                raise MetadataUnavailable(f"describing topic {name!r} failed: {exc!r}", cause=exc) from exc
            topics.append(TopicInfo(name, uuid_text(description.topic_id), len(description.partitions)))
        return Topology.of(*topics)

    def close(self) -> None:
        """Nothing to release explicitly (the admin client closes when collected)."""
