"""Resolution of a startup request to exact numeric offsets.

The pure functions :func:`resolve_initial` and :func:`resolve_resume` decide offsets from broker
facts (partitions, watermarks, timestamp lookups); :func:`query_broker_facts` gathers those facts
with blocking client calls and must run off the event loop, as must :func:`resolve_start_offsets`
(the whole Initial resolution with its own short-lived consumer, retrying transient broker errors
within a bound: :func:`retry_transient`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import TopicMetadata

from laminar_kafka.connector.checkpoint import SourceCheckpoint
from laminar_kafka.connector.errors import CheckpointError, ConnectorError, TransientError
from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import make_consumer
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig, StartupMode
from laminar_kafka.kafka_source.config.topics import TopicSelector
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.read.positions import watermarks

logger = logging.getLogger(__name__)

__all__ = [
    "BrokerFacts", "StartupPlan", "is_retriable", "query_broker_facts", "resolve_initial", "resolve_resume",
    "resolve_out_of_range", "resolve_start_offsets", "retry_transient", "selected_topics", "source_consumer",
]

T = TypeVar("T")


@dataclass(frozen=True)
class BrokerFacts:
    """``watermarks[(topic, partition)] = (low, high)`` for every partition of the topics;
    ``time_offsets`` only for ``startup-mode=timestamp`` (``None`` = no record at/after it)."""

    watermarks: Mapping[TopicPartitionId, tuple[int, int]]
    time_offsets: Mapping[TopicPartitionId, int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class StartupPlan:
    """Exact next-offsets for every partition to read, how many were reset to the low watermark
    (best-effort, or ``fail-on-data-loss=false``), and how many offsets below it those skipped."""

    offsets: Mapping[TopicPartitionId, int]
    resets: int = 0
    lost: int = 0


def _below_low(
    tp: TopicPartitionId, offset: int, low: int, high: int, delivery: DeliveryGuarantee, what: str,
    config: KafkaSourceConfig,
) -> int:
    """The offset to start at when ``offset`` lies below the low watermark: an error under
    guaranteed delivery unless ``fail-on-data-loss=false``, else the low watermark (logged)."""
    if delivery.is_guaranteed and config.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{what} offset {offset} of {tp[0]}:{tp[1]} is below the low watermark {low} "
            f"(records were deleted by retention); refusing to skip them under {delivery.value} "
            "(fail-on-data-loss=false resumes at the low watermark, the loss logged)",
            topic=tp[0],
            partition=tp[1],
            offset=offset,
            low=low,
            high=high,
        )
    if delivery.is_guaranteed:
        logger.warning(
            "%s offset %d of %s:%d is below the low watermark %d: offsets %d..%d were deleted by retention "
            "before they were read and are lost; resuming at %d (fail-on-data-loss=false)",
            what, offset, tp[0], tp[1], low, offset, low - 1, low,
        )
    else:
        logger.warning(
            "%s offset %d of %s:%d is below the low watermark %d; best-effort reset to it",
            what, offset, tp[0], tp[1], low,
        )
    return low


def resolve_initial(
    config: KafkaSourceConfig, facts: BrokerFacts, delivery: DeliveryGuarantee
) -> StartupPlan:
    """Offsets for ``SourcePosition.Initial`` under ``config.startup_mode``.

    earliest = low watermark; latest = high watermark; timestamp = first offset with a timestamp
    >= the given one (high watermark if none); specific-offsets = the listed offsets (unlisted
    partitions: low watermark). A listed offset above the high watermark or of an unknown
    partition is a :class:`ConfigurationError`; below the low watermark it fails under guaranteed
    delivery and is reset to the low watermark under best-effort.
    """
    mode = config.startup_mode
    offsets: dict[TopicPartitionId, int] = {}
    resets = lost = 0
    for tp, (low, high) in sorted(facts.watermarks.items()):
        if mode is StartupMode.EARLIEST:
            offsets[tp] = low
        elif mode is StartupMode.LATEST:
            offsets[tp] = high
        elif mode is StartupMode.TIMESTAMP:
            found = facts.time_offsets.get(tp)
            offsets[tp] = high if found is None or found < 0 else max(found, low)
        else:
            wanted = config.startup_specific_offsets.get(tp)
            if wanted is None:
                offsets[tp] = low
            elif wanted > high:
                raise ConfigurationError(
                    f"startup-specific-offsets: {tp[0]}:{tp[1]}:{wanted} is beyond the high "
                    f"watermark {high}"
                )
            elif wanted < low:
                offsets[tp] = _below_low(tp, wanted, low, high, delivery, "specific", config)
                resets, lost = resets + 1, lost + low - wanted
            else:
                offsets[tp] = wanted
    for tp in config.startup_specific_offsets:
        if tp not in facts.watermarks:
            raise ConfigurationError(f"startup-specific-offsets: {tp[0]}:{tp[1]} does not exist")
    return StartupPlan(offsets, resets, lost)


def resolve_resume(
    config: KafkaSourceConfig,
    checkpoint: SourceCheckpoint,
    facts: BrokerFacts,
    delivery: DeliveryGuarantee,
) -> StartupPlan:
    """Offsets for ``SourcePosition.Resume``: exactly the checkpoint's next-offsets.

    Partitions of the configured topics that the checkpoint lacks (created since) start at the
    low watermark. A checkpoint naming another topic or a missing partition is a
    :class:`CheckpointError`; an offset outside ``[low, high]`` raises
    :class:`OffsetOutOfRangeError` under guaranteed delivery and is reset to the low watermark
    (counted in ``resets``) under best-effort.
    """
    cursor = checkpoint.partitions()
    offsets: dict[TopicPartitionId, int] = {}
    resets = lost = 0
    for tp in cursor:
        if not config.selector.matches(tp[0]):
            raise CheckpointError(
                f"checkpoint names topic {tp[0]!r}, which is not configured ({config.selector})"
            )
        if tp not in facts.watermarks:
            raise CheckpointError(f"checkpoint names {tp[0]}:{tp[1]}, which does not exist")
    for tp, (low, high) in sorted(facts.watermarks.items()):
        offset = cursor.get(tp)
        if offset is None:
            offsets[tp] = low
        elif offset < low:
            offsets[tp] = _below_low(tp, offset, low, high, delivery, "checkpoint", config)
            resets, lost = resets + 1, lost + low - offset
        elif offset > high:
            if delivery.is_guaranteed:
                raise OffsetOutOfRangeError(
                    f"checkpoint offset {offset} of {tp[0]}:{tp[1]} is beyond the high watermark "
                    f"{high} (was the topic recreated?)",
                    topic=tp[0], partition=tp[1], offset=offset, low=low, high=high,
                )
            logger.warning(
                "checkpoint offset %d of %s:%d is beyond the high watermark %d; best-effort "
                "reset to the low watermark %d", offset, tp[0], tp[1], high, low,
            )
            offsets[tp] = low
            resets += 1
        else:
            offsets[tp] = offset
    return StartupPlan(offsets, resets, lost)


def resolve_out_of_range(
    tp: TopicPartitionId, position: int, low: int, high: int, delivery: DeliveryGuarantee, config: KafkaSourceConfig
) -> int:
    """Where to read on after the broker answered a running fetch at ``position`` with "offset out
    of range" (guaranteed delivery only: best-effort lets the client reset to the earliest offset).

    Below the low watermark (records deleted by retention while the reader lagged behind): as a
    checkpoint cursor below it (:func:`_below_low`), so ``fail-on-data-loss=false`` resumes at the
    low watermark with the loss logged. Beyond the high watermark (the topic was deleted and
    re-created, or an unclean leader election truncated the log): :class:`OffsetOutOfRangeError`,
    always. Inside ``[low, high]`` (the log moved under the fetch): ``position`` again.
    """
    if position > high:
        raise OffsetOutOfRangeError(
            f"{tp[0]}:{tp[1]} now ends at offset {high}, below the read offset {position}: the topic was "
            "deleted and re-created, or an unclean leader election truncated its log; the records already "
            "read no longer match the topic's, so the source cannot go on exactly once",
            topic=tp[0], partition=tp[1], offset=position, low=low, high=high,
        )
    if position < low:
        return _below_low(tp, position, low, high, delivery, "read", config)
    logger.warning("%s:%d: the broker answered a read at offset %d 'out of range', inside its range [%d, %d]; "
                   "reading there again", tp[0], tp[1], position, low, high)
    return position


def source_consumer(
    config: KafkaSourceConfig, *, guaranteed: bool, on_commit: Callable[[Any, Any], None] | None = None,
    catch_up: bool = False,
) -> Consumer:
    """A consumer of the source (no I/O yet), built by :func:`~laminar_kafka.kafka_source.clients.make_consumer`
    from ``config.kafka`` with the source's defaults and owned keys
    (:meth:`~laminar_kafka.kafka_source.config.source_config.KafkaSourceConfig.consumer_config`; with
    ``catch_up``, those of the reader's catch-up consumer, which never commits); its commit results go to
    ``on_commit`` when given. Raises ``KafkaException`` when the client rejects the configuration (e.g. an
    unknown librdkafka property)."""
    if catch_up:
        overrides: dict[str, Any] = dict(config.catch_up_overrides(guaranteed=guaranteed))
        return make_consumer(config.kafka, config.group_id, overrides, defaults=config.consumer_defaults())
    overrides = dict(config.consumer_overrides(guaranteed=guaranteed))
    if on_commit is not None:
        overrides["on_commit"] = on_commit
    return make_consumer(config.kafka, config.group_id, overrides, defaults=config.consumer_defaults())


def selected_topics(consumer: Consumer, selector: TopicSelector, timeout_s: float) -> dict[str, Any]:
    """``{topic: TopicMetadata}`` of the selected topics (blocking). Raises :class:`ConfigurationError`
    when a named topic is missing, has an error or has no partitions (``cause``: the metadata's
    ``KafkaError``, e.g. ``UNKNOWN_TOPIC_OR_PART`` or ``LEADER_NOT_AVAILABLE`` while the topic is being
    created, ``TOPIC_AUTHORIZATION_FAILED``), and ``KafkaException`` when Kafka does not answer."""
    if selector.is_pattern:
        metadata = consumer.list_topics(timeout=timeout_s)
        return {t: metadata.topics[t] for t in selector.select(metadata.topics)
                if metadata.topics[t].error is None and metadata.topics[t].partitions}
    found: dict[str, Any] = {}
    for topic in selector.names:
        info = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            error = _topic_error(info)
            raise ConfigurationError(f"topic {topic!r} is not available: {error.str()}", cause=error)
        found[topic] = info
    return found


def _topic_error(info: TopicMetadata | None) -> KafkaError:
    """Why a named topic's metadata ``info`` (``None``: absent) cannot be used: its error, else a
    local one (unknown topic, or no partitions)."""
    if info is None:
        return KafkaError(KafkaError._UNKNOWN_TOPIC, "not in the broker's metadata")
    if info.error is not None:
        return info.error
    return KafkaError(KafkaError._UNKNOWN_PARTITION, "no partitions")


#: how long :func:`resolve_start_offsets` retries transient broker errors by default
START_RETRY_FOR_S = 30.0
#: the pause after a first transient failure, doubled after each further one up to the second
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.2, 2.0
#: a retry streak logs its first failure at WARNING, then at most one WARNING per this many seconds
RETRY_LOG_INTERVAL_S = 10.0
#: the least timeout a retried attempt's client calls get when the bound is almost reached
MIN_CALL_TIMEOUT_S = 1.0

#: answers of a topic being created, or of a partition whose leader is moving: retried within the
#: bound even as the :class:`ConfigurationError` of a named topic that is not available (yet)
_NOT_READY_CODES = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
})
#: answers that waiting does not change (authorization, authentication, a request the broker
#: rejects): never retried, even as a :class:`TransientError`
_PERMANENT_CODES = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.UNSUPPORTED_SASL_MECHANISM,
    KafkaError.ILLEGAL_SASL_STATE, KafkaError._INVALID_ARG, KafkaError.INVALID_REQUEST,
    KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE, KafkaError._NOT_IMPLEMENTED,
    KafkaError.TOPIC_EXCEPTION,
})


def is_retriable(exc: ConnectorError | ConfigurationError) -> bool:
    """Whether waiting may change ``exc``'s answer: a :class:`TransientError` unless its ``cause`` is a
    ``KafkaError`` of authorization, authentication or a rejected request; a :class:`ConfigurationError`
    only when its ``cause`` says a topic or partition is not known yet or has no leader (a topic being
    created); no other error."""
    code = exc.cause.code() if isinstance(exc.cause, KafkaError) else None
    if isinstance(exc, TransientError):
        return code not in _PERMANENT_CODES
    if isinstance(exc, ConfigurationError):
        return code in _NOT_READY_CODES
    return False


def retry_transient(
    what: str,
    attempt: Callable[[float], T],
    *,
    timeout_s: float,
    retry_for_s: float = START_RETRY_FOR_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt(call_timeout_s)`` until it returns, retrying the errors :func:`is_retriable` accepts
    for ``retry_for_s`` seconds from the first call (blocking), with pauses of :data:`FIRST_BACKOFF_S`
    doubling up to :data:`MAX_BACKOFF_S`, cut to the time left. ``call_timeout_s`` is ``timeout_s``
    cut to the time left (at least :data:`MIN_CALL_TIMEOUT_S`), so the whole stays near the bound.

    A retry streak logs one WARNING at its first failure naming it, then at most one WARNING per
    :data:`RETRY_LOG_INTERVAL_S` (the other failures at DEBUG), and one INFO when it ends in success.
    Any other error is raised as it is, at once. Past the bound, raises one error of the last error's
    kind (:class:`ConfigurationError` for a topic still not available, else :class:`TransientError`;
    ``cause`` kept) whose one-line message names ``what``, for how long and how many attempts it
    failed, and the last error.
    """
    started = clock()
    deadline = started + retry_for_s
    backoff = FIRST_BACKOFF_S
    attempts = 0
    logged_at: float | None = None
    while True:
        attempts += 1
        try:
            result = attempt(min(timeout_s, max(MIN_CALL_TIMEOUT_S, deadline - clock())))
        except (ConnectorError, ConfigurationError) as exc:  # a topic being created is one of the latter
            if not is_retriable(exc):
                raise
            now = clock()
            if now >= deadline:
                raise _retries_exhausted(what, exc, now - started, attempts) from exc
            if logged_at is None:
                logger.warning("%s failed, retrying for up to %.0f s: %s", what, retry_for_s, _one_line(exc))
                logged_at = now
            elif now - logged_at >= RETRY_LOG_INTERVAL_S:
                logger.warning("%s still failing after %.1f s (%d attempts): %s",
                               what, now - started, attempts, _one_line(exc))
                logged_at = now
            else:
                logger.debug("%s failed (attempt %d): %s", what, attempts, _one_line(exc))
            sleep(min(backoff, deadline - now))
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            continue
        if attempts > 1:
            logger.info("%s succeeded after %.1f s (%d attempts)", what, clock() - started, attempts)
        return result


def _retries_exhausted(what: str, last: ConnectorError | ConfigurationError, elapsed_s: float,
                       attempts: int) -> ConnectorError | ConfigurationError:
    """The one error :func:`retry_transient` raises past its bound, of ``last``'s kind."""
    kind = ConfigurationError if isinstance(last, ConfigurationError) else TransientError
    return kind(f"{what} failed for {elapsed_s:.1f} s ({attempts} attempts); last error: {_one_line(last)}",
                cause=last.cause)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def resolve_start_offsets(
    config: KafkaSourceConfig,
    delivery: DeliveryGuarantee,
    timeout_s: float = 10.0,
    *,
    retry_for_s: float = START_RETRY_FOR_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[TopicPartitionId, int]:
    """Resolve ``config``'s startup mode once to exact next-offsets of every selected partition,
    with a short-lived consumer (blocking). Used to pin a pipeline's start durably before any node
    reads (docs/settings.md, "The start position is pinned cluster-wide").

    The broker facts are read again while they fail transiently (a topic created moments ago that a
    broker does not know yet, a partition without a leader yet, a timeout) for up to ``retry_for_s``
    seconds (:func:`retry_transient`; ``sleep`` and ``clock`` drive its pauses and its deadline).
    Raises like :meth:`KafkaSource.start` does: :class:`ConfigurationError` at once for a configuration
    the client rejects, an unauthorized topic or an impossible start, and past the bound for a named
    topic still not available; :class:`TransientError` when the broker still fails past the bound.
    """
    try:
        consumer = source_consumer(config, guaranteed=delivery.is_guaranteed)
    except KafkaException as exc:
        raise ConfigurationError(f"the Kafka client rejects the configuration: {exc}", cause=exc) from exc
    try:
        facts = retry_transient(
            f"resolving the start position of topic(s) {config.selector}",
            lambda call_timeout_s: query_broker_facts(consumer, config, call_timeout_s),
            timeout_s=timeout_s, retry_for_s=retry_for_s, sleep=sleep, clock=clock,
        )
        return dict(resolve_initial(config, facts, delivery).offsets)
    finally:
        consumer.close()


def query_broker_facts(
    consumer: Consumer, config: KafkaSourceConfig, timeout_s: float
) -> BrokerFacts:
    """Partitions and watermarks of every selected topic (blocking; run off the loop), in one attempt.

    Named topics must exist (:class:`ConfigurationError`, see :func:`selected_topics`); a pattern may
    match none yet. A client failure is a :class:`TransientError` naming the step that failed, its
    ``cause`` the client's ``KafkaError`` (e.g. a partition's ``NOT_LEADER_FOR_PARTITION``).
    """
    step = f"cannot read the metadata of topic(s) {config.selector}"
    try:
        selected = selected_topics(consumer, config.selector, timeout_s)
        partitions = [(t, p) for t, info in selected.items() for p in info.partitions]
        step = f"cannot read the watermarks of {len(partitions)} partition(s)"
        bounds = watermarks(consumer, partitions, timeout_s)
        time_offsets: dict[TopicPartitionId, int | None] = {}
        if config.startup_mode is StartupMode.TIMESTAMP:
            assert config.startup_timestamp_ms is not None
            step = f"cannot look up the offsets at startup-timestamp-ms={config.startup_timestamp_ms}"
            wanted = [KafkaTopicPartition(t, p, config.startup_timestamp_ms) for t, p in bounds]
            for tp in consumer.offsets_for_times(wanted, timeout=timeout_s):
                if tp.error is not None:
                    raise TransientError(f"{step}: {tp.topic}:{tp.partition}: {tp.error.str()}", cause=tp.error)
                time_offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return BrokerFacts(bounds, time_offsets)
    except KafkaException as exc:
        raise TransientError(f"{step}: {exc}", cause=exc.args[0]) from exc
