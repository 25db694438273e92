"""A :class:`ReaderCallbacks` for the reader's unit tests: it answers with the functions it is
given and records what the reader reports."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.decode.records import Records


def _never_pending() -> bool:
    return False


@dataclass
class FakeCallbacks:
    """``pending`` answers :meth:`callbacks_pending`; ``resolve`` answers :meth:`read_on_at` and
    ``factory`` :meth:`new_consumer` (a call without one fails the test). What the reader reports
    is appended to the lists."""

    pending: Callable[[], bool] = _never_pending
    resolve: Callable[[TopicPartitionId, int, int, int], int] | None = None
    factory: Callable[[], Any] | None = None
    lost: list[int] = field(default_factory=list)
    discovered: list[int] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)
    prefetched: list[Records] = field(default_factory=list)

    def callbacks_pending(self) -> bool:
        return self.pending()

    def prefetch(self, records: Records) -> None:
        self.prefetched.append(records)

    def read_on_at(self, tp: TopicPartitionId, offset: int, low: int, high: int) -> int:
        assert self.resolve is not None, f"unexpected read_on_at{(tp, offset, low, high)}"
        return self.resolve(tp, offset, low, high)

    def offsets_lost(self, count: int) -> None:
        self.lost.append(count)

    def partitions_discovered(self, count: int) -> None:
        self.discovered.append(count)

    def new_consumer(self) -> Any:
        assert self.factory is not None, "unexpected new_consumer()"
        return self.factory()

    def consumer_replaced(self) -> None:
        self.replaced.append(1)
