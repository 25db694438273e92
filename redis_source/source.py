"""``RedisStreamsSource``: an assignment-scoped source over Redis Streams, one stream per partition.

The protocol (exact start and resume, vnode ownership, drains and acquisition, advisory commits)
is :class:`~laminar_kafka.connector.log_source.PartitionedLogSource`'s; this module
gives it Redis: partition ``n`` of stream family ``s`` is the stream ``s:n``, an entry's offset is its
ID packed into an integer (:mod:`laminar_kafka.redis_source.ids`), a poll is one ``XREAD`` (no
``BLOCK``) over the partitions read, and advisory offsets go to a hash, never backwards (one Lua
script, atomic on the server). Everything is asyncio (``redis.asyncio``): the event loop never
blocks and the generation starts no thread (no task tracker).

A Redis error ends the generation and the node runtime builds the next one from the last durable
checkpoint, so a lost connection or a restarted server costs a re-read of the uncommitted tail,
never a lost or doubled row. A server that does not answer is
:class:`~laminar_kafka.redis_source.errors.RedisUnavailable` (transient: retried for as long as the
outage lasts); an error the server answers is
:class:`~laminar_kafka.redis_source.errors.RedisCommandError` (counted; the node stops after
``max_generation_failures`` in a row). Each names the server (without its password) and the call.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import redis.asyncio as aioredis
from redis.exceptions import BusyLoadingError, ConnectionError, RedisError, TimeoutError

from laminar_kafka.connector.log_source import PartitionedLogSource, PartitionRead
from laminar_kafka.connector.protocol import ConnectorCancellationPolicy, SourceStart
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.redis_source.checkpoint import REDIS_CURSORS, redis_cursors
from laminar_kafka.redis_source.config import RedisStreamsConfig
from laminar_kafka.redis_source.errors import RedisCommandError, RedisSourceError, RedisUnavailable
from laminar_kafka.redis_source.ids import offset_of, position_after, read_from

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript
    from redis.typing import KeyT, StreamIdT

logger = logging.getLogger(__name__)

__all__ = ["ADVANCE_SCRIPT", "RedisStreamsSource", "redacted"]

#: KEYS[1]: the advisory hash; ARGV: partition, entry ID, partition, entry ID... Stores each ID
#: unless the stored one is later (IDs compare as (milliseconds, sequence) pairs).
ADVANCE_SCRIPT = """
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then return true end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
for i = 1, #ARGV, 2 do
  local stored = redis.call('HGET', KEYS[1], ARGV[i])
  if not stored or later(ARGV[i + 1], stored) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 0
