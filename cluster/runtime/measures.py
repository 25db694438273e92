"""What the runtime measures beyond counters: the handoff pause of moved partitions, lag, freshness.

- Handoff clock: a partition gained in a live round is "paused" from the round's start until its
  first row is written here; each pause is logged (``handoff partition=... pause_ms=...``, which
  the end-to-end tests and the handoff bench read) and observed in the ``laminar_handoff_pause_seconds``
  histogram.
- Lag: every few seconds, the high watermark minus the read cursor (lag) and minus the manifest
  cursor (durable lag) of every partition this node reads.
- Freshness: when a node asks for an epoch, and how old its oldest not yet visible row is. With
  ``freshness-target-ms`` set, the leader opens an epoch only when a node asks for one
  (:func:`laminar_kafka.coordinator.engine.model.next_step`), and a node asks when :func:`epoch_due`
  says so: its oldest row no epoch covers yet (by the record's Kafka timestamp) would otherwise miss
  the target given the measured time from an ask to the epoch's rows being visible
  (:class:`VisibleAfter`), or the bytes staged since its last ack reach the target file size.
  Nothing pending, no ask: an idle pipeline holds no epochs, and a burst asks at once.
  :class:`FreshnessTracker` follows the rows' timestamps from the write to the publish: per
  partition the oldest timestamp pending (not acked yet) and sealed (acked, epoch not published
  yet), for the ``laminar_freshness_seconds`` gauge; and the timestamps themselves (one int64 per
  row, held until the epoch is visible) for the visibility histogram, observed in bulk when an
  epoch is published. All numpy, per batch; no Python per record.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.state import FreshnessPolicy, HandoffRecord
from laminar_kafka.connector.checkpoint import format_key
from laminar_kafka.connector.protocol import SourceConnector
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

__all__ = [
    "FreshnessTracker", "HandoffClock", "LagExporter", "PartitionKey", "VisibleAfter", "Watermarks", "ask_in",
    "epoch_due", "oldest_by_partition", "partitions_present",
]

#: reads the high watermark of each partition (blocking)
Watermarks = Callable[[list[TopicPartitionId]], dict[TopicPartitionId, int]]


class HandoffClock:
    """The partitions gained in a live round whose first row has not been written here yet."""

    def __init__(self, context: RuntimeContext) -> None:
        self._context = context
        #: "topic:partition" -> when its round started
        self.awaiting_first_row: dict[str, float] = {}
        self.handoffs: list[HandoffRecord] = []

    def start(self, partitions: Iterable[TopicPartitionId], round_started: float) -> None:
        for tp in partitions:
            self.awaiting_first_row.setdefault(format_key(*tp), round_started)

    def reset(self) -> None:
        """A generation retired: rows of the next one start the clock again."""
        self.awaiting_first_row.clear()

    def note_rows(self, records: pa.RecordBatch) -> None:
        """Close the clock of every (topic, partition) with a row in ``records``."""
        if not self.awaiting_first_row:
            return
        now = time.monotonic()
        metrics = self._context.metrics
        for topic, partition in partitions_present(records):
            key = f"{topic}:{partition}"
            started = self.awaiting_first_row.pop(key, None)
            if started is not None:
                record = HandoffRecord(key, now - started)
                self.handoffs.append(record)
                metrics.handoff_pause.labels(metrics.node).observe(record.pause_s)
                logger.info("handoff partition=%s pause_ms=%.1f", key, record.pause_s * 1000)


def partitions_present(records: pa.RecordBatch) -> list[tuple[str, int]]:
    """The distinct ``(topic, partition)`` pairs of ``records`` (``_topic`` and ``_partition``
    columns), sorted; vectorised with numpy (no ``pyarrow.compute``, whose import alone costs a
    node 50-60 ms of start-up CPU)."""
    names, keys = _partition_codes(records)
    return sorted((names[key >> 32], key & 0xFFFFFFFF) for key in np.unique(keys).tolist())


def _partition_codes(records: pa.RecordBatch) -> tuple[list[str], np.ndarray]:
    """The topic names of ``records`` and each row's ``(topic index << 32) | partition`` (int64)."""
    topics = records.column("_topic")
    if not pa.types.is_dictionary(topics.type):
        topics = topics.dictionary_encode()
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    partitions = records.column("_partition").to_numpy(zero_copy_only=False).astype(np.int64)
    return topics.dictionary.to_pylist(), (codes << 32) | partitions


