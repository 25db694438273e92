"""LocalCoordinator: the same interface in one process, durable manifests in a directory."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    CoordinatorConfig,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
)
from laminar_kafka.coordinator.errors import FencedError
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.state import ControlState
from tests.integration.coordinator.helpers import SimulatedNode

pytestmark = pytest.mark.timeout(60)

CONFIG = CoordinatorConfig(pipeline="local", checkpoint_interval=0.05, vnode_count=8, manifests_to_keep=3)


def test_epochs_commit_durably_and_survive_a_restart(tmp_path: Path) -> None:
    coordinator = LocalCoordinator(CONFIG, tmp_path)
    node = SimulatedNode(coordinator)
    coordinator.start(timeout=10)
    try:
        first = node.wait_for(AssignmentChanged)
        assert first.snapshot.nodes() == {1} and first.manifest_epoch == 0
        committed = node.wait_for(EpochCommitted, lambda e: e.manifest.epoch >= 5)
        assert committed.manifest.cursors["s"]["t:0"] == 50
        assert coordinator.metrics.epochs_committed >= 5
    finally:
        node.close()
        coordinator.stop()
    files = sorted(p.name for p in tmp_path.glob("manifest-*.json"))
    assert len(files) <= CONFIG.manifests_to_keep + 1  # garbage collected

    again = LocalCoordinator(CONFIG, tmp_path)
    node = SimulatedNode(again)
    again.start(timeout=10)
    try:
        latest = again.latest_manifest()
        assert latest is not None and latest.epoch >= 5
        changed = node.wait_for(AssignmentChanged)
        assert changed.manifest_epoch == latest.epoch  # new boot resumes from the durable manifest
        assert changed.snapshot.version > first.snapshot.version
        later = node.wait_for(EpochCommitted, lambda e: e.manifest.epoch > latest.epoch)
        assert later.manifest.cursors["s"]["t:0"] >= latest.cursors["s"]["t:0"]
    finally:
        node.close()
        again.stop()


def test_stale_ack_is_rejected_and_counted(tmp_path: Path) -> None:
    coordinator = LocalCoordinator(CONFIG, tmp_path)
    node = SimulatedNode(coordinator, auto=False)
    coordinator.start(timeout=10)
    try:
        opened = node.wait_for(EpochOpened)
        with pytest.raises(FencedError):
            coordinator.ack_epoch(EpochAck(1, "not-my-boot", opened.epoch, opened.assignment_version, {}))
        with pytest.raises(FencedError):
            coordinator.ack_epoch(EpochAck(1, coordinator.boot_id, opened.epoch, opened.assignment_version + 1, {}))
        assert coordinator.metrics.stale_acks_rejected == 2
        node.ack(opened)
        node.wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch)
    finally:
        node.close()
        coordinator.stop()


def test_planned_leave_drains_every_vnode_away(tmp_path: Path) -> None:
    coordinator = LocalCoordinator(CONFIG, tmp_path)
    node = SimulatedNode(coordinator)
    coordinator.start(timeout=10)
    try:
        node.wait_for(EpochCommitted)
        coordinator.request_leave()
        started = node.wait_for(RoundStarted)
        assert set(started.target_owners) == {0}
        decided = node.wait_for(RoundDecided)
        assert decided.outcome is RoundOutcome.COMMIT and decided.manifest_epoch > 0
        final = node.wait_for(AssignmentChanged, lambda e: not e.snapshot.nodes())
        assert final.manifest_epoch == decided.manifest_epoch
    finally:
        node.close()
        coordinator.stop()


def test_a_decision_whose_register_write_failed_can_be_applied_again(tmp_path: Path) -> None:
    from dataclasses import replace

    from laminar_kafka.coordinator.engine.model import CreateDecision, Decision, RoundState, StartRound, Step
    from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

    disk_full = False

    def crash(path: Path) -> None:
        if disk_full:
            raise OSError("disk full")

    coordinator = LocalCoordinator(CONFIG, tmp_path, before_rename=crash)
    coordinator.start(timeout=10)
    coordinator.stop()  # the leader thread is gone: this test applies the step itself
    store = coordinator.store
    control, version = store.register_and_version()
    term = store.leader()
    assert control is not None and term is not None
    drain_id = AssignmentDrainId(control.version, control.version + 1, 7)
    running = RoundState(drain_id, control.snapshot.owners, 0, term.token, ())
    decision = Decision(drain_id, RoundOutcome.ABORT, 0)
    step = Step("decide", replace(control, round=running), (StartRound(running), CreateDecision(decision)))

    disk_full = True
    with pytest.raises(OSError):
        coordinator.execute(term, step, version)
    assert store.read_register() == control  # nothing was applied
    disk_full = False
    coordinator.execute(term, step, version)  # the leader loop's retry: the round was never decided durably
    assert coordinator.metrics.rounds_aborted == 1
    assert ControlState.from_json((tmp_path / "state.json").read_bytes()).round == running
    with pytest.raises(FencedError):  # decided now: a decision is create-once
        coordinator.execute(term, step, version + 1)