"""


def redacted(url: str) -> str:
    """``url`` without its password (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _streams_of(reply: object) -> list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """XREAD's answer as (stream key, entries) pairs: RESP2 gives a list of ``[key, entries]``, RESP3
    (a URL with ``protocol=3``) a map of key to ``[entries]``."""
    if isinstance(reply, dict):
        return [(key, value[0] if value and isinstance(value[0], list) else value) for key, value in reply.items()]
    if isinstance(reply, list):
        return [(key, entries) for key, entries in reply]
    return []  # None: nothing arrived before the block timeout


class RedisStreamsSource(PartitionedLogSource):
    """One generation reading ``config.partitions`` streams ``<stream>:<n>``; rows carry
    ``_topic`` (the stream family), ``_partition``, ``_offset`` (the packed entry ID) and ``value``
    (the entry's ``value-field``, binary; null when the entry lacks it). Its checkpoints name
    ``"redis-streams"``; it reads its own, unnamed ones, and those 0.1.0 stamped ``"kafka"`` whose
    keys are all of ``config.stream`` (:func:`~laminar_kafka.redis_source.checkpoint.redis_cursors`)."""

    cursor_format = REDIS_CURSORS
    value_type = pa.binary()

    def __init__(self, config: RedisStreamsConfig,
                 cancellation: ConnectorCancellationPolicy = ConnectorCancellationPolicy.RETIRE_CONNECTOR) -> None:
        super().__init__(cancellation=cancellation)
        self.config = config
        self.cursor_format = redis_cursors(config.stream)
        self._partitions = tuple((config.stream, p) for p in range(config.partitions))
        self._key_partition = {config.stream_key(p).encode(): (config.stream, p) for p in range(config.partitions)}
        self._field = config.value_field.encode()
        self._client: aioredis.Redis | None = None
        self._advance: AsyncScript | None = None
        self._turn = 0

    def _where(self) -> str:
        return f"Redis {redacted(self.config.url)}"

    def _error(self, call: str, exc: RedisError) -> RedisSourceError:
        """The connector's error for ``exc``, raised by ``call``: unavailable or answered."""
        if isinstance(exc, (ConnectionError, TimeoutError, BusyLoadingError)):
            return RedisUnavailable(f"{call} on {self._where()}: the server does not answer ({exc})")
        return RedisCommandError(f"{call} on {self._where()}: {exc}")

    async def start(self, request: SourceStart) -> None:
        """Connects (one ``PING``: a server that does not answer fails the start in one line), then
        starts at the resume cursors (the streams' beginnings when there are none)."""
        client = aioredis.Redis.from_url(self.config.url, socket_timeout=self.config.timeout_s,
                                         socket_connect_timeout=self.config.timeout_s)
        try:
            await client.ping()
        except RedisError as exc:
            await client.aclose()
            raise self._error("PING", exc) from exc
        self._client = client
        self._advance = client.register_script(ADVANCE_SCRIPT)
        await super().start(request)

    async def close(self) -> None:
        await super().close()
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except RedisError as exc:  # the generation is over either way
                logger.warning("closing the %s client: %s", self._where(), exc)

    def log_partitions(self) -> Iterable[TopicPartitionId]:
        return self._partitions

    def add_partitions(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Outside vnode mode, streams ``<stream>:<n>`` past the configured ones become partitions too,
        read from their start (Redis creates a stream with its first entry); other names are
        ignored. In vnode mode the set is fixed (ConfigurationError, as the reference's)."""
        wanted = list(partitions)
        if self._registry is None:
            for stream, partition in wanted:
                if stream == self.config.stream and partition >= 0 and (stream, partition) not in self._partitions:
                    self._partitions += ((stream, partition),)
                    self._key_partition[self.config.stream_key(partition).encode()] = (stream, partition)
        super().add_partitions(wanted)

    async def read_records(self, starts: Mapping[TopicPartitionId, int], max_records: int) -> list[PartitionRead]:
        """One ``XREAD COUNT max_records`` over every partition in ``starts``, from each position;
        at most ``max_records`` entries are kept in all, the partition served first turning each
        call so that none waits behind busier ones."""
        client = self._require_client()
        order = list(starts)
        self._turn = (self._turn + 1) % len(order)
        order = order[self._turn:] + order[:self._turn]
        streams: dict[KeyT, StreamIdT] = {self.config.stream_key(tp[1]): read_from(starts[tp]) for tp in order}
        try:
            reply = await client.xread(streams, count=max_records)
        except RedisError as exc:
            raise self._error(f"XREAD of {len(streams)} streams", exc) from exc
        reads: list[PartitionRead] = []
        left = max_records
        for key, entries in _streams_of(reply):
            if left <= 0:
                break
            if not entries:
                continue
            entries = entries[:left]
            left -= len(entries)
            reads.append(PartitionRead(
                self._key_partition[key],
                [offset_of(entry_id) for entry_id, _ in entries],
                [fields.get(self._field) for _, fields in entries],
                position_after(entries[-1][0]),
            ))
        return reads

    async def commit_advisory(self, offsets: Mapping[TopicPartitionId, int]) -> None:
        """Each partition's last landed entry ID into the advisory hash, never backwards. Advisory:
        a failure is logged and left for the next committed epoch, which carries every cursor; a
        closed generation writes nothing (its successor will)."""
        client = self._client
        if client is None:
            return
        args: list[str] = []
        for (_stream, partition), cursor in sorted(offsets.items()):
            if cursor > 0:
                args += [str(partition), read_from(cursor)]
        if not args:
            return
        if self._advance is None:
            raise RedisCommandError("the generation is not started or already closed")
        try:
            await self._advance(keys=[self.config.advisory_key], args=args, client=client)
        except RedisError as exc:
            logger.warning("%s (advisory only; the next committed epoch writes them again)",
                           self._error(f"the advisory offsets into {self.config.advisory_key}", exc))

    def _require_client(self) -> aioredis.Redis:
        if self._client is None:
            raise RedisCommandError("the generation is not started or already closed")
        return self._client