class LagExporter:
    """Exports lag and durable lag per partition from the high watermarks (never stops the node)."""

    def __init__(self, context: RuntimeContext, watermarks: Watermarks) -> None:
        self._context = context
        self.watermarks = watermarks

    async def run(
        self,
        connector: Callable[[], SourceConnector | None],
        partitions: Callable[[], list[TopicPartitionId]],
        durable: Callable[[], dict[str, int]],
        period_s: float = 5.0,
    ) -> None:
        """Every ``period_s``: lag of the ``partitions()`` the current ``connector()`` reads; the series
        of every other partition are removed (after a handoff, or with no connector: all of them)."""
        metrics = self._context.metrics
        while True:
            await asyncio.sleep(period_s)
            source = connector()
            if source is None:
                # no generation: the node reads nothing, so it exports no partition's lag (the
                # partitions' new owners do)
                metrics.clear_partition_gauge(metrics.lag)
                metrics.clear_partition_gauge(metrics.durable_lag)
                continue
            try:
                highs = await self._context.executors.in_metadata(self.watermarks, partitions())
            except Exception as exc:  # noqa: BLE001 - metrics must never stop the node
                logger.debug("watermark lookup failed: %s", exc)
                continue
            cursor, durable_cursor = source.checkpoint().offsets, durable()
            lag: dict[TopicPartitionId, int] = {}
            durable_lag: dict[TopicPartitionId, int] = {}
            for tp, high in highs.items():
                key = format_key(*tp)
                lag[tp] = max(0, high - cursor.get(key, 0))
                durable_lag[tp] = max(0, high - durable_cursor.get(key, 0))
            metrics.set_partition_gauge(metrics.lag, lag)
            metrics.set_partition_gauge(metrics.durable_lag, durable_lag)

    async def close(self) -> None:
        """Close the watermark reader if it has a ``close`` (it may raise)."""
        close = getattr(self.watermarks, "close", None)
        if close is not None:
            await self._context.executors.in_metadata(close)


#: ``(topic, partition)``
PartitionKey = tuple[str, int]


def ask_in(policy: FreshnessPolicy, now_s: float, oldest_s: float | None, visible_after_s: float) -> float | None:
    """Seconds from ``now_s`` until a node whose oldest pending row was appended at ``oldest_s``
    (wall clock, seconds; None: nothing pending) must ask for an epoch so that the row is visible
    by ``oldest_s + target_s``, an ask taking ``visible_after_s`` to make rows visible. 0: now.
    None: nothing pending. Pure."""
    if oldest_s is None:
        return None
    return max(0.0, oldest_s + policy.target_s - visible_after_s - now_s)


def epoch_due(policy: FreshnessPolicy, now_s: float, oldest_s: float | None, staged_bytes: int,
              visible_after_s: float) -> bool:
    """Whether a node asks for an epoch now: it holds rows no epoch covers and either its staged bytes
    reached ``policy.target_bytes`` or its oldest row would miss the target if it waited longer
    (:func:`ask_in` is 0). False while nothing is pending, whatever the bytes. Pure."""
    wait = ask_in(policy, now_s, oldest_s, visible_after_s)
    if wait is None:
        return False
    return wait == 0.0 or (policy.target_bytes > 0 and staged_bytes >= policy.target_bytes)


class VisibleAfter:
    """The measured time from an ask to its epoch's rows being visible here: the largest of the
    last ``window`` measures (``initial_s`` before any), so that a slow commit among recent ones
    makes the next asks come early enough."""

    def __init__(self, initial_s: float, window: int = 8) -> None:
        self._initial_s = initial_s
        self._samples: deque[float] = deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self._samples.append(max(0.0, seconds))

    def estimate(self) -> float:
        return max(self._samples) if self._samples else self._initial_s


def _timestamps_ms(records: pa.RecordBatch) -> np.ndarray:
    """The ``_timestamp`` column as int64 milliseconds, -1 where null (no column: all -1)."""
    if "_timestamp" not in records.schema.names:
        return np.full(records.num_rows, -1, dtype=np.int64)
    values = records.column("_timestamp").to_numpy(zero_copy_only=False)
    if values.dtype.kind == "M":
        missing = np.isnat(values)
        out = values.astype("datetime64[ms]").astype(np.int64)
    else:
        missing = np.isnan(values.astype(np.float64))
        out = np.nan_to_num(values.astype(np.float64), nan=-1).astype(np.int64)
    out[missing] = -1
    return out


