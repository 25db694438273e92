"""Quiet epochs: once epochs stop moving cursors the leader waits the quiet interval, and a node's
ask brings the next epoch at the ordinary interval (the embedded coordinator, real threads)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from laminar_kafka.coordinator.base import CoordinatorEvent, EpochAck, EpochCommitted, EpochOpened
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.model import QUIET_AFTER_EPOCHS, epoch_interval
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.devstack.waiting import EventLog
from laminar_kafka.errors import ConfigurationError

KEYS = [f"t:{p}" for p in range(4)]
INTERVAL_S, QUIET_S = 0.05, 1.0


def control(last_epoch: int) -> ControlState:
    snapshot = AssignmentSnapshot.initial(4).next(1, (1, 1, 1, 1))
    return ControlState(snapshot=snapshot, boots={1: "b"}, last_commit_ms=0, leader_token=1,
                        last_epoch=last_epoch, manifest_epoch=0)


def test_the_quiet_interval_holds_after_enough_quiet_epochs_until_a_node_asks_after_the_last() -> None:
    config = CoordinatorConfig(pipeline="q", checkpoint_interval=2.0, quiet_checkpoint_interval=10.0)
    quiet = QUIET_AFTER_EPOCHS
    assert epoch_interval(config, control(7), quiet - 1, 0) == 2.0  # not quiet long enough
    assert epoch_interval(config, control(7), quiet, 0) == 10.0
    assert epoch_interval(config, control(7), quiet, 6) == 10.0  # an ask after an older epoch is spent
    assert epoch_interval(config, control(7), quiet, 7) == 2.0  # asked after the last: ordinary interval
    assert epoch_interval(config, None, quiet, 0) == 2.0
    off = CoordinatorConfig(pipeline="q", checkpoint_interval=2.0)
    assert epoch_interval(off, control(7), 100, 0) == 2.0


@pytest.mark.parametrize("quiet", [0.5, -1.0, True])
def test_a_quiet_interval_below_the_checkpoint_interval_is_refused(quiet: float) -> None:
    with pytest.raises(ConfigurationError, match="quiet_checkpoint_interval"):
        CoordinatorConfig(pipeline="q", checkpoint_interval=1.0, quiet_checkpoint_interval=quiet)


def test_epochs_that_move_nothing_slow_to_the_quiet_interval_and_an_ask_brings_the_next_at_once(
    tmp_path: Path,
) -> None:
    coordinator = LocalCoordinator(CoordinatorConfig(pipeline="q", checkpoint_interval=INTERVAL_S, vnode_count=4,
                                                     quiet_checkpoint_interval=QUIET_S), tmp_path)
    events: EventLog[CoordinatorEvent] = EventLog()
    coordinator.subscribe(events.append)
    coordinator.start(timeout=10)
    try:
        opened_at: list[float] = []

        def ack_next(offset: int) -> EpochOpened:
            opened = events.wait_for(EpochOpened, lambda e: e.epoch > len(opened_at), timeout=5 * QUIET_S)
            opened_at.append(time.monotonic())
            coordinator.ack_epoch(EpochAck(coordinator.node_id, coordinator.boot_id, opened.epoch,
                                           opened.assignment_version, {"s": {k: offset for k in KEYS}}))
            events.wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch, timeout=5)
            return opened

        ack_next(1)  # cursors move: not quiet
        for _ in range(QUIET_AFTER_EPOCHS + 2):
            ack_next(1)  # nothing moved
        gaps = [b - a for a, b in zip(opened_at, opened_at[1:], strict=False)]
        assert max(gaps[:QUIET_AFTER_EPOCHS]) < QUIET_S / 2  # the ordinary interval while counting
        assert gaps[-1] >= QUIET_S * 0.9  # then the quiet one

        last = ack_next(1).epoch
        asked = time.monotonic()
        coordinator.request_epoch(last)  # rows no epoch covers: the next opens at the ordinary interval
        ack_next(2)
        assert opened_at[-1] - asked < QUIET_S / 2
        ack_next(3)  # cursors moved: ordinary epochs again, no ask needed
        ack_next(3)
        assert opened_at[-1] - opened_at[-2] < QUIET_S / 2
    finally:
        coordinator.stop()
