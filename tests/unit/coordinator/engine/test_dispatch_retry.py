"""The dispatcher does not lose a register value whose observation failed on a transient error.

A node that drops such a value misses its events (here the epoch that opened) until the register
changes again, and the leader may be waiting for exactly this node's ack: the pipeline stalls.
"""
from __future__ import annotations

import threading

from laminar_kafka.coordinator.engine.dispatch import Dispatcher
from laminar_kafka.coordinator.engine.events import (
    CoordinatorEvent,
    CoordinatorMetrics,
    EpochCommitted,
    EpochOpened,
    Subscribers,
)
from laminar_kafka.coordinator.errors import CoordinatorUnavailable
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import Manifest
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot

SNAPSHOT = AssignmentSnapshot(1, (1, 1), (1, 1))
#: epoch 1 open (the node's first look), then epoch 1 committed and epoch 2 open
FIRST = ControlState(SNAPSHOT, ((1, "boot"),), open_epoch=1, last_epoch=0)
REGISTER = ControlState(SNAPSHOT, ((1, "boot"),), open_epoch=2, last_epoch=1)


class FlakyStore(MemoryStore):
    """Reads the register above; the manifest's first ``failures`` reads time out."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.manifest_reads = 0

    def read_register(self) -> ControlState | None:
        return REGISTER

    def read_manifest(self, epoch: int) -> Manifest | None:
        self.manifest_reads += 1
        if self.manifest_reads <= self.failures:
            raise CoordinatorUnavailable("reading the manifest timed out")
        return Manifest(epoch, 1, {"s": {"t:0": 5}}, acked_by=((1, "boot"),))


def observe_once(failures: int) -> tuple[list[CoordinatorEvent], FlakyStore]:
    store = FlakyStore(failures)
    subscribers = Subscribers()
    events: list[CoordinatorEvent] = []
    opened = threading.Event()

    def collect(event: CoordinatorEvent) -> None:
        events.append(event)
        if isinstance(event, EpochOpened) and event.epoch == 2:
            opened.set()

    subscribers.add(collect)
    dispatcher = Dispatcher(store, subscribers, CoordinatorMetrics(), 1, lambda: "boot", SNAPSHOT)
    dispatcher.start()
    try:
        dispatcher.observe(FIRST.to_json())
        dispatcher.observe(REGISTER.to_json())  # the last watch that fires: no other value follows
        assert opened.wait(10), f"the open epoch was never delivered: {events}"
    finally:
        dispatcher.stop()
    return events, store


def test_a_value_whose_manifest_read_failed_is_observed_again_and_its_events_delivered_once() -> None:
    events, store = observe_once(failures=2)
    assert store.manifest_reads == 3
    committed = [e for e in events if isinstance(e, EpochCommitted)]
    assert [e.manifest.epoch for e in committed] == [1]
    assert [e.epoch for e in events if isinstance(e, EpochOpened)] == [1, 2]


def test_a_value_read_at_once_is_observed_once() -> None:
    events, store = observe_once(failures=0)
    assert store.manifest_reads == 1
    assert [e.epoch for e in events if isinstance(e, EpochOpened)] == [1, 2]
