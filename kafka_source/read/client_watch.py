"""Noticing a Kafka consumer that reaches no broker any more, and what replaces it.

A consumer can end up knowing no broker and never learn one again, with no error: librdkafka (2.10
and later) decommissions every broker missing from a metadata answer, and a broker fenced for a
moment (a frozen or overloaded single broker misses its controller heartbeats) answers once with no
broker at all. Measured with librdkafka 2.16 in the container fault test that pauses the broker for
6 s (one run in four): the decommissioned broker's handle never finished terminating, so the client
never bootstrapped again (``metadata.recovery.rebootstrap.trigger.ms`` did not help) and even
``close()`` hung. The node went on acking empty epochs while its partitions' records waited, until
it was stopped. A client of the same process whose broker handle did terminate bootstrapped again at
once.

The reader therefore watches its own progress: once no record and no position moved for
:data:`STALL_S` while some partition is fetchable, it *probes* the client with one metadata request
(:data:`PROBE_TIMEOUT_S`). A healthy client answers in milliseconds (the partitions are merely
quiet) and the next probe waits another :data:`STALL_S`. A client that cannot answer is replaced: a
new consumer is assigned every partition at the position the reader has handed out
(:func:`replacement_assignment`), so reading goes on exactly where it stopped, and the old one is
closed on a thread of its own (:func:`close_in_background`), where it may hang without holding the
reader. While Kafka is really down every probe fails; the consumer is replaced after 15, 30, 60...
up to :data:`MAX_WAIT_S` seconds (:class:`StallWatch`), and the newest one reads when Kafka is back.

The node's other long-lived clients (the topology reader's admin client, the watermark consumer of
the lag metrics) are kept by a :class:`ClientKeeper`: when a call fails and none answered for
:data:`STALL_S`, the client is replaced by a new one (same doubling wait), the old one dropped aside.

The decisions are pure; :func:`replace_consumer` is the reader's one client step, and the keeper's
replacement the other.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

__all__ = ["MAX_WAIT_S", "PROBE_TIMEOUT_S", "STALL_S", "ClientKeeper", "StallWatch", "close_in_background",
           "discard_in_background", "replace_consumer", "replacement_assignment"]

#: How long the reader may see nothing move on a fetchable partition before it probes its client.
STALL_S = 15.0
#: How long a probe (one metadata request for one topic) may take before the client counts as lost.
PROBE_TIMEOUT_S = 2.0
#: The longest wait between probes while replacements bring nothing (Kafka down for long).
MAX_WAIT_S = 240.0


@dataclass
class StallWatch:
    """When the reader should probe its client: after ``stall_s`` without progress while fetching,
    then every ``stall_s`` while the quiet lasts; after each probe that replaced the client the wait
    doubles, up to :data:`MAX_WAIT_S`, until records or moved positions come again (a long Kafka
    outage replaces the consumer a few times an hour, not every ``stall_s``: a lost client's close may
    never return, and each one left closing holds its threads). Times are ``time.monotonic()`` seconds."""

    stall_s: float = STALL_S
    #: since when nothing moved (a record, a moved position), or the assignment last changed
    quiet_since: float = 0.0
    #: the quiet that makes a probe due: ``stall_s``, doubled by each replacement without progress since
    wait_s: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.wait_s = self.wait_s or self.stall_s

    def waited(self, now: float) -> bool:
        """Whether the quiet lasted the wait (the cheap test the reader makes every turn)."""
        return now - self.quiet_since >= self.wait_s

    def progressed(self, now: float) -> None:
        """Records or a moved position: the client works; the quiet starts again at ``stall_s``."""
        self.quiet_since, self.wait_s = now, self.stall_s

    def restarted(self, now: float) -> None:
        """Partitions acquired, resumed or sought: the quiet starts again (the wait is kept)."""
        self.quiet_since = now

    def probe_due(self, now: float, fetching: bool) -> bool:
        """Whether to probe now: some partition is fetchable (assigned, not paused for a drain) and
        the quiet lasted the wait. A partition-less or fully paused reader is never probed (it
        expects nothing), and its quiet restarts, so fetching again waits the whole wait."""
        if not fetching:
            self.quiet_since = now
            return False
        return self.waited(now)

    def probed(self, now: float, *, replaced: bool) -> None:
        """A probe ran: answered (the next one waits the same), or its client was ``replaced`` (the
        next one waits twice as long, up to :data:`MAX_WAIT_S`)."""
        self.quiet_since = now
        if replaced:
            self.wait_s = min(2 * self.wait_s, max(MAX_WAIT_S, self.stall_s))


def replacement_assignment(
    assigned: Iterable[TopicPartitionId],
    consumed: Mapping[TopicPartitionId, int],
    reported: Mapping[TopicPartitionId, int],
    blocked: frozenset[TopicPartitionId],
) -> tuple[list[KafkaTopicPartition], list[KafkaTopicPartition]]:
    """The assignment of a consumer that replaces a lost one, and the partitions it pauses.

    ``consumed``: the lost consumer's positions (the offset after the last message it handed to the
    reader; negative when it handed none since the partition was assigned or sought); ``reported``:
    the positions the reader reported (every record it put is below them). A fetchable partition
    starts at ``consumed`` (which also covers a move past transaction markers not reported yet), else
    at ``reported``: either way right after the last record put, so none is read twice or skipped. A
    *blocked* partition (paused for a drain: its records after the boundary were dropped) starts at
    ``reported`` (its boundary) and stays paused until the drain resumes it (which seeks) or
    releases it. Pure.
    """
    assignment: list[KafkaTopicPartition] = []
    paused: list[KafkaTopicPartition] = []
    for topic, partition in sorted(assigned):
        key = (topic, partition)
        offset = consumed.get(key, -1)
        if key in blocked or offset < 0:
            offset = reported[key]
        assignment.append(KafkaTopicPartition(topic, partition, offset))
        if key in blocked:
            paused.append(KafkaTopicPartition(topic, partition))
    return assignment, paused


class _Closable(Protocol):
    def close(self) -> None: ...


def close_in_background(consumer: _Closable) -> threading.Thread:
    """Close ``consumer`` on a daemon thread (a lost client's ``close()`` may never return), logging
    a failure; returns the started thread."""

    def close() -> None:
        try:
            consumer.close()
        except Exception:  # a lost client's close is best effort
            logger.warning("closing the replaced kafka consumer failed", exc_info=True)
        else:
            logger.info("the replaced kafka consumer closed")

    thread = threading.Thread(target=close, name="kafka-consumer-close", daemon=True)
    thread.start()
    return thread


def replace_consumer(
    lost: Consumer,
    factory: Callable[[], Consumer],
    assigned: Mapping[TopicPartitionId, KafkaTopicPartition],
    reported: Mapping[TopicPartitionId, int],
    blocked: frozenset[TopicPartitionId],
) -> Consumer:
    """A consumer from ``factory`` assigned every partition of ``assigned`` where the ``lost`` one
    left off (:func:`replacement_assignment`; its positions are local state, read without a broker),
    paused where ``blocked``; ``lost`` is then closed aside (:func:`close_in_background`). Reader
    thread only. On failure the new consumer is closed aside and ``lost`` is left as it was."""
    keys = sorted(assigned)
    try:
        consumed = {(tp.topic, tp.partition): tp.offset for tp in lost.position([assigned[k] for k in keys])}
    except KafkaException:
        consumed = {}  # the reported positions are exact too (every record put is below them)
    assignment, paused = replacement_assignment(keys, consumed, reported, blocked)
    new = factory()
    try:
        new.assign(assignment)
        if paused:
            new.pause(paused)
    except BaseException:
        close_in_background(new)
        raise
    close_in_background(lost)
    return new


def discard_in_background(client: object, delay_s: float = 1.0) -> threading.Thread:
    """Drop a reference to ``client`` (an admin client: it has no ``close``) on a daemon thread,
    ``delay_s`` after the call: by then the caller let go of its own (it must keep none), so
    librdkafka's destruction of a lost client, which may hang, happens on that thread. Returns it."""

    def drop(*_held: object) -> None:
        time.sleep(delay_s)  # the thread's arguments, the last reference, go when it returns

    thread = threading.Thread(target=drop, args=(client,), name="kafka-client-discard", daemon=True)
    del client
    thread.start()
    return thread


T = TypeVar("T")


class ClientKeeper(Generic[T]):
    """A long-lived client (``make()`` builds one) that is replaced at a failed call once none
    answered for ``stall_s`` (since the last that did, or since the client was made), the old one
    handed to ``discard`` (which must not block: :func:`close_in_background`,
    :func:`discard_in_background`); each replacement without an answer since doubles the wait, as
    :class:`StallWatch` does. The caller reports every call's outcome; one thread at a time.

    Like the reader's consumer, an admin client or a watermark consumer can lose every broker for good
    (module docstring); unlike it, their calls fail (time out) and are retried by their callers, so
    those failures are the probe.
    """

    def __init__(self, make: Callable[[], T], discard: Callable[[T], object], stall_s: float = STALL_S,
                 clock: Callable[[], float] | None = None) -> None:
        self._make, self._discard = make, discard
        self._clock = clock or time.monotonic
        self._watch = StallWatch(stall_s, quiet_since=self._clock())
        self.client: T = make()
        #: clients replaced so far
        self.replaced = 0

    def succeeded(self) -> None:
        """A call answered: the client works."""
        self._watch.progressed(self._clock())

    def failed(self, cause: BaseException) -> bool:
        """A call failed (``cause``); returns whether the client was replaced by this call."""
        now = self._clock()
        if not self._watch.waited(now):
            return False
        quiet_s = now - self._watch.quiet_since
        old, self.client = self.client, self._make()
        self._discard(old)
        del old
        self._watch.probed(now, replaced=True)
        self.replaced += 1
        logger.warning("no call of a kafka client answered for %.0f s (the last: %s): replaced by a new one",
                       quiet_s, cause)
        return True