def oldest_by_partition(records: pa.RecordBatch) -> tuple[dict[PartitionKey, int], np.ndarray]:
    """Per ``(topic, partition)`` of ``records`` the oldest record timestamp (ms), and every row's
    timestamp (int64 ms, null ones left out). Vectorised: one sort, one ``minimum.reduceat``."""
    stamps = _timestamps_ms(records)
    valid = stamps >= 0
    if not records.num_rows or not valid.any():
        return {}, stamps[valid]
    names, codes = _partition_codes(records)
    keys = codes[valid]
    kept = stamps[valid]
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    minima = np.minimum.reduceat(kept[order], starts)
    oldest = {(names[int(k) >> 32], int(k) & 0xFFFFFFFF): int(m)
              for k, m in zip(sorted_keys[starts].tolist(), minima.tolist(), strict=True)}
    return oldest, kept


def _merge(into: dict[PartitionKey, int], oldest: dict[PartitionKey, int]) -> None:
    for key, stamp in oldest.items():
        current = into.get(key)
        into[key] = stamp if current is None else min(current, stamp)


class FreshnessTracker:
    """The timestamps of the rows written here and not visible yet (see the module docstring).
    Rows are noted as written, sealed with the epoch an ack gives them, dropped when the epoch is
    published (or when the membership, and with it the acks, is lost)."""

    def __init__(self) -> None:
        self._pending: dict[PartitionKey, int] = {}
        self._pending_stamps: list[np.ndarray] = []
        self.pending_bytes = 0
        #: when the first pending row was noted (wall clock, s): bounds the oldest pending time when
        #: rows have no timestamp or one ahead of this node's clock
        self._noted_at: float | None = None
        #: epoch -> (oldest per partition, timestamps) of the rows its ack sealed
        self._sealed: dict[int, tuple[dict[PartitionKey, int], np.ndarray]] = {}
        #: every partition with a row written here since the start (their gauge reads 0 when caught up)
        self.seen: set[PartitionKey] = set()

    def note(self, records: pa.RecordBatch, now_s: float | None) -> None:
        """Rows written (staged) here at ``now_s`` (None: no row), not covered by an epoch yet."""
        if self._noted_at is None:
            self._noted_at = now_s
        oldest, stamps = oldest_by_partition(records)
        _merge(self._pending, oldest)
        self.seen.update(oldest)
        if stamps.size:
            self._pending_stamps.append(stamps)
        self.pending_bytes += records.nbytes

    def oldest_pending_s(self) -> float | None:
        """The wall-clock time (s) of the oldest row no ack covers yet, by its timestamp, and no later
        than when it was noted (None: none)."""
        if self._noted_at is None:
            return None
        return min(self._noted_at, min(self._pending.values()) / 1000.0) if self._pending else self._noted_at

    def seal(self, epoch: int) -> None:
        """An ack of ``epoch`` covers every pending row."""
        stamps = np.concatenate(self._pending_stamps) if self._pending_stamps else np.empty(0, np.int64)
        previous = self._sealed.get(epoch)
        if previous is not None:  # the same epoch acked again (a replacement ack): its rows add up
            _merge(self._pending, previous[0])
            stamps = np.concatenate([previous[1], stamps])
        if self._pending or stamps.size:
            self._sealed[epoch] = (self._pending, stamps)
        self._pending, self._pending_stamps, self.pending_bytes, self._noted_at = {}, [], 0, None

    def published(self, epoch: int, now_s: float) -> np.ndarray:
        """Epochs up to ``epoch`` are visible at ``now_s``: their rows' visibility times (seconds,
        from each row's timestamp; what the histogram observes)."""
        done = [e for e in self._sealed if e <= epoch]
        stamps = [self._sealed.pop(e)[1] for e in done]
        if not stamps:
            return np.empty(0, np.float64)
        return np.maximum(0.0, now_s - np.concatenate(stamps) / 1000.0)

    def forget_sealed(self) -> None:
        """The acks are lost (a lost membership): their rows are read and sealed again."""
        self._sealed.clear()

    def ages(self, now_s: float) -> dict[PartitionKey, float]:
        """Per partition seen, the age (s) of its oldest row written and not visible (0: caught up)."""
        oldest: dict[PartitionKey, int] = dict(self._pending)
        for sealed, _stamps in self._sealed.values():
            _merge(oldest, sealed)
        return {key: max(0.0, now_s - oldest[key] / 1000.0) if key in oldest else 0.0 for key in self.seen}
