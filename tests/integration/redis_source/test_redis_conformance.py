"""The conformance kit on ``RedisStreamsSource`` against a real Redis server (a stream family per test)."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from laminar_kafka.connector.conformance import ConnectorKit, LogBackend
from laminar_kafka.connector.conformance.pytest_kit import conformance_tests
from laminar_kafka.connector.protocol import ConnectorConfig
from laminar_kafka.devstack.redis_server import RedisServer
from laminar_kafka.redis_source import RedisStreamsConfig, RedisStreamsSource
from laminar_kafka.redis_source.checkpoint import CONNECTOR_NAME
from laminar_kafka.redis_source.ids import offset_of, position_after

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class RedisBackend(LogBackend):
    """A stream family ``<topic>:<n>`` on a real server; advisory offsets read from its hash. A
    partition is added by using the next stream name (Redis creates it with its first entry)."""

    def __init__(self, client: redis.Redis, topic: str, partitions: int) -> None:
        self.client, self.topic, self._partitions = client, topic, partitions

    def partitions(self) -> int:
        return self._partitions

    def append(self, partition: int, count: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        for i in range(count):
            pipe.xadd(f"{self.topic}:{partition}", {"value": b"r%d" % i})
        pipe.execute()

    def end(self, partition: int) -> int:
        last = self.client.xrevrange(f"{self.topic}:{partition}", count=1)
        return position_after(last[0][0]) if last else 0

    def offsets(self, partition: int, start: int, end: int) -> list[int]:
        found = [offset_of(entry_id) for entry_id, _ in self.client.xrange(f"{self.topic}:{partition}")]
        return [o for o in found if start <= o < end]

    def add_partition(self) -> int:
        self._partitions += 1
        return self._partitions - 1

    def committed_offsets(self) -> dict[int, int] | None:
        stored = self.client.hgetall(f"{self.topic}:committed")
        return {int(p): position_after(entry_id) for p, entry_id in stored.items()}


@pytest.fixture
def conformance_kit(redis_server: RedisServer, unique: Callable[[str], str]) -> Iterator[ConnectorKit]:
    client = redis.Redis.from_url(redis_server.url)
    backend = RedisBackend(client, unique("conformance"), 4)

    config = RedisStreamsConfig.from_properties({"redis-url": redis_server.url, "stream": backend.topic, "partitions": "4"})
    yield ConnectorKit(backend, lambda: RedisStreamsSource(config), ConnectorConfig(CONNECTOR_NAME, config.properties()),
                       read_timeout_s=20.0)
    client.close()


conformance_tests(globals())
