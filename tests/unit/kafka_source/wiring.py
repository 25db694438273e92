"""A KafkaSource wired to a FIFO the test fills: what ``start()`` sets up, without a consumer."""
from __future__ import annotations

from collections.abc import Mapping

from kafka_source import KafkaSource
from kafka_source.arrow_batch import BatchBuilder
from kafka_source.batches import DecodeFailures
from kafka_source.config import KafkaSourceConfig
from kafka_source.connector import DeliveryGuarantee
from kafka_source.fifo import ByteBoundedFifo


def running_source(properties: Mapping[str, str], delivery: DeliveryGuarantee,
                   topic: str) -> tuple[KafkaSource, ByteBoundedFifo]:
    """A started-looking source of ``properties`` reading partition 0 of ``topic`` from offset 0."""
    config = KafkaSourceConfig.from_properties(properties)
    source = KafkaSource(config)
    fifo = ByteBoundedFifo(1 << 30)
    source._fifo = fifo
    source._builder = BatchBuilder(config)
    source._delivery = delivery
    source._decode_failures = DecodeFailures.of(config, delivery, source.metrics)
    source._started = True
    source._cursor = {(topic, 0): 0}
    return source, fifo
