"""`create_topic`: the one way the dev tooling, the tests and the benches create a topic."""
from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka.admin import AdminClient, NewTopic

from devstack.errors import WaitTimeout
from devstack.waiting import wait_until

__all__ = ["create_topic"]


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 30.0,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create `topic` and return once every partition has a leader visible in metadata.

    Raises the broker's error when the topic cannot be created (it exists already, say), and
    `WaitTimeout` when the partitions have no leader within `timeout` seconds.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
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
