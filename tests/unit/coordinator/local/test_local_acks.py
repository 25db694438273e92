"""LocalCoordinator: pinned start, topic ids, idempotent retried acks, and rejected acks reported to
the node and replaced (the same contract as the ZooKeeper backend, in one process)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.coordinator.base import (
    AckRejected,
    CoordinatorConfig,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    initial_manifest,
)
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.devstack.waiting import EventLog
from laminar_kafka.errors import ConfigurationError

pytestmark = pytest.mark.timeout(30)

KEYS = [f"t:{p}" for p in range(8)]


class Recorder(EventLog[CoordinatorEvent]):
    """The events `coordinator` delivers, awaitable by type."""

    def __init__(self, coordinator: LocalCoordinator) -> None:
        super().__init__()
        coordinator.subscribe(self.append)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalCoordinator, Recorder]]:
    coordinator = LocalCoordinator(CoordinatorConfig(pipeline="l", checkpoint_interval=0.02, vnode_count=4,
                                                     manifests_to_keep=2), tmp_path)
    recorder = Recorder(coordinator)
    coordinator.start(timeout=10)
    try:
        yield coordinator, recorder
    finally:
        coordinator.stop()


def ack(c: LocalCoordinator, opened: EpochOpened, offset: int, outputs: tuple[str, ...] = ()) -> EpochAck:
    value = EpochAck(c.node_id, c.boot_id, opened.epoch, opened.assignment_version,
                     {"s": {k: offset for k in KEYS}}, outputs)
    c.ack_epoch(value)
    return value


def test_pin_start_is_create_once_durable_and_the_base_of_the_first_manifest(
    local: tuple[LocalCoordinator, Recorder], tmp_path: Path
) -> None:
    c, events = local
    assert c.latest_manifest() is None
    with pytest.raises(CoordinatorError):
        c.manifest(0)
    pinned = c.pin_start(initial_manifest({"s": {k: 3 for k in KEYS}, "gone": {"x:0": 7}}))
    assert c.pin_start(initial_manifest({"s": {"t:0": 99}})) == pinned
    assert c.latest_manifest() == pinned and c.manifest(0) == pinned
    assert (tmp_path / f"manifest-{0:020d}.json").is_file()
    with pytest.raises(CoordinatorError):
        c.pin_start(Manifest(0, 0, {}, outputs=("x",)))

    opened = events.wait_for(EpochOpened)
    ack(c, opened, 2)  # below the pinned 3: rejected, reported
    rejected = events.wait_for(AckRejected)
    assert rejected.epoch == opened.epoch and "regresses below 3" in rejected.reason
    ack(c, opened, 4)  # the replacement
    first = events.wait_for(EpochCommitted).manifest
    assert first.epoch == opened.epoch and first.cursors == {"s": {k: 4 for k in KEYS}, "gone": {"x:0": 7}}
    assert [e for e in events.events if isinstance(e, AckRejected)] == [rejected]

    for _ in range(5):  # more epochs: garbage collection keeps the last 2 manifests and the initial one
        opened = events.wait_for(EpochOpened, lambda e: e.epoch > c.latest_manifest().epoch)  # type: ignore[union-attr]
        ack(c, opened, 10 * opened.epoch)
        events.wait_for(EpochCommitted, lambda e, n=opened.epoch: e.manifest.epoch == n)
    files = sorted(p.name for p in tmp_path.glob("manifest-*.json"))
    assert files[0] == f"manifest-{0:020d}.json" and len(files) <= 4
    c.stop()
    again = LocalCoordinator(c.config, tmp_path)
    assert again.pin_start(initial_manifest({"s": {}})) == pinned  # durable across a restart


def test_a_retried_ack_is_idempotent_and_an_ack_of_another_boot_is_fenced(
    local: tuple[LocalCoordinator, Recorder]
) -> None:
    c, events = local
    opened = events.wait_for(EpochOpened)
    sent = ack(c, opened, 1)
    events.wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch)
    c.ack_epoch(sent)  # a retry whose answer was lost
    assert c.metrics.stale_acks_rejected == 0
    c.rejoin()  # a new boot: its ack of the committed epoch is not in the manifest
    with pytest.raises(FencedError):
        c.ack_epoch(EpochAck(c.node_id, c.boot_id, opened.epoch, opened.assignment_version, {}))
    with pytest.raises(FencedError):
        c.ack_epoch(EpochAck(c.node_id, c.boot_id, opened.epoch + 100, opened.assignment_version, {}))
    assert c.metrics.stale_acks_rejected == 2


def test_pin_topic_ids_is_create_once_and_durable(tmp_path: Path) -> None:
    config = CoordinatorConfig(pipeline="l", checkpoint_interval=60)
    c = LocalCoordinator(config, tmp_path)
    assert c.pin_topic_ids({"orders": "a", "pay-ments.v1": "b"}) == {"orders": "a", "pay-ments.v1": "b"}
    assert c.pin_topic_ids({"orders": "c", "new": "d"}) == {"orders": "a", "new": "d"}
    assert LocalCoordinator(config, tmp_path).pin_topic_ids({"orders": "z"}) == {"orders": "a"}
    for bad in ({"a/b": "x"}, {"": "x"}, {"t": ""}, {"x" * 250: "x"}):
        with pytest.raises(ConfigurationError):
            c.pin_topic_ids(bad)
