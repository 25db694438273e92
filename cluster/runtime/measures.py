"""What the runtime measures beyond counters: the handoff pause of moved partitions, and lag.

- Handoff clock: a partition gained in a live round is "paused" from the round's start until its
  first row is written here; each pause is logged (``handoff partition=... pause_ms=...``, which
  the end-to-end tests and the handoff bench read) and observed in the ``laminar_handoff_pause_seconds``
  histogram.
- Lag: every few seconds, the high watermark minus the read cursor (lag) and minus the manifest
  cursor (durable lag) of every partition this node reads.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from laminar_kafka.cluster.runtime.context import RuntimeContext
from laminar_kafka.cluster.runtime.state import HandoffRecord
from laminar_kafka.connector.checkpoint import format_key
from laminar_kafka.connector.protocol import SourceConnector
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId

logger = logging.getLogger(__name__)

__all__ = ["HandoffClock", "LagExporter", "Watermarks", "partitions_present"]

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
    topics = records.column("_topic")
    if not pa.types.is_dictionary(topics.type):
        topics = topics.dictionary_encode()
    names = topics.dictionary.to_pylist()
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    partitions = records.column("_partition").to_numpy(zero_copy_only=False).astype(np.int64)
    keys = np.unique((codes << 32) | partitions).tolist()
    return sorted((names[key >> 32], key & 0xFFFFFFFF) for key in keys)


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
