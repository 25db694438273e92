"""Producing test data: `produce` (a bounded batch), `produce_numbered` (numbered records, at a
rate or at once: `laminar-kafka dev produce`) and `ContinuousProducer` (a steady rate from a thread).

Both are idempotent with ``acks=all``. Each takes an optional ``client``
(`laminar_kafka.kafka_source.clients.KafkaClientConfig`: a secured connection) besides the bootstrap servers, as
`laminar_kafka.devstack.topics.resolve_client` resolves them. The chaos campaign has its own producer
(`laminar_kafka.chaos.producer`), which also records every acknowledged offset for its audit.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from confluent_kafka import KafkaError, KafkaException, Producer

from laminar_kafka.devstack.topics import resolve_client
from laminar_kafka.kafka_source.clients import KafkaClientConfig, KafkaTarget, make_admin, make_producer

__all__ = ["ContinuousProducer", "numbered_record", "partition_count", "produce", "produce_numbered", "producer"]


def producer(bootstrap: KafkaTarget, *, client: KafkaClientConfig | None = None, **extra: object) -> Producer:
    """An idempotent producer (``acks=all``, ``linger.ms=5``); `extra` overrides or adds settings."""
    settings: dict[str, object] = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", **extra}
    return make_producer(resolve_client(bootstrap, client), settings)


def partition_count(bootstrap: KafkaTarget, topic: str, *, client: KafkaClientConfig | None = None) -> int:
    """How many partitions `topic` has, from a metadata request."""
    metadata = make_admin(resolve_client(bootstrap, client)).list_topics(topic, timeout=10)
    return len(metadata.topics[topic].partitions)


def produce(
    bootstrap: KafkaTarget,
    topic: str,
    values: Sequence[bytes],
    partition: int | None = None,
    key: bytes | None = None,
    timeout: float = 60.0,
    *,
    client: KafkaClientConfig | None = None,
) -> int:
    """Produce `values` (to one partition, or round-robin over the topic's partitions when None).

    Bounded by `timeout` for the final flush. Returns how many the broker acknowledged; raises
    KafkaException if any delivery failed or is still outstanding.
    """
    partitions = partition_count(bootstrap, topic, client=client) if partition is None else 0
    targets = (partition if partition is not None else index % partitions for index in range(len(values)))
    return _produce_all(producer(bootstrap, client=client), topic, zip(targets, values, strict=True), key, timeout)


def numbered_record(n: int) -> bytes:
    """Record ``n`` of `produce_numbered` and `ContinuousProducer`: ``b"record-%012d" % n``."""
    return b"record-%012d" % n


def produce_numbered(
    bootstrap: KafkaTarget,
    topic: str,
    count: int,
    *,
    rate: float = 0.0,
    first: int = 0,
    timeout: float = 60.0,
    client: KafkaClientConfig | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Produce records ``first`` .. ``first + count - 1`` (:func:`numbered_record`), record ``n`` to
    partition ``n % partitions``; at most ``rate`` records per second (0: as fast as the client
    takes them). Returns how many the broker acknowledged; raises KafkaException as `produce` does."""
    partitions = partition_count(bootstrap, topic, client=client)
    started = clock()

    def paced() -> Iterable[tuple[int, bytes]]:
        for index in range(count):
            if rate > 0:
                ahead = index / rate - (clock() - started)  # seconds this record is early
                if ahead > 0:
                    sleep(ahead)
            n = first + index
            yield n % partitions, numbered_record(n)

    return _produce_all(producer(bootstrap, client=client), topic, paced(), None, timeout)


def _produce_all(kafka: Producer, topic: str, records: Iterable[tuple[int, bytes]], key: bytes | None,
                 timeout: float) -> int:
    """Produce each ``(partition, value)``, then flush within `timeout`; the count acknowledged, or
    KafkaException when a delivery failed or is still outstanding."""
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    count = 0
    for count, (target, value) in enumerate(records, start=1):
        while True:
            try:
                kafka.produce(topic, value=value, key=key, partition=target, on_delivery=on_delivery)
                break
            except BufferError:
                kafka.poll(0.05)
        if count % 10_000 == 1:
            kafka.poll(0)
    remaining = kafka.flush(timeout)
    if remaining or failures:
        raise KafkaException(f"{remaining} undelivered, failures: {failures[:3]}")
    return count


class ContinuousProducer:
    """Produces small records round-robin over partitions at ``rate`` per second from a thread.

    Record ``n`` is :func:`numbered_record` ``(n)`` on partition ``n % partitions``. ``partitions`` may be
    raised while it runs (after partitions were added to the topic). ``produced``, ``acked`` and
    ``failed`` count records handed to the client, acknowledged, and failed.
    """

    def __init__(
        self, bootstrap: KafkaTarget, topic: str, rate: int, partitions: int, *, client: KafkaClientConfig | None = None
    ) -> None:
        self._producer = producer(bootstrap, client=client, **{"topic.metadata.refresh.interval.ms": 1000})
        self._topic = topic
        self._rate = rate
        self.partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="continuous-producer", daemon=True)
        self.produced = 0
        self.acked = 0
        self.failed = 0

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def _delivered(self, err: object, _msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while self.produced < due and not self._stop.is_set():
                try:
                    self._producer.produce(
                        self._topic, value=numbered_record(self.produced), partition=self.produced % self.partitions,
                        on_delivery=self._delivered,
                    )
                    self.produced += 1
                except BufferError:
                    self._producer.poll(0.05)
                except KafkaException as exc:  # a partition just added: wait for the metadata refresh
                    if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                        raise
                    self._producer.poll(0.05)
            self._producer.poll(0.01)

    def stop(self) -> None:
        """Stop producing, deliver what is queued, and release the client (no reconnect noise
        once the servers stop). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)
        del self._producer
