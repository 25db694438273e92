"""`create_topic`: the one way the dev tooling, the tests and the benches create a topic;
`ensure_topic`: the same when it does not exist yet (`laminar-kafka dev produce`).

Every devstack helper that talks to Kafka takes the bootstrap servers (or a whole
`laminar_kafka.kafka_source.clients.KafkaClientConfig`) and an optional `client` (a `KafkaClientConfig`, e.g.
SASL_SSL settings); `resolve_client` resolves the two.
"""
from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka.admin import NewTopic

from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.waiting import wait_until
from laminar_kafka.kafka_source.clients import KafkaClientConfig, KafkaTarget, client_config, make_admin

__all__ = ["create_topic", "ensure_topic", "resolve_client"]


def resolve_client(bootstrap: KafkaTarget, client: KafkaClientConfig | None) -> KafkaClientConfig:
    """`client` when given (then `bootstrap` must be '' or name the same servers), else `bootstrap`
    as a configuration. Raises ValueError when the two name different servers."""
    if client is None:
        return client_config(bootstrap)
    if isinstance(bootstrap, KafkaClientConfig):
        bootstrap = bootstrap.bootstrap
    if bootstrap and bootstrap != client.bootstrap:
        raise ValueError(f"bootstrap {bootstrap!r} differs from the client configuration's {client.bootstrap!r}")
    return client


def create_topic(
    bootstrap: KafkaTarget,
    topic: str,
    partitions: int,
    timeout: float = 30.0,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    client: KafkaClientConfig | None = None,
) -> None:
    """Create `topic` and return once every partition has a leader visible in metadata.

    `client` (optional) is the connection's configuration (security...); see `resolve_client`.
    Raises the broker's error when the topic cannot be created (it exists already, say), and
    `WaitTimeout` when the partitions have no leader within `timeout` seconds.
    """
    admin = make_admin(resolve_client(bootstrap, client))
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=dict(config or {}))
    admin.create_topics([new_topic], operation_timeout=timeout)[topic].result(timeout)

    def every_partition_led() -> bool:
        info = admin.list_topics(topic, timeout=5).topics.get(topic)
        return info is not None and info.error is None and len(info.partitions) == partitions and all(
            p.leader >= 0 for p in info.partitions.values()
        )

    try:
        wait_until(every_partition_led, timeout, f"a leader for every partition of topic {topic}", interval=0.1)
    except WaitTimeout as exc:
        raise WaitTimeout(f"topic {topic} has no leader for every partition after {timeout:.0f}s") from exc


def ensure_topic(
    bootstrap: KafkaTarget,
    topic: str,
    partitions: int,
    timeout: float = 30.0,
    *,
    client: KafkaClientConfig | None = None,
) -> tuple[int, bool]:
    """``(partitions, created)``: `topic`'s partition count once it exists, created with `partitions`
    (see `create_topic`) when it did not; an existing topic is left as it is, whatever its count.
    Raises the broker's error when the topic can neither be read nor created."""
    admin = make_admin(resolve_client(bootstrap, client))
    info = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    if info is not None and info.error is None and info.partitions:
        return len(info.partitions), False
    create_topic(bootstrap, topic, partitions, timeout, client=client)
    return partitions, True
