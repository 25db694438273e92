"""`laminar_kafka.coordinator.zk.coordinator.went_back`: a register that is gone or smaller than the one a node saw is another
control state (deleted, replaced, restored from an older copy, reseeded while the node was cut off)."""
from __future__ import annotations

from dataclasses import replace

from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.zk.coordinator import went_back


def register(version: int, last_epoch: int) -> ControlState:
    snapshot = AssignmentSnapshot.initial(4).next(1, [1, 1, 1, 1])
    for v in range(2, version + 1):
        snapshot = snapshot.next(v, [1, 1, 1, 1])
    return ControlState(snapshot=snapshot, boots=((1, "b"),), last_epoch=last_epoch)


def test_nothing_seen_or_a_successor_is_not_going_back() -> None:
    seen = register(3, 10)
    assert went_back(None, register(1, 0).to_json(), True) == ""
    assert went_back(seen, seen.to_json(), True) == ""
    assert went_back(seen, register(4, 10).to_json(), True) == ""
    assert went_back(seen, register(3, 11).to_json(), True) == ""
    assert went_back(seen, b"not json", True) == ""  # the dispatcher reports a malformed register


def test_a_register_that_is_gone_or_smaller_went_back() -> None:
    seen = register(3, 10)
    assert went_back(seen, None, False).startswith("is gone (this node saw version 3, epoch 10)")
    assert "went back to version 3, epoch 9" in went_back(seen, register(3, 9).to_json(), True)
    # reseeded from the lake while this node was cut off: epochs continue above, versions start again
    assert "went back to version 1, epoch 27" in went_back(seen, register(1, 27).to_json(), True)


def test_version_zero_seen_is_not_judged() -> None:
    initial = replace(register(1, 0), snapshot=AssignmentSnapshot.initial(4))
    assert went_back(initial, None, False) == ""
