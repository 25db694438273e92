"""The Redis Streams connector names its checkpoints "redis" and reads those 0.1.0 stamped "kafka"."""
from __future__ import annotations

import pytest

from laminar_kafka.connector import UNNAMED, CheckpointError, SourceCheckpoint
from laminar_kafka.redis_source import RedisStreamsConfig, RedisStreamsSource
from laminar_kafka.redis_source.checkpoint import REDIS_CURSORS

CONFIG = RedisStreamsConfig.from_properties({"redis.url": "redis://127.0.0.1:1/0", "stream": "orders", "partitions": "2"})


def test_a_generation_stamps_its_checkpoints_redis() -> None:
    source = RedisStreamsSource(CONFIG)  # no I/O before start
    source.cursor = {("orders", 0): 5, ("orders", 1): 0}
    checkpoint = source.checkpoint()
    assert checkpoint.connector == "redis"
    assert checkpoint.offsets == {"orders:0": 5, "orders:1": 0}
    assert SourceCheckpoint.from_bytes(checkpoint.to_bytes()) == checkpoint


@pytest.mark.parametrize("name", ["redis", "kafka", UNNAMED])
def test_redis_reads_its_own_the_releases_and_the_runtimes_checkpoints(name: str) -> None:
    checkpoint = SourceCheckpoint({"orders:0": 7}, 2, name)
    assert RedisStreamsSource.cursor_format.accept(checkpoint) is checkpoint


def test_redis_refuses_another_connectors_checkpoint() -> None:
    with pytest.raises(CheckpointError, match="belongs to connector 'memory', not 'redis'"):
        REDIS_CURSORS.accept(SourceCheckpoint({"orders:0": 7}, 2, "memory"))
