"""From FIFO items to one batch: which items a poll takes, how the cursor moves, decode failures.

Pure bookkeeping over values the source hands in (no client calls, no clock); the source
(:meth:`laminar_kafka.kafka_source.source.KafkaSource.poll_batch`) composes these steps and commits their result
only when none of them raised.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from laminar_kafka.connector.errors import ConnectorError
from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.config.source_config import BadRecordPolicy, Format, KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder, BuiltBatch
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.decode.rejected import rejected_batch
from laminar_kafka.kafka_source.errors import DecodeError, ErrorRateExceededError
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.fifo import (
    AssignmentApplied,
    ControlItem,
    DrainBoundary,
    FifoItem,
    PartitionsAssigned,
    ReaderFailed,
    RecordChunk,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ERROR_RATE_MIN_RECORDS", "DecodeFailures", "FifoTake", "advance", "build_batch", "take_items", "with_positions",
]

#: ``max-error-rate`` is a fraction of at least this many records (see :class:`DecodeFailures`).
ERROR_RATE_MIN_RECORDS = 100


@dataclass
class FifoTake:
    """What one poll takes from the FIFO head (nothing is released until the poll commits).

    ``parts``: the records taken, chunk by chunk (``count`` of them). ``spans``: each chunk read
    and how many of its records are taken after this poll. ``done``: items to release.
    ``assigned``: partitions a :class:`PartitionsAssigned` marker added. ``failure``: a reader
    error reached with nothing before it.
    """

    parts: list[Records] = field(default_factory=list)
    count: int = 0
    spans: list[tuple[RecordChunk, int]] = field(default_factory=list)
    done: list[FifoItem] = field(default_factory=list)
    assigned: dict[TopicPartitionId, int] = field(default_factory=dict)
    failure: ConnectorError | None = None

    def records(self) -> Records | None:
        """Every record taken, in order; ``None`` when none was."""
        return Records.concat(self.parts) if self.count else None


def take_items(
    items: list[FifoItem], max_records: int, consume_control: Callable[[ControlItem], None]
) -> FifoTake:
    """Walk ``items`` (the FIFO head, in order) up to ``max_records`` records.

    An ownership marker (:class:`DrainBoundary`, :class:`AssignmentApplied`) with nothing taken
    before it is handed to ``consume_control`` at once (its effect applies to the cursor as it is
    now) and taken; one with records before it ends the walk (the next poll handles it).
    """
    take = FifoTake()
    for item in items:
        if isinstance(item, RecordChunk):
            want = max_records - take.count
            if want <= 0:
                break
            total = len(item.records)
            end = min(total, item.taken + want)
            if end > item.taken:
                take.parts.append(item.records.slice(item.taken, end))
                take.count += end - item.taken
            take.spans.append((item, end))
            if end == total:
                take.done.append(item)
            else:
                break
        elif isinstance(item, PartitionsAssigned):
            take.assigned.update(item.offsets)
            take.done.append(item)
        elif isinstance(item, ReaderFailed):
            if not take.count:
                take.failure = item.error
                take.done.append(item)
            break
        elif isinstance(item, (DrainBoundary, AssignmentApplied)) and not (
            take.count or take.spans or take.assigned
        ):
            consume_control(item)
            take.done.append(item)
        else:
            break
    return take


def advance(cursor: Mapping[TopicPartitionId, int], records: Records) -> dict[TopicPartitionId, int]:
    """``cursor`` moved past ``records`` (client order): last offset per partition + 1. Always a
    new dict."""
    if isinstance(records.topics, str):
        topic = records.topics
        last = {(topic, p): o for p, o in dict(zip(records.partitions, records.offsets, strict=True)).items()}
    else:
        last = dict(zip(zip(records.topics, records.partitions, strict=True), records.offsets, strict=True))
    result = dict(cursor)
    for tp, offset in last.items():
        if offset + 1 > result.get(tp, -1):
            result[tp] = offset + 1
    return result


def with_positions(
    cursor: dict[TopicPartitionId, int],
    spans: list[tuple[RecordChunk, int]],
    dropping: frozenset[TopicPartitionId],
) -> dict[TopicPartitionId, int]:
    """``cursor`` moved to the consumer positions of every chunk fully emitted by this poll
    (positions may lie past transaction markers). Partitions in ``dropping`` or not in the cursor
    keep theirs: released, or acquired again, their old positions are void. Returns ``cursor``
    itself when nothing moved, else a copy."""
    result = cursor
    for chunk, end in spans:
        if end != len(chunk.records):
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
    cursor: dict[TopicPartitionId, int],
    dropping: frozenset[TopicPartitionId],
    builder: BatchBuilder,
    decode_failures: DecodeFailures,
    metrics: SourceMetrics,
) -> tuple[dict[TopicPartitionId, int], pa.RecordBatch | None, pa.RecordBatch | None]:
    """The cursor after ``take``, the batch of its records (``None`` if it has none) and the
    batch of its rejected records (``None`` if none was skipped; see :meth:`DecodeFailures.check`).

    Records of partitions in ``dropping`` are dropped (counted in ``metrics.records_not_owned``);
    partitions a :class:`PartitionsAssigned` marker added join the cursor at their offsets. Raises
    as :meth:`DecodeFailures.check`. Returns ``cursor`` itself when nothing moved. The cursor moves
    past skipped records exactly as past good ones.
    """
    if take.assigned:
        cursor = {**cursor, **{tp: o for tp, o in take.assigned.items() if tp not in cursor}}
    records = take.records()
    if dropping and records is not None:
        kept = [i for i, tp in enumerate(zip(records.topic_list(), records.partitions, strict=True)) if tp not in dropping]
        metrics.records_not_owned += len(records) - len(kept)
        records = records.take(kept) if kept else None
    batch = rejected = None
    if records is not None:
        built = builder.build(records)
        rejected = decode_failures.check(records, built)
        cursor = advance(cursor, records)
        batch = built.batch
    return with_positions(cursor, take.spans, dropping), batch, rejected


class DecodeFailures:
    """The bad-record policy of one generation (``on-bad-record``, ``max-error-rate``).

    ``fail``: the first undecodable record raises :class:`DecodeError` (nothing moves; the same
    records fail again). ``skip``: bad records are consumed and returned as a rejected batch, under
    every delivery guarantee; :class:`ErrorRateExceededError` (fatal for the generation) is raised
    as soon as the bad records seen since this generation started exceed
    ``max_error_rate * max(records seen, ERROR_RATE_MIN_RECORDS)``: so the first
    :data:`ERROR_RATE_MIN_RECORDS` records tolerate ``max_error_rate * 100`` bad ones, later the
    fraction of all records seen counts, and ``max_error_rate=0`` fails on the first bad record.
    """

    @classmethod
    def of(cls, config: KafkaSourceConfig, delivery: DeliveryGuarantee, metrics: SourceMetrics) -> DecodeFailures:
        """The policy ``config`` sets for a generation started with ``delivery``."""
        policy = config.bad_record_policy(guaranteed=delivery.is_guaranteed)
        return cls(policy, config.format, config.max_error_rate, metrics)

    def __init__(
        self, policy: BadRecordPolicy, record_format: Format, max_error_rate: float, metrics: SourceMetrics
    ) -> None:
        self.policy = policy
        self._format = record_format
        self._max_error_rate = max_error_rate
        self._metrics = metrics
        self.records_seen = 0
        self.records_rejected = 0

    def check(self, records: Records, built: BuiltBatch) -> pa.RecordBatch | None:
        """Apply the policy to ``built``, the batch of ``records``: ``None`` when every record
        decoded, else (``skip``) the rejected batch (:data:`~laminar_kafka.kafka_source.decode.rejected.REJECTED_SCHEMA`)."""
        if self.policy is BadRecordPolicy.FAIL:
            if built.bad:
                index = built.bad[0].index
                topic, partition, offset = records.topic_at(index), records.partitions[index], records.offsets[index]
                self._metrics.decode_errors += 1
                raise DecodeError(
                    f"{topic}:{partition}@{offset} does not decode as "
                    f"{self._format.value}: {built.bad[0].reason} (cursor not advanced; "
                    "on-bad-record=skip would skip it into the rejected output)",
                    topic=topic, partition=partition, offset=offset,
                )
            return None
        self.records_seen += len(records)
        if not built.bad:
            return None
        bad = len(built.bad)
        self.records_rejected += bad
        self._metrics.records_skipped += bad
        self._metrics.decode_errors += bad
        last = built.bad[-1].index
        where = f"{records.topic_at(last)}:{records.partitions[last]}@{records.offsets[last]}"
        allowed = self._max_error_rate * max(self.records_seen, ERROR_RATE_MIN_RECORDS)
        if self.records_rejected > allowed:
            raise ErrorRateExceededError(
                f"{self.records_rejected} of {self.records_seen} records did not decode as "
                f"{self._format.value} (rate {self.records_rejected / self.records_seen:.4f}), above "
                f"max-error-rate={self._max_error_rate}; last bad record {where}: {built.bad[-1].reason}"
            )
        logger.warning("skipped %d undecodable record(s), the last %s: %s", bad, where, built.bad[-1].reason)
        return rejected_batch(records, built.bad)
