"""The reader thread: the only thread that touches the Kafka consumer once the source runs.

The reader thread is the only thread that calls ``Consumer.consume`` (and, at exit,
``Consumer.close``). Changes to the consumer's assignment are executed *by the reader thread*
between two ``consume`` calls (:meth:`Reader.submit`), so anything it pushes afterwards (a
:class:`PartitionsAssigned` marker, and in the drain work a boundary marker) is ordered after every
record fetched before the change: data and control travel in one FIFO and cannot overtake each other.

The FIFO and its items are in :mod:`~laminar_kafka.kafka_source.read.fifo`; the partitions held and
the commands that change them in :mod:`~laminar_kafka.kafka_source.read.assignment`; the catch-up
consumer partitions taken start on in :mod:`~laminar_kafka.kafka_source.read.catch_up`; settings and
callbacks in :mod:`~laminar_kafka.kafka_source.read.reader_seam`. Commands run while the FIFO is at
its cap; client callbacks (an advisory commit's result) come only inside ``consume``, so while one is
awaited a full FIFO still gets one-record ``consume`` calls, put past the cap.

Ownership changes (vnode mode) use two markers: :class:`DrainBoundary` (put by
:meth:`Reader.pause_for_drain` right after pausing the revoked partitions; from then on the reader
drops any record of a *blocked* partition and never reports its position, so nothing of it can
follow the boundary) and :class:`AssignmentApplied` (put by :meth:`Reader.change_assignment` after
releasing, rewinding and acquiring partitions; records of an acquired partition after it start at
the explicit cursor).
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from laminar_kafka.connector.errors import FatalError
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.read.assignment import ReaderPartitions
from laminar_kafka.kafka_source.read.catch_up import ReaderClients
from laminar_kafka.kafka_source.read.client_watch import PROBE_TIMEOUT_S, STALL_S, StallWatch, replace_consumer
from laminar_kafka.kafka_source.read.fifo import (
    MESSAGE_OVERHEAD_BYTES,
    AssignmentApplied,
    ByteBoundedFifo,
    DrainBoundary,
    ReaderFailed,
    RecordChunk,
)
from laminar_kafka.kafka_source.read.positions import read_on_after_out_of_range
from laminar_kafka.kafka_source.read.reader_seam import ReaderCallbacks, ReaderSettings
from laminar_kafka.kafka_source.read.startup import selected_topics

logger = logging.getLogger(__name__)

__all__ = ["CALL_MESSAGES", "Reader"]

#: Messages per ``Consumer.consume`` call. Message objects are tracked by the cyclic garbage
#: collector, which collects its youngest generation every 700 net allocations: 10,000 messages
#: alive at once were walked, promoted and walked again by full collections (about a third of the
#: reader thread's CPU in ``bench/bench_landing.py``). Calls this small let each call's messages be
#: turned into plain lists (:class:`~laminar_kafka.kafka_source.decode.records.Records`) and freed before that.
CALL_MESSAGES = 500

#: librdkafka does not end a waiting ``consume`` call when the first records of a partition assigned
#: (or resumed) just before arrive (measured: first records 100 ms after ``incremental_assign`` with
#: a 100 ms timeout, 5 ms with a 5 ms one). For :data:`FRESH_WINDOW_S` after partitions are taken the
#: reader waits in steps this short; they stay that long on the catch-up consumer, then are handed over.
FRESH_CONSUME_TIMEOUT_S = 0.005
FRESH_WINDOW_S = 1.0

#: A chunk reports the positions of the partitions it has records of; every partition's position
#: (one moves without records past transaction markers and aborted records) is read at most this
#: often: a position read per partition per chunk cost a node on 1,000 partitions a sixth of its
#: reader thread at 2,000 records/s.
POSITION_SWEEP_S = 0.5
#: A sweep that found nothing moved, with no records read since the last one, doubles the wait for
#: the next, up to this (records, or partitions acquired or resumed, bring it back): an idle node
#: on 1,000 partitions read every position twice a second for nothing. A position that moves
#: without records is reported at most this late: still inside a 2 s epoch.
POSITION_SWEEP_IDLE_S = 2.0


@dataclass
class _Command:
    fn: Callable[[Consumer], Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class Reader:
    """Owns ``consumer`` from :meth:`start` on: consumes in a loop into ``fifo``, executes
    submitted commands between ``consume`` calls, finds new partitions, and closes the consumer
    when stopped.

    ``assigned``: the partitions the consumer is assigned, at their positions; discovered ones start
    at their low watermark. ``callbacks``: the owner the thread asks and reports to. ``catch_up``: the
    consumer partitions taken start on (:mod:`~laminar_kafka.kafka_source.read.catch_up`), if any.
    """

    def __init__(
        self,
        consumer: Consumer,
        fifo: ByteBoundedFifo,
        assigned: Mapping[TopicPartitionId, int],
        settings: ReaderSettings,
        callbacks: ReaderCallbacks,
        catch_up: Consumer | None = None,
    ) -> None:
        #: the batching consumer and the catch-up one
        self.clients = ReaderClients(consumer, catch_up)
        self.fifo = fifo
        self.settings = settings
        self.callbacks = callbacks
        #: what the consumer holds; used by the reader thread alone once it runs
        self.partitions = ReaderPartitions(assigned)
        #: until this monotonic time, consume with :data:`FRESH_CONSUME_TIMEOUT_S`
        self.fresh_until = 0.0
        self._commands: collections.deque[_Command] = collections.deque()
        #: Guards ``_accepting`` with the append in :meth:`submit`: a command is run or cancelled, never left.
        self._commands_lock = threading.Lock()
        self._accepting = False
        self._stop = threading.Event()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="kafka-source-reader", daemon=True)
        self._next_discovery = time.monotonic() + settings.discovery_interval_s
        self._next_sweep = 0.0
        self._sweep_interval = POSITION_SWEEP_S
        #: when to probe the consumer: after ``stall_s`` without progress while fetching
        self._stall = StallWatch(STALL_S if settings.stall_s is None else settings.stall_s, quiet_since=time.monotonic())

    @property
    def consumer(self) -> Consumer:
        """The batching consumer: the one submitted commands (advisory commits) are given."""
        return self.clients.main

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> None:
        self._accepting = True
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to exit; it closes the consumer on its way out."""
        self._stop.set()
        self.fifo.wake()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, fn: Callable[[Consumer], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn(consumer)`` on the reader thread between two ``consume`` calls."""
        command = _Command(fn)
        with self._commands_lock:
            if self._stop.is_set() or not self._accepting:
                command.future.set_exception(FatalError("the reader thread is not running"))
                return command.future
            self._commands.append(command)
        self.fifo.wake()
        return command.future

    # -- commands (ReaderPartitions does the work; the marker is put here, in FIFO order) --------

    def pause_for_drain(
        self, round: AssignmentDrainId, revoked: frozenset[TopicPartitionId]
    ) -> concurrent.futures.Future[DrainBoundary]:
        """On the reader thread: put what the broker holds of ``revoked`` (read without the batch wait,
        bounded: :meth:`ReaderClients.read_before_pause`, past the FIFO's cap), pause and block them,
        then put a :class:`DrainBoundary`. Post: no record of a revoked partition follows the boundary
        and no later chunk reports a position for one, until :meth:`change_assignment` releases or resumes it.
        """

        def run(consumer: Consumer) -> DrainBoundary:
            held = self.partitions
            early = self.clients.read_before_pause(revoked & held.assigned.keys() - held.blocked, held.positions,
                                                   self.settings.chunk_records)
            if early:
                self._put(*self._read(early, any(map(Message.error, early))), over_cap=True)
            marker = self.partitions.pause(self.clients, round, revoked)
            self.fifo.put_control(marker)
            return marker

        return self.submit(run)

    def change_assignment(
        self,
        op_id: int,
        *,
        release: frozenset[TopicPartitionId] = frozenset(),
        acquire: Mapping[TopicPartitionId, int | None] | None = None,
        resume: Mapping[TopicPartitionId, int] | None = None,
        cancelled: threading.Event | None = None,
    ) -> concurrent.futures.Future[AssignmentApplied]:
        """On the reader thread: unassign ``release``; seek each partition of ``resume`` to its
        offset and resume it; assign ``acquire`` at its offsets (``None`` = the low watermark);
        then put an :class:`AssignmentApplied` marker and return it.

        If ``cancelled`` is set before the command runs, nothing happens and the future fails.
        """
        acquire = dict(acquire or {})
        resume = dict(resume or {})

        def run(consumer: Consumer) -> AssignmentApplied:
            if cancelled is not None and cancelled.is_set():
                raise FatalError(f"assignment change {op_id} was cancelled before it ran")
            marker = self.partitions.change(
                self.clients, op_id, release, acquire, resume, self.settings.metadata_timeout_s
            )
            if marker.acquired or marker.resumed:
                self._note_fresh()
            self.fifo.put_control(marker)
            return marker

        return self.submit(run)

    def assign_new(self, partitions: Iterable[TopicPartitionId]) -> concurrent.futures.Future[Any]:
        """Assign ``partitions`` not held yet at their low watermark (on the reader thread), as
        discovery does; the future's result is ``{tp: offset}`` of those assigned."""
        wanted = sorted(set(partitions))
        return self.submit(lambda _consumer: self._assign_new(wanted))

    def _assign_new(self, found: Iterable[TopicPartitionId]) -> dict[TopicPartitionId, int]:
        """Reader thread: assign each partition of ``found`` not held yet at its low watermark and
        announce it with a :class:`PartitionsAssigned` marker."""
        marker = self.partitions.add(self.clients, found, self.settings.metadata_timeout_s)
        if marker is None:
            return {}
        offsets = dict(marker.offsets)
        self._note_fresh()
        logger.info("assigned %d new partition(s) at their first offset: %s", len(offsets), sorted(offsets))
        self.fifo.put_control(marker)
        self.callbacks.partitions_discovered(len(offsets))
        return offsets

    # -- thread body ----------------------------------------------------------------------------

    def _run(self) -> None:
        settings = self.settings
        try:
            self.clients.warm([*self.partitions.assigned.values()][:1], settings.selector.names)
            while not self._stop.is_set():
                self._run_commands()
                if self.clients.held and time.monotonic() >= self.fresh_until:
                    self.clients.hand_over(self.partitions.positions, self.partitions.blocked)
                if settings.discovery_interval_s > 0 and time.monotonic() >= self._next_discovery:
                    self._discover()
                    self._next_discovery = time.monotonic() + settings.discovery_interval_s
                if self._failed:
                    self._stop.wait(settings.consume_timeout_s)
                    continue
                if not self.fifo.wait_for_space(self._stop, settings.consume_timeout_s):
                    self._stall.restarted(time.monotonic())  # not fetching: a full FIFO is no stall
                    if self.callbacks.callbacks_pending() and not self._stop.is_set():
                        self._serve_callbacks()
                    continue
                self._read_chunk()
                self._watch_client()
        except Exception as exc:  # surfaced to the source through the FIFO
            logger.exception("kafka source reader thread failed")
            self.fifo.put_control(ReaderFailed(FatalError(f"reader thread failed: {exc}", cause=exc)))
        finally:
            with self._commands_lock:
                self._accepting = False
            self._run_commands(cancel=True)
            try:
                self.clients.close()
            except Exception:  # closing is best effort
                logger.warning("closing the kafka consumer failed", exc_info=True)

    def _run_commands(self, cancel: bool = False) -> None:
        """Run the queued commands in order, then wake the asyncio side once (it may be waiting for one)."""
        if not self._commands:
            return
        while self._commands:
            command = self._commands.popleft()
            # A submitter that gave up cancelled the future (asyncio.wait_for over wrap_future does,
            # at its timeout or its own cancellation): the command is skipped, and the future can no
            # longer be cancelled once running (completing a cancelled one raised InvalidStateError,
            # which failed the reader thread, or on its way out kept it from closing the consumer).
            if not command.future.set_running_or_notify_cancel():
                continue
            if cancel:
                command.future.set_exception(FatalError("the reader thread stopped"))
                continue
            try:
                command.future.set_result(command.fn(self.consumer))
            except Exception as exc:  # noqa: BLE001 - delivered to the submitter
                command.future.set_exception(exc)
        self.fifo.notify_ready()

    def _serve_callbacks(self) -> None:
        """Let the client deliver an awaited callback (an advisory commit's result) while the FIFO
        is at its cap: librdkafka serves callbacks only inside ``consume``, and the asyncio side
        may be waiting for the result without polling (intake held during a reconciliation).
        Takes at most one message, put past the cap in order (the cap exceeded by one record at most).
        """
        messages = self.consumer.consume(num_messages=1, timeout=0)
        self._put(*self._read(messages, any(map(Message.error, messages))), over_cap=True)

    def _read_chunk(self) -> None:
        """Consume up to ``chunk_records`` messages in calls of at most :data:`CALL_MESSAGES`
        (the first waits up to ``consume_timeout_s``, the others take only what is queued) and put
        them as one chunk. A call that brings a client error ends the chunk there."""
        parts: list[Records] = []
        nbytes = 0
        fresh = time.monotonic() < self.fresh_until
        wanted = self.settings.chunk_records
        timeout = FRESH_CONSUME_TIMEOUT_S if fresh else self.settings.consume_timeout_s
        while wanted > 0:
            call = min(CALL_MESSAGES, wanted)
            # the catch-up consumer's records first (without waiting), then the batching one's
            messages = self.clients.consume_catch_up(call)
            if len(messages) < call:
                messages += self.consumer.consume(num_messages=call - len(messages), timeout=timeout)
            if any(map(Message.error, messages)):
                self._put(parts, nbytes)  # what came before the error goes first
                parts, nbytes = self._read(messages, errors=True)
                break
            read, read_bytes = self._read(messages, errors=False)
            parts += read
            nbytes += read_bytes
            if len(messages) < call:  # nothing more queued
                break
            wanted -= call
            timeout = 0
        self._put(parts, nbytes)

    def _watch_client(self) -> None:
        """Probe a consumer that brought nothing for a while with one metadata request; replace it
        when it cannot answer (:mod:`~laminar_kafka.kafka_source.read.client_watch`)."""
        now = time.monotonic()
        if self.settings.stall_s is None or not self._stall.waited(now):
            return  # the common case, decided without walking the assignment
        fetching = self.partitions.fetching()
        if not self._stall.probe_due(now, bool(fetching)):
            return
        try:
            self.consumer.list_topics(fetching[0][0], timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            self._replace_consumer(exc, quiet_s=now - self._stall.quiet_since)
            self._stall.probed(time.monotonic(), replaced=True)
        else:
            self._stall.probed(time.monotonic(), replaced=False)

    def _replace_consumer(self, cause: KafkaException, quiet_s: float) -> None:
        held = self.partitions
        self.clients.release_all()  # the replacement takes every partition
        self.clients.main = replace_consumer(self.consumer, self.callbacks.new_consumer, held.assigned,
                                             held.positions, held.blocked)
        self._note_fresh()
        logger.warning("the kafka consumer fetched nothing for %.0f s and cannot reach a broker (%s): replaced by "
                       "a new one at the same positions of %d partition(s)", quiet_s, cause, len(held.assigned))
        self.callbacks.consumer_replaced()

    def _note_fresh(self) -> None:
        """Partitions were just acquired or resumed: consume in short waits for a while."""
        self.fresh_until = time.monotonic() + FRESH_WINDOW_S
        self._sweep_interval = POSITION_SWEEP_S
        self._stall.restarted(time.monotonic())

    def _read(self, messages: list[Message], errors: bool) -> tuple[list[Records], int]:
        """``messages`` without client errors (reported; ``errors``: whether any has one) and records of blocked
        partitions, as records (the messages are not kept: :data:`CALL_MESSAGES`) and their bytes."""
        good = messages
        if errors:
            good = [m for m in messages if m.error() is None]
            for message in messages:
                if message.error() is not None:
                    self._on_error(message)
        blocked = self.partitions.blocked
        if blocked and good:
            good = [m for m in good if (m.topic(), m.partition()) not in blocked]
        if not good:
            return [], 0
        return [Records.of(good, self.settings.fields)], sum(map(len, good)) + MESSAGE_OVERHEAD_BYTES * len(good)

    def _put(self, parts: list[Records], nbytes: int, *, over_cap: bool = False) -> None:
        """Put ``parts`` as one chunk with the positions moved since the last one (nothing when
        neither records nor positions moved)."""
        positions = self._moved_positions(parts)
        if not parts and not positions:
            return
        self._stall.progressed(time.monotonic())
        records = Records.concat(parts) if parts else Records([], [], [], [])
        if parts:
            self.callbacks.prefetch(records)
        self.fifo.put_chunk(RecordChunk(records, positions, nbytes), self._stop, over_cap=over_cap)

    def _moved_positions(self, parts: list[Records]) -> dict[TopicPartitionId, int]:
        """Positions moved since the last chunk: of the partitions ``parts`` has records of, and of every one
        when a sweep is due (:data:`POSITION_SWEEP_S`, relaxing to :data:`POSITION_SWEEP_IDLE_S` while idle)."""
        held = self.partitions
        if not held.assigned:
            return {}
        now = time.monotonic()
        if parts:
            self._sweep_interval = POSITION_SWEEP_S
            self._next_sweep = min(self._next_sweep, now + POSITION_SWEEP_S)
        if now >= self._next_sweep:
            moved = held.read_all_positions(self.clients)
            if not parts and not moved:
                self._sweep_interval = min(2 * self._sweep_interval, POSITION_SWEEP_IDLE_S)
            self._next_sweep = now + self._sweep_interval
            return held.with_jumps(moved)
        return held.with_jumps(held.read_positions_of(self.clients, parts))

    def _on_error(self, message: Message) -> None:
        """Handle the client error ``message`` carries: an out-of-range answer reads on or fails the
        reader, a fatal error fails it, any other is logged (the client retries)."""
        error = message.error()
        if error is None:
            return
        code = error.code()
        if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
            topic, partition = message.topic() or "?", message.partition() or 0
            at = message.offset()
            offset = at if at is not None and at >= 0 else self.partitions.positions.get((topic, partition), -1)
            try:
                self._read_on_after((topic, partition), offset, error)
            except OffsetOutOfRangeError as exc:
                self._failed = True
                self.fifo.put_control(ReaderFailed(exc))
        elif error.fatal():
            self._failed = True
            self.fifo.put_control(ReaderFailed(FatalError(f"fatal consumer error: {error.str()}", cause=error)))
        else:
            logger.warning("kafka consumer reported %s (retrying)", error.str())

    def _read_on_after(self, tp: TopicPartitionId, offset: int, answer: KafkaError) -> None:
        """A fetch of ``tp`` at ``offset`` was answered "out of range": read on where
        :meth:`ReaderCallbacks.read_on_at` says (the move reported with the next chunk), or raise
        :class:`OffsetOutOfRangeError` (always for a partition paused for a drain)."""
        held = self.partitions
        resolve = self.callbacks.read_on_at if tp in held.assigned and tp not in held.blocked else None
        resumed = read_on_after_out_of_range(self.clients, tp, offset, self.settings.metadata_timeout_s, resolve,
                                             answer)
        held.jumps[tp] = resumed
        self._note_fresh()
        if resumed > offset:
            self.callbacks.offsets_lost(resumed - offset)

    def _discover(self) -> None:
        try:
            topics = selected_topics(self.consumer, self.settings.selector, self.settings.metadata_timeout_s)
            self._assign_new((topic, p) for topic, info in topics.items() for p in info.partitions)
        except Exception:  # discovery retries at the next interval
            logger.warning("partition discovery failed; retrying later", exc_info=True)
