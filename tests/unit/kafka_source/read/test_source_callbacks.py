"""SourceCallbacks, what a KafkaSource gives its reader thread: counts in the source's metrics,
the out-of-range decision of the source's delivery and configuration, prefetch only for a builder
that prefetches."""
from __future__ import annotations

import pytest

from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.kafka_source.commits import AdvisoryCommits
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.records import Records
from laminar_kafka.kafka_source.errors import OffsetOutOfRangeError
from laminar_kafka.kafka_source.metrics import SourceMetrics
from laminar_kafka.kafka_source.read.opening import SourceCallbacks
from laminar_kafka.kafka_source.read.reader_seam import ReaderCallbacks

PROPS = {"bootstrap.servers": "127.0.0.1:1", "topic": "t", "group.id": "g", "format": "raw"}


class PrefetchCounter(BatchBuilder):
    def __init__(self, config: KafkaSourceConfig, prefetches: bool) -> None:
        super().__init__(config)
        self._prefetches = prefetches
        self.prefetched: list[Records] = []

    @property
    def prefetches(self) -> bool:
        return self._prefetches

    def prefetch(self, records: Records) -> None:
        self.prefetched.append(records)


def callbacks_of(prefetches: bool = False, properties: dict[str, str] | None = None) -> tuple[SourceCallbacks, SourceMetrics]:
    config = KafkaSourceConfig.from_properties({**PROPS, **(properties or {})})
    metrics = SourceMetrics()
    builder = PrefetchCounter(config, prefetches)
    return SourceCallbacks(config, DeliveryGuarantee.EXACTLY_ONCE, metrics, AdvisoryCommits(metrics, 1.0), builder), metrics


def test_the_reader_reports_land_in_the_source_metrics() -> None:
    callbacks, metrics = callbacks_of()
    seam: ReaderCallbacks = callbacks  # the protocol the reader takes
    seam.offsets_lost(5)
    seam.partitions_discovered(2)
    seam.consumer_replaced()
    assert (metrics.offsets_lost, metrics.offset_resets, metrics.partitions_discovered, metrics.clients_replaced) == (
        5, 1, 2, 1)
    assert not seam.callbacks_pending()  # no advisory commit in flight


@pytest.mark.parametrize("prefetches", [True, False])
def test_prefetch_runs_only_for_a_builder_that_prefetches(prefetches: bool) -> None:
    callbacks, _metrics = callbacks_of(prefetches)
    records = Records([], [], [], [])
    callbacks.prefetch(records)
    assert callbacks.builder.prefetched == ([records] if prefetches else [])  # type: ignore[attr-defined]


def test_read_on_at_follows_the_sources_out_of_range_policy() -> None:
    callbacks, _metrics = callbacks_of()
    assert callbacks.read_on_at(("t", 0), 12, 10, 20) == 12  # inside the retained range: read on there
    with pytest.raises(OffsetOutOfRangeError):
        callbacks.read_on_at(("t", 0), 7, 10, 20)  # records deleted unread: fail-on-data-loss (default true)
    lenient, _ = callbacks_of(properties={"fail-on-data-loss": "false"})
    assert lenient.read_on_at(("t", 0), 7, 10, 20) == 10
