"""The Redis Streams connector's checkpoints: named ``"redis-streams"`` (pure, no I/O).

One name for one concept: :data:`CONNECTOR_NAME` is both the connector type a Redis pipeline's
:class:`~laminar_kafka.connector.protocol.ConnectorConfig` carries (``laminar-kafka redis``, since
0.1.0) and the ``connector`` its checkpoints are stamped with.

Keys are ``"<stream family>:<partition>"`` and positions packed entry IDs
(:mod:`laminar_kafka.redis_source.ids`: every integer in ``[0, 2**63)`` is a valid position, so the
default cursor check is exact). Release 0.1.0 stamped the checkpoints of Redis pipelines
``"kafka"`` (the checkpoint then knew one connector); a source reads such a checkpoint as its own
only when every key belongs to its configured stream family (:class:`RedisCursorFormat`), so a
Kafka source's checkpoint of other topics is still refused.
"""
from __future__ import annotations

from dataclasses import dataclass

from laminar_kafka.connector.checkpoint import CursorFormat, SourceCheckpoint
from laminar_kafka.connector.errors import CheckpointError

__all__ = ["CONNECTOR_NAME", "LEGACY_NAME", "REDIS_CURSORS", "RedisCursorFormat", "redis_cursors"]

#: the Redis Streams connector's name: its connector type and its checkpoints' ``connector``
CONNECTOR_NAME: str = "redis-streams"
#: what release 0.1.0 stamped on the checkpoints of Redis pipelines
LEGACY_NAME: str = "kafka"


@dataclass(frozen=True)
class RedisCursorFormat(CursorFormat):
    """Redis's cursor format for one stream family: its own and unnamed checkpoints are read as
    :class:`CursorFormat` reads them; a ``"kafka"``-named one (0.1.0's) only if every key is a
    partition of ``stream`` (else :class:`CheckpointError`). With ``stream`` empty (no family
    known: :data:`REDIS_CURSORS`) every ``"kafka"``-named checkpoint is refused."""

    stream: str = ""

    def accept(self, checkpoint: SourceCheckpoint) -> SourceCheckpoint:
        if checkpoint.connector == LEGACY_NAME:
            foreign = sorted({topic for (topic, _), _ in checkpoint if topic != self.stream})
            if foreign or not self.stream:
                raise CheckpointError(
                    f"a checkpoint named {LEGACY_NAME!r} (release 0.1.0) is read by the Redis source of stream "
                    f"{self.stream!r} only when all its keys are that stream's; it names {foreign[:8]}"
                )
        return super().accept(checkpoint)


def redis_cursors(stream: str) -> RedisCursorFormat:
    """The cursor format of a Redis source reading the stream family ``stream``."""
    return RedisCursorFormat(CONNECTOR_NAME, also_reads=frozenset({LEGACY_NAME}), stream=stream)


#: Redis's cursor format without a stream family (the class attribute; a source uses its own
#: :func:`redis_cursors` of its configured stream, which also reads 0.1.0's checkpoints)
REDIS_CURSORS: RedisCursorFormat = redis_cursors("")
