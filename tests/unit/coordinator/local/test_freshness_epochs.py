"""With a freshness target the embedded coordinator's leader has no epoch clock: no epoch opens
until the node asks, an ask opens the next at once, and a spent ask opens nothing more (real threads)."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.coordinator.base import CoordinatorEvent, EpochAck, EpochCommitted, EpochOpened
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.devstack.errors import WaitTimeout
from laminar_kafka.devstack.waiting import EventLog
from laminar_kafka.errors import ConfigurationError

KEYS = [f"t:{p}" for p in range(4)]
#: far above how long an ask takes to open an epoch here, far below the (unused) interval's multiple
QUIET_WINDOW_S = 0.5


@pytest.mark.parametrize("target", [-1.0, True, "1"])
def test_a_negative_or_non_numeric_target_is_refused(target: object) -> None:
    with pytest.raises(ConfigurationError, match="freshness_target"):
        CoordinatorConfig(pipeline="f", freshness_target=target)  # type: ignore[arg-type]


def test_epochs_open_only_when_the_node_asks(tmp_path: Path) -> None:
    config = CoordinatorConfig(pipeline="f", checkpoint_interval=0.05, freshness_target=1.0, vnode_count=4)
    coordinator = LocalCoordinator(config, tmp_path)
    events: EventLog[CoordinatorEvent] = EventLog()
    coordinator.subscribe(events.append)
    coordinator.start(timeout=10)
    try:
        # a new pipeline's first epoch opens at once: no ask stored reads as an ask after epoch 0
        first = events.wait_for(EpochOpened, lambda e: e.epoch == 1, timeout=5)
        coordinator.ack_epoch(EpochAck(coordinator.node_id, coordinator.boot_id, 1, first.assignment_version,
                                       {"s": {k: 1 for k in KEYS}}))
        events.wait_for(EpochCommitted, lambda e: e.manifest.epoch == 1, timeout=5)
        with pytest.raises(WaitTimeout):  # 10 checkpoint intervals: the clock is off
            events.wait_for(EpochOpened, lambda e: e.epoch == 2, timeout=QUIET_WINDOW_S)
        coordinator.request_epoch(1)
        opened = events.wait_for(EpochOpened, lambda e: e.epoch == 2, timeout=5)
        coordinator.ack_epoch(EpochAck(coordinator.node_id, coordinator.boot_id, 2, opened.assignment_version,
                                       {"s": {k: 2 for k in KEYS}}))
        events.wait_for(EpochCommitted, lambda e: e.manifest.epoch == 2, timeout=5)
        coordinator.request_epoch(1)  # an ask after an older epoch is spent
        with pytest.raises(WaitTimeout):
            events.wait_for(EpochOpened, lambda e: e.epoch == 3, timeout=QUIET_WINDOW_S)
    finally:
        coordinator.stop()
