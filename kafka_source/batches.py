"""From FIFO items to one batch: which items a poll takes, how the cursor moves, decode failures.

Pure bookkeeping over values the source hands in (no client calls, no clock); the source
(:meth:`kafka_source.source.KafkaSource.poll_batch`) composes these steps and commits their result
only when none of them raised.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import Message

from coordinator.routing import TopicPartition
from kafka_source.arrow_batch import BatchBuilder, BuiltBatch
from kafka_source.config import Format
from kafka_source.connector import DeliveryGuarantee
from kafka_source.errors import ConnectorError, DecodeError, ErrorRateExceededError
from kafka_source.fifo import (
    AssignmentApplied,
    ControlItem,
    DrainBoundary,
    FifoItem,
    PartitionsAssigned,
    ReaderFailed,
    RecordChunk,
)
from kafka_source.metrics import SourceMetrics

logger = logging.getLogger(__name__)

__all__ = [
    "ERROR_RATE_MIN_RECORDS", "DecodeFailures", "FifoTake", "advance", "build_batch", "take_items", "with_positions",
]

#: Best-effort error rate is enforced once at least this many records were seen.
ERROR_RATE_MIN_RECORDS = 100


@dataclass
class FifoTake:
    """What one poll takes from the FIFO head (nothing is released until the poll commits).

    ``spans``: each chunk read and how many of its messages are taken after this poll. ``done``:
    items to release. ``assigned``: partitions a :class:`PartitionsAssigned` marker added.
    ``failure``: a reader error reached with nothing before it.
    """

    messages: list[Message] = field(default_factory=list)
    spans: list[tuple[RecordChunk, int]] = field(default_factory=list)
    done: list[FifoItem] = field(default_factory=list)
    assigned: dict[TopicPartition, int] = field(default_factory=dict)
    failure: ConnectorError | None = None


def take_items(
    items: list[FifoItem], max_records: int, consume_control: Callable[[ControlItem], None]
) -> FifoTake:
    """Walk ``items`` (the FIFO head, in order) up to ``max_records`` messages.

    An ownership marker (:class:`DrainBoundary`, :class:`AssignmentApplied`) with nothing taken
    before it is handed to ``consume_control`` at once (its effect applies to the cursor as it is
    now) and taken; one with records before it ends the walk (the next poll handles it).
    """
    take = FifoTake()
    for item in items:
        if isinstance(item, RecordChunk):
            want = max_records - len(take.messages)
            if want <= 0:
                break
            end = min(len(item.messages), item.taken + want)
            if item.taken == 0 and end == len(item.messages):
                take.messages.extend(item.messages)
            else:
                take.messages.extend(item.messages[item.taken:end])
            take.spans.append((item, end))
            if end == len(item.messages):
                take.done.append(item)
            else:
                break
        elif isinstance(item, PartitionsAssigned):
            take.assigned.update(item.offsets)
            take.done.append(item)
        elif isinstance(item, ReaderFailed):
            if not take.messages:
                take.failure = item.error
                take.done.append(item)
            break
        elif isinstance(item, (DrainBoundary, AssignmentApplied)) and not (
            take.messages or take.spans or take.assigned
        ):
            consume_control(item)
            take.done.append(item)
        else:
            break
    return take


def advance(
    cursor: Mapping[TopicPartition, int],
    messages: list[Message],
    partitions: list[int],
    offsets: list[int],
    multi_topic: bool,
) -> dict[TopicPartition, int]:
    """``cursor`` moved past ``messages`` (client order; ``partitions``/``offsets`` are theirs):
    last offset per partition + 1. Always a new dict."""
    if multi_topic:
        last = dict(zip(zip(map(Message.topic, messages), partitions), offsets))
    else:
        topic = messages[0].topic()
        last = {(topic, p): o for p, o in dict(zip(partitions, offsets)).items()}
    result = dict(cursor)
    for tp, offset in last.items():
        if offset + 1 > result.get(tp, -1):
            result[tp] = offset + 1
    return result


def with_positions(
    cursor: dict[TopicPartition, int],
    spans: list[tuple[RecordChunk, int]],
    dropping: frozenset[TopicPartition],
) -> dict[TopicPartition, int]:
    """``cursor`` moved to the consumer positions of every chunk fully emitted by this poll
    (positions may lie past transaction markers). Partitions in ``dropping`` or not in the cursor
    keep theirs: released, or acquired again, their old positions are void. Returns ``cursor``
    itself when nothing moved, else a copy."""
    result = cursor
    for chunk, end in spans:
        if end != len(chunk.messages):
            continue
        for tp, position in chunk.positions.items():
            if tp in dropping or tp not in result:
                continue
            if position > result[tp]:
                if result is cursor:
                    result = dict(cursor)
                result[tp] = position
    return result


def build_batch(
    take: FifoTake,
    cursor: dict[TopicPartition, int],
    dropping: frozenset[TopicPartition],
    builder: BatchBuilder,
    decode_failures: DecodeFailures,
    multi_topic: bool,
    metrics: SourceMetrics,
) -> tuple[dict[TopicPartition, int], pa.RecordBatch | None]:
    """The cursor after ``take`` and the batch of its records (``None`` if it has none).

    Records of partitions in ``dropping`` are dropped (counted in ``metrics.records_not_owned``);
    partitions a :class:`PartitionsAssigned` marker added join the cursor at their offsets. Raises
    as :meth:`DecodeFailures.check`. Returns ``cursor`` itself when nothing moved.
    """
    if take.assigned:
        cursor = {**cursor, **{tp: o for tp, o in take.assigned.items() if tp not in cursor}}
    messages = take.messages
    if dropping and messages:
        kept = [m for m in messages if (m.topic(), m.partition()) not in dropping]
        metrics.records_not_owned += len(messages) - len(kept)
        messages = kept
    batch = None
    if messages:
        built = builder.build(messages)
        decode_failures.check(messages, built)
        cursor = advance(cursor, messages, built.partitions, built.offsets, multi_topic)
        batch = built.batch
    return with_positions(cursor, take.spans, dropping), batch


class DecodeFailures:
    """The decode-failure policy of one generation.

    Guaranteed delivery: the first undecodable record raises :class:`DecodeError` (nothing moves;
    the same records fail again). Best-effort: bad records are skipped and counted, and
    :class:`ErrorRateExceededError` is raised once more than ``max_error_rate`` of every record
    seen (at least :data:`ERROR_RATE_MIN_RECORDS`) did not decode.
    """

    def __init__(
        self, delivery: DeliveryGuarantee, record_format: Format, max_error_rate: float, metrics: SourceMetrics
    ) -> None:
        self._delivery = delivery
        self._format = record_format
        self._max_error_rate = max_error_rate
        self._metrics = metrics
        self._records_seen = 0

    def check(self, messages: list[Message], built: BuiltBatch) -> None:
        """Apply the policy to ``built``, the batch of ``messages``."""
        if built.bad and self._delivery.is_guaranteed:
            first = messages[built.bad[0].index]
            self._metrics.decode_errors += 1
            raise DecodeError(
                f"{first.topic()}:{first.partition()}@{first.offset()} does not decode as "
                f"{self._format.value}: {built.bad[0].reason} (cursor not advanced)",
                topic=first.topic(), partition=first.partition(), offset=first.offset(),
            )
        if not self._delivery.is_guaranteed:
            self._count(len(messages), len(built.bad))

    def _count(self, seen: int, bad: int) -> None:
        self._records_seen += seen
        self._metrics.records_skipped += bad
        self._metrics.decode_errors += bad
        if bad:
            logger.warning("skipped %d undecodable record(s) (best-effort)", bad)
        total_bad = self._metrics.records_skipped
        if self._records_seen >= ERROR_RATE_MIN_RECORDS and total_bad > self._max_error_rate * self._records_seen:
            raise ErrorRateExceededError(
                f"{total_bad} of {self._records_seen} records did not decode, above "
                f"max.error.rate={self._max_error_rate}"
            )
