"""The counters one :class:`~kafka_source.source.KafkaSource` generation keeps."""
from __future__ import annotations

from dataclasses import dataclass

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
    #: offsets skipped because Kafka deleted them before they were read (``fail.on.data.loss=false``)
    offsets_lost: int = 0
    partitions_discovered: int = 0
    commits: int = 0
    commit_failures: int = 0
    records_not_owned: int = 0
    drains_committed: int = 0
    drains_aborted: int = 0
    reconciliations: int = 0

    def count_discovered(self, count: int) -> None:
        """``count`` partitions appeared while the generation ran (the reader's callback)."""
        self.partitions_discovered += count

    def count_lost(self, count: int) -> None:
        """Reading resumed ``count`` offsets past where it was (the reader's callback)."""
        self.offset_resets += 1
        self.offsets_lost += count
