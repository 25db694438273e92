"""The counters one :class:`~laminar_kafka.kafka_source.source.KafkaSource` generation keeps."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SourceMetrics"]


@dataclass
class SourceMetrics:
    """Monotonic counters of one source generation (read them; only the source counts)."""

    records: int = 0
    bytes: int = 0
    batches: int = 0
    decode_errors: int = 0
    records_skipped: int = 0
    offset_resets: int = 0
    #: offsets skipped because Kafka deleted them before they were read (``fail-on-data-loss=false``)
    offsets_lost: int = 0
    partitions_discovered: int = 0
    commits: int = 0
    commit_failures: int = 0
    records_not_owned: int = 0
    drains_committed: int = 0
    drains_aborted: int = 0
    reconciliations: int = 0
    #: consumers replaced because they reached no broker any more (:mod:`~laminar_kafka.kafka_source.read.client_watch`)
    clients_replaced: int = 0
    #: called with every count added to :attr:`offsets_lost` (a node exports them); must not raise
    on_offsets_lost: Callable[[int], None] | None = field(default=None, repr=False, compare=False)
    #: called at every count added to :attr:`clients_replaced` (a node exports them); must not raise
    on_client_replaced: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def count_discovered(self, count: int) -> None:
        """``count`` partitions appeared while the generation ran (the reader's callback)."""
        self.partitions_discovered += count

    def count_client_replaced(self) -> None:
        """The reader replaced its consumer (the reader's callback)."""
        self.clients_replaced += 1
        if self.on_client_replaced is not None:
            self.on_client_replaced()

    def count_lost(self, count: int, resets: int = 1) -> None:
        """``resets`` partitions were read on past ``count`` offsets Kafka no longer holds (the
        reader's callback; the start's plan)."""
        self.offset_resets += resets
        self.offsets_lost += count
        if count and self.on_offsets_lost is not None:
            self.on_offsets_lost(count)
