"""`KafkaTestCluster.wait_in_sync`: returns once the brokers' metadata shows every replica in sync,
and names the partitions still short when it gives up (no servers: a fake admin client)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from laminar_kafka.testing.handles import KafkaTestCluster


@dataclass
class FakeAdmin:
    """Answers with the ISRs of ``states`` in turn (the last one for ever)."""

    states: list[dict[int, list[int]]]
    calls: int = field(default=0)

    def list_topics(self, topic: str, timeout: float) -> Any:
        isrs = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        partitions = {p: SimpleNamespace(id=p, isrs=isr, replicas=[1, 2, 3]) for p, isr in isrs.items()}
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=partitions, error=None)} if isrs else {})


def cluster_with(monkeypatch: pytest.MonkeyPatch, admin: FakeAdmin) -> KafkaTestCluster:
    monkeypatch.setattr(KafkaTestCluster, "admin", lambda self: admin)
    return KafkaTestCluster(bootstrap="127.0.0.1:1", brokers=(), backend="process")


def test_it_returns_once_every_replica_is_back_in_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = FakeAdmin([{0: [1, 3], 1: [3, 1, 2]}, {0: [3, 2, 1], 1: [1, 2, 3]}])
    cluster_with(monkeypatch, admin).wait_in_sync("t", timeout=10)
    assert admin.calls == 2


def test_it_names_the_partitions_still_short(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = FakeAdmin([{0: [1, 2, 3], 1: [1, 3]}])
    with pytest.raises(TimeoutError, match=r"topic 't' not in sync after 0.3s: partition 1 in sync \[1, 3\] of \[1, 2, 3\]"):
        cluster_with(monkeypatch, admin).wait_in_sync("t", timeout=0.3)


def test_a_topic_the_brokers_do_not_know_is_never_in_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TimeoutError, match=r"topic 't' not in sync after 0.3s: no partitions known"):
        cluster_with(monkeypatch, FakeAdmin([{}])).wait_in_sync("t", timeout=0.3)
