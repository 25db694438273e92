"""A KafkaSource wired to a FIFO the test fills: what ``start()`` sets up, without a consumer."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from confluent_kafka import Message

from laminar_kafka.connector.protocol import DeliveryGuarantee
from laminar_kafka.kafka_source import KafkaSource
from laminar_kafka.kafka_source.config.source_config import KafkaSourceConfig
from laminar_kafka.kafka_source.decode.arrow_batch import BatchBuilder
from laminar_kafka.kafka_source.decode.records import RecordFields, Records
from laminar_kafka.kafka_source.read.batches import DecodeFailures
from laminar_kafka.kafka_source.read.fifo import ByteBoundedFifo


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


#: every field of a message, so a test's records suit any builder
ALL_FIELDS = RecordFields(topic=None, timestamps=True, keys=True, headers=True)


def records_of(messages: Sequence[Message]) -> Records:
    """``messages`` as the reader thread hands them over, every field read."""
    return Records.of(messages, ALL_FIELDS)
