"""Advisory offset commits: durable cursors copied to the consumer group for lag dashboards.

The epoch is already durable when a commit is asked for, so nothing here raises: a failure is
logged and counted in ``metrics.commit_failures`` (the next epoch's commit carries newer offsets).
A group offset never moves backwards: commits go only above the highest offset known committed
(read from the group at the first commit and again after an acquisition, then tracked from the
client's commit callbacks).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import ConnectorError, TransientError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.reader import Reader

logger = logging.getLogger(__name__)

__all__ = ["AdvisoryCommits"]


class AdvisoryCommits:
    """The advisory group-offset commits of one source generation.

    :meth:`on_commit` is the client's commit callback (it runs on the reader thread inside
    ``consume``); everything else runs on the event loop, except :meth:`load` (a reader-thread
    command or a startup call).
    """

    def __init__(self, metrics: SourceMetrics, request_timeout_s: float) -> None:
        self._metrics = metrics
        self._request_timeout_s = request_timeout_s
        #: Highest offset known committed to the group per partition.
        self.committed: dict[TopicPartitionId, int] = {}
        #: Whether :attr:`committed` was read from the group for every partition read now.
        self.loaded = False
        self._lock = asyncio.Lock()
        #: The result of the commit in flight, set by :meth:`on_commit`.
        self.pending: concurrent.futures.Future[None] | None = None

    def awaiting_result(self) -> bool:
        """Whether a commit waits for its callback (read by the reader thread)."""
        pending = self.pending
        return pending is not None and not pending.done()

    def load(self, consumer: Consumer, partitions: Iterable[TopicPartitionId]) -> None:
        """Read the group's committed offsets of ``partitions`` (blocking client call)."""
        committed = consumer.committed(
            [KafkaTopicPartition(t, p) for t, p in partitions], timeout=self._request_timeout_s
        )
        for tp in committed:
            if tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self.committed[key] = max(self.committed.get(key, -1), tp.offset)
        self.loaded = True

    def forget(self, partitions: Iterable[TopicPartitionId]) -> None:
        """Another node may have committed past what we knew for ``partitions`` (acquired again):
        read the group before the next commit."""
        for tp in partitions:
            self.committed.pop(tp, None)
        self.loaded = False

    async def commit(
        self,
        epoch: int,
        checkpoint: SourceCheckpoint,
        reader: Reader,
        *,
        readable: Callable[[], Collection[TopicPartitionId]],
        moved_since: Callable[[int], frozenset[TopicPartitionId]],
        closed: Callable[[], bool],
    ) -> None:
        """Commit ``checkpoint``'s offsets of the partitions in ``readable()`` not in
        ``moved_since(checkpoint.assignment_version)``, above the highest committed so far.

        Serialised; a no-op once ``closed()``. The commit is issued by the reader thread and its
        result awaited up to the request timeout. Never raises a connector or client error.
        """
        async with self._lock:
            if closed():
                return
            offsets = checkpoint.partitions()
            try:
                if not self.loaded:
                    await asyncio.wait_for(
                        asyncio.wrap_future(reader.submit(lambda consumer: self.load(consumer, readable()))),
                        self._request_timeout_s,
                    )
                moved = moved_since(checkpoint.assignment_version)
                current = readable()
                todo = [
                    KafkaTopicPartition(t, p, o)
                    for (t, p), o in sorted(offsets.items())
                    if (t, p) in current and (t, p) not in moved and o > self.committed.get((t, p), -1)
                ]
                if not todo:
                    return
                done: concurrent.futures.Future[None] = concurrent.futures.Future()
                self.pending = done
                deadline = time.monotonic() + self._request_timeout_s
                # Issuing the commit can fail at once (reader stopped, client error): surface that
                # error now rather than waiting out the timeout for a callback that never comes.
                await asyncio.wait_for(
                    asyncio.wrap_future(
                        reader.submit(lambda consumer: consumer.commit(offsets=todo, asynchronous=True))
                    ),
                    self._request_timeout_s,
                )
                await asyncio.wait_for(asyncio.wrap_future(done), max(0.0, deadline - time.monotonic()))
                self._metrics.commits += 1
            except (KafkaException, ConnectorError, RuntimeError, asyncio.TimeoutError) as exc:
                self._metrics.commit_failures += 1
                logger.warning("advisory offset commit of epoch %d failed: %r", epoch, exc)
            finally:
                self.pending = None

    async def quiesce(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a commit in flight to finish (before closing)."""
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout_s)
            self._lock.release()
        except asyncio.TimeoutError:
            logger.warning("closing while an advisory commit is still running")

    def on_commit(self, error: Any, partitions: list[KafkaTopicPartition]) -> None:
        """librdkafka commit callback (runs on the reader thread inside ``consume``)."""
        failed = [tp for tp in partitions or [] if tp.error is not None]
        for tp in partitions or []:
            if tp.error is None and error is None and tp.offset >= 0:
                key = (tp.topic, tp.partition)
                self.committed[key] = max(self.committed.get(key, -1), tp.offset)
        pending = self.pending
        if pending is None or pending.done():
            return
        # The awaiting side may cancel ``pending`` (its timeout) between the check above and the
        # set below; an exception escaping this callback would fail the reader thread.
        try:
            if error is not None or failed:
                detail = error if error is not None else [(tp.topic, tp.partition, str(tp.error)) for tp in failed]
                pending.set_exception(TransientError(f"offset commit failed: {detail}", cause=error))
            else:
                pending.set_result(None)
        except concurrent.futures.InvalidStateError:
            pass  # the waiter gave up (timeout or cancellation)
