"""An assignment-scoped source over Redis Streams, run by the same cluster runtime as Kafka.

The third connector of the protocol (beside :class:`~laminar_kafka.kafka_source.KafkaSource` and the
in-memory reference): partition ``n`` of a stream family ``s`` is the Redis stream ``s:n``. It passes
the conformance kit against a real Redis server, and ``laminar-kafka redis`` (:mod:`laminar_kafka.cli.redis`)
runs it as a node of a ZooKeeper-coordinated pipeline landing a Parquet tree (``laminar-kafka redis --help``). Needs the ``redis`` extra (``redis>=5``).
"""
from laminar_kafka.redis_source.config import RedisStreamsConfig
from laminar_kafka.redis_source.errors import (
    RedisCommandError,
    RedisConfigError,
    RedisSourceError,
    RedisUnavailable,
    StreamIdError,
)
from laminar_kafka.redis_source.source import RedisStreamsSource

__all__ = [
    "RedisCommandError", "RedisConfigError", "RedisSourceError", "RedisStreamsConfig", "RedisStreamsSource",
    "RedisUnavailable", "StreamIdError",
]
