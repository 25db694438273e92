"""A real Redis server (Debian's redis-server, a local process) for the Redis Streams connector's
tests: one per test module, append-only so a SIGKILLed server keeps its streams."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from laminar_kafka.devstack.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(directory=tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()
