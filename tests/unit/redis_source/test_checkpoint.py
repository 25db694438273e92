"""The Redis Streams connector has one name, "redis-streams": its connector type and its checkpoints'.
It reads the checkpoints 0.1.0 stamped "kafka" only when every key is of its stream family."""
from __future__ import annotations

import pytest

from laminar_kafka.connector import UNNAMED, CheckpointError, SourceCheckpoint
from laminar_kafka.redis_source import RedisStreamsConfig, RedisStreamsSource
from laminar_kafka.redis_source.checkpoint import CONNECTOR_NAME, REDIS_CURSORS, redis_cursors

CONFIG = RedisStreamsConfig.from_properties({"redis-url": "redis://127.0.0.1:1/0", "stream": "orders", "partitions": "2"})


def test_the_connector_type_and_the_checkpoint_name_are_one_name() -> None:
    import inspect

    from laminar_kafka.cli import redis as cli

    assert CONNECTOR_NAME == "redis-streams" == REDIS_CURSORS.name
    # the CLI's pipeline config names the connector with that constant, not a literal of its own
    assert "ConnectorConfig(CONNECTOR_NAME," in inspect.getsource(cli.build_redis_runtime)


def test_a_generation_stamps_its_checkpoints_with_the_connector_name() -> None:
    source = RedisStreamsSource(CONFIG)  # no I/O before start
    source.cursor = {("orders", 0): 5, ("orders", 1): 0}
    checkpoint = source.checkpoint()
    assert checkpoint.connector == "redis-streams"
    assert checkpoint.offsets == {"orders:0": 5, "orders:1": 0}
    assert SourceCheckpoint.from_bytes(checkpoint.to_bytes()) == checkpoint


@pytest.mark.parametrize("name", ["redis-streams", "kafka", UNNAMED])
def test_redis_reads_its_own_the_releases_and_the_runtimes_checkpoints(name: str) -> None:
    checkpoint = SourceCheckpoint({"orders:0": 7, "orders:1": 2}, 2, name)
    assert RedisStreamsSource(CONFIG).cursor_format.accept(checkpoint) is checkpoint


def test_a_kafka_named_checkpoint_with_keys_of_another_family_is_refused() -> None:
    source = RedisStreamsSource(CONFIG)
    with pytest.raises(CheckpointError, match=r"read by the Redis source of stream 'orders' only when.*\['payments'\]"):
        source.cursor_format.accept(SourceCheckpoint({"orders:0": 7, "payments:0": 1}, 2, "kafka"))
    with pytest.raises(CheckpointError, match="only when"):
        REDIS_CURSORS.accept(SourceCheckpoint({"orders:0": 7}, 2, "kafka"))  # no family known: never
    # its own and unnamed checkpoints are not narrowed (the runtime's manifests hold its keys)
    assert redis_cursors("orders").accept(SourceCheckpoint({"payments:0": 1}, 0, UNNAMED)).connector == UNNAMED


def test_redis_refuses_another_connectors_checkpoint() -> None:
    with pytest.raises(CheckpointError, match="belongs to connector 'memory', not 'redis-streams'"):
        REDIS_CURSORS.accept(SourceCheckpoint({"orders:0": 7}, 2, "memory"))
