"""The Redis Streams connector's checkpoints: named ``"redis"`` (pure, no I/O).

Keys are ``"<stream family>:<partition>"`` and positions packed entry IDs
(:mod:`laminar_kafka.redis_source.ids`: every integer in ``[0, 2**63)`` is a valid position, so the
default cursor check is exact). Release 0.1.0 stamped the checkpoints of Redis pipelines
``"kafka"`` (the checkpoint then knew one connector); they are read as Redis's own.
"""
from __future__ import annotations

from laminar_kafka.connector.checkpoint import CursorFormat

__all__ = ["CONNECTOR_NAME", "REDIS_CURSORS"]

#: the Redis Streams connector's name: its checkpoints' ``connector``
CONNECTOR_NAME: str = "redis"
#: Redis's cursor format; reads the checkpoints 0.1.0 wrote for Redis pipelines, named "kafka"
REDIS_CURSORS: CursorFormat = CursorFormat(CONNECTOR_NAME, also_reads=frozenset({"kafka"}))
