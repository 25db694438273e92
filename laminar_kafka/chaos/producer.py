"""The chaos campaign's producer: a fixed rate, round-robin over every (topic, partition) it was
given, idempotent with ``acks=all``; it records the offset of every acknowledged record (and, in
transactional mode, of every aborted one), so the audit can check the producer's own view too, not
only the topic's."""
from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from laminar_kafka.chaos.servers import ChaosError
from laminar_kafka.coordinator.codec import PartitionKey, format_partition_key
from laminar_kafka.kafka_source.clients import client_config, make_producer
from laminar_kafka.kafka_source.read.client_watch import discard_in_background

logger = logging.getLogger(__name__)

#: an idempotent producer with records outstanding and no delivery report this long is replaced
PRODUCER_STALL_S = 20.0

__all__ = ["ChaosProducer"]


class ChaosProducer:
    """Produces ``rate`` records per second over the partitions given to :meth:`add_partitions`.

    Idempotent mode: every record goes out with ``enable.idempotence`` and ``acks=all``; a record is
    *acknowledged* when its delivery report has no error, and its offset is kept in ``acked``.
    Transactional mode (``transactional_id`` set): records are written in transactions of
    ``txn_s`` seconds; a transaction is aborted with probability ``abort_ratio`` or when
    :meth:`request_aborts` asked for it; offsets of committed transactions go to ``acked``, of
    aborted ones to ``aborted``; a transaction whose outcome is unknown (a fatal error) goes to
    neither and is counted in ``uncertain``. A delivery report without an error but without an
    offset either is counted in ``without_offset`` and kept out of ``acked`` (its offset cannot be
    checked; librdkafka gave one for the second record produced into a topic created just before,
    and that record was not in the topic: the audit, which counts what the topic holds, was exact).
    Thread-safe counters; one producing thread.
    """

    def __init__(self, bootstrap: str, rate: int, *, transactional_id: str | None = None,
                 abort_ratio: float = 0.2, txn_s: float = 0.25, seed: int = 0) -> None:
        self._bootstrap = bootstrap
        self._rate = rate
        self._txn_id = transactional_id
        self._abort_ratio = abort_ratio
        self._txn_s = txn_s
        self._rng = random.Random(f"producer/{seed}")
        self._lock = threading.Lock()
        self._targets: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)
        self._producer = self._new_producer()
        self._abort_requests = 0
        self._pending: dict[PartitionKey, list[int]] = {}
        self.acked: dict[PartitionKey, list[int]] = {}
        self.aborted: dict[PartitionKey, list[int]] = {}
        self.produced = 0
        self.failed = 0
        self.uncertain = 0
        self.without_offset = 0
        self.transactions = {"committed": 0, "aborted": 0}
        self.error: str | None = None
        #: delivery reports received, and when the last one came (or nothing was outstanding)
        self._reports = 0
        self._last_report = time.monotonic()
        #: producers replaced because they knew no broker any more (:meth:`_replace_if_lost`)
        self.replaced = 0

    def _new_producer(self) -> Producer:
        config: dict[str, Any] = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", "log_level": 0}
        if self._txn_id:
            config["transactional.id"] = self._txn_id
            config["transaction.timeout.ms"] = 30000
        producer = make_producer(client_config(self._bootstrap), config)
        if self._txn_id:
            producer.init_transactions(60)
        return producer

    @property
    def transactional(self) -> bool:
        return self._txn_id is not None

    def add_partitions(self, topic: str, count: int, timeout: float = 30.0) -> None:
        """Produce to partitions ``0..count-1`` of ``topic`` from now on (once this producer's
        metadata shows them, so a produce never names an unknown partition)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = self._producer.list_topics(topic, timeout=5).topics.get(topic)
                if info is not None and info.error is None and len(info.partitions) >= count:
                    break
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise ChaosError(f"producer metadata does not show {count} partitions of {topic} after {timeout:.0f}s")
            time.sleep(0.2)
        with self._lock:
            known = {t for t in self._targets}
            self._targets += [(topic, p) for p in range(count) if (topic, p) not in known]

    def request_aborts(self, count: int) -> None:
        """Abort the next ``count`` transactions (transactional mode)."""
        with self._lock:
            self._abort_requests += count

    def start(self) -> ChaosProducer:
        self._thread.start()
        return self

    @property
    def acked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        key = format_partition_key(msg.topic(), msg.partition())
        offset = msg.offset()
        with self._lock:
            self._reports += 1
            self._last_report = time.monotonic()
            if err is not None:
                self.failed += 1
            elif offset is None or offset < 0:
                self.without_offset += 1
            elif self._txn_id:
                self._pending.setdefault(key, []).append(offset)
            else:
                self.acked.setdefault(key, []).append(offset)

    def _message(self, topic: str, partition: int) -> tuple[bytes | None, bytes | None]:
        """The key and value of the next record (for ``topic:partition``): no key, an opaque value
        numbered by :attr:`produced`. Called on the producing thread only, once per record produced
        (a record the client refuses is asked for again: :mod:`laminar_kafka.chaos.cdc.producer`
        keeps its change for the next call)."""
        return None, b"chaos-%012d" % self.produced

    def _produce_due(self, started: float, until: float | None = None) -> None:
        due = int((time.monotonic() - started) * self._rate)
        while self.produced < due and not self._stop.is_set():
            if until is not None and time.monotonic() > until:
                return
            with self._lock:
                targets = list(self._targets)
            if not targets:
                return
            topic, partition = targets[self.produced % len(targets)]
            key, value = self._message(topic, partition)
            try:
                self._producer.produce(topic, key=key, value=value, partition=partition,
                                       on_delivery=self._delivered)
                self.produced += 1
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:  # e.g. an unknown partition right after growth
                logger.debug("produce failed: %s", exc)
                self._producer.poll(0.05)
        self._producer.poll(0)

    def _run(self) -> None:
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                if self._txn_id:
                    self._one_transaction(started)
                else:
                    self._produce_due(started)
                    self._producer.poll(0.01)
                    self._replace_if_lost()
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self.error = f"producer thread failed: {exc!r}"
            logger.error("%s", self.error)

    def _replace_if_lost(self) -> None:
        """Idempotent mode: records outstanding and no delivery report for :data:`PRODUCER_STALL_S`:
        the producer may know no broker any more (a broker-freeze;
        :mod:`laminar_kafka.kafka_source.read.client_watch`), so produce on with a new one. The old one
        is destroyed aside: its records land or fail there (the audit counts what the topic holds)."""
        now = time.monotonic()
        with self._lock:
            if self.produced <= self._reports:
                self._last_report = now
                return
            if now - self._last_report < PRODUCER_STALL_S:
                return
            # the old producer's outstanding records are no longer awaited (their reports may never come)
            self._last_report, self._reports = now, self.produced
        old, self._producer = self._producer, self._new_producer()
        discard_in_background(old)
        del old
        self.replaced += 1
        logger.warning("the chaos producer got no delivery report for %.0f s: replaced by a new one", PRODUCER_STALL_S)

    def _settle(self, committed: bool | None) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            if committed is None:
                self.uncertain += sum(len(v) for v in pending.values())
                return
            into = self.acked if committed else self.aborted
            for key, offsets in pending.items():
                into.setdefault(key, []).extend(offsets)
            self.transactions["committed" if committed else "aborted"] += 1

    def _one_transaction(self, started: float) -> None:
        producer = self._producer
        producer.begin_transaction()
        ends = time.monotonic() + self._txn_s
        while time.monotonic() < ends and not self._stop.is_set():
            self._produce_due(started, ends)
            producer.poll(0.01)
        with self._lock:
            abort = self._abort_requests > 0 or self._rng.random() < self._abort_ratio
            if self._abort_requests > 0:
                self._abort_requests -= 1
        try:
            producer.flush(30)
            if abort:
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
            self._settle(not abort)
        except KafkaException as exc:
            error = exc.args[0]
            if not abort and error.txn_requires_abort():
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(60)
                    self._settle(False)
                    return
            logger.warning("transaction outcome unknown (%s); starting a new producer", error)
            self._settle(None)
            with contextlib.suppress(Exception):
                producer.flush(5)
            self._producer = self._new_producer()

    def stop(self) -> None:
        """Stop producing and deliver what is queued (a last transaction is committed). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(90)
        if not self._txn_id:
            self._producer.flush(60)
        with self._lock:
            if self._pending:
                self.uncertain += sum(len(v) for v in self._pending.values())
                self._pending = {}
