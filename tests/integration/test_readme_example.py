"""The README's library example runs as written against a real broker."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import KafkaHandle
from tests.support import create_topic, produce

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> dict[str, Any]:
    block = re.search(r"```python\n(import asyncio\n.*?)```", README.read_text(), re.S)
    assert block is not None, "the README lost its library example"
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(README), "exec"), namespace)  # our own README
    return namespace


async def test_readme_example_reads_what_is_there_and_commits_advisory_offsets(
    kafka: KafkaHandle, unique: Callable[[str], str]
) -> None:
    topic = unique("readme")
    create_topic(kafka.bootstrap, topic, partitions=2)
    produce(kafka.bootstrap, topic, [b"x" * 10] * 500)
    read_topic = _example()["read_topic"]

    assert await read_topic(kafka.bootstrap, topic) == 500

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    group = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("orders-lake", [TopicPartition(topic, p) for p in range(2)])]
    )["orders-lake"].result(timeout=10)
    assert sorted(tp.offset for tp in group.topic_partitions) == [250, 250]
