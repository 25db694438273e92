"""`laminar-kafka dev produce` against a real broker: it creates a missing topic, continues an existing
one (numbered records, partition n % partitions), and refuses a partition count the topic does not
have; what `status --topic re:<regex>` reads finds the topic by its pattern."""
from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from laminar_kafka.cli.main import main
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.ops.status_kafka import read_kafka
from laminar_kafka.kafka_source.clients import KafkaClientConfig
from tests.conftest import KafkaHandle
from tests.support import high_watermarks, read_all

pytestmark = pytest.mark.integration


def test_dev_produce_creates_then_continues_a_topic(kafka: KafkaHandle, unique: Callable[[str], str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique("produce")
    argv = ["dev", "produce", "--bootstrap", kafka.bootstrap, "--topic", topic]
    assert main([*argv, "--partitions", "3", "--records", "10"]) == 0
    assert capsys.readouterr().out.startswith(f"created {topic} (3 partitions); produced 10 records")
    assert main([*argv, "--records", "5", "--first", "10", "--rate", "50"]) == 0
    assert capsys.readouterr().out.startswith(f"topic {topic} (3 partitions); produced 5 records")
    assert high_watermarks(kafka.bootstrap, topic) == {0: 5, 1: 5, 2: 5}
    records = read_all(kafka.bootstrap, topic)
    assert [value for _, value in records[1]] == [b"record-%012d" % n for n in (1, 4, 7, 10, 13)]
    assert main([*argv, "--partitions", "4", "--records", "1"]) == 2
    assert f"topic '{topic}' exists with 3 partitions, not 4" in capsys.readouterr().err
    assert high_watermarks(kafka.bootstrap, topic) == {0: 5, 1: 5, 2: 5}  # refused before producing
    found = read_kafka(KafkaClientConfig(kafka.bootstrap), [f"re:{re.escape(topic)}|{re.escape(topic)}-none"])
    assert found == {(topic, 0): 5, (topic, 1): 5, (topic, 2): 5}
    with pytest.raises(UsageError, match="no topic matching"):
        read_kafka(KafkaClientConfig(kafka.bootstrap), [f"re:{re.escape(topic)}-none"])
