"""Records written before the strict codecs (commit 2d1a153, files in ``golden/``) still decode, to
exactly the values they hold, and encode back to the same bytes: their format did not change. (A
manifest of then, without ``format_version``, is refused: no release wrote one.)"""
from __future__ import annotations

from pathlib import Path

from laminar_kafka.coordinator.base import EpochAck, Member, RoundOutcome
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_an_ack_and_a_member_of_the_previous_release_round_trip_byte_for_byte() -> None:
    ack = EpochAck.from_json(golden("ack.json"))
    assert (ack.node_id, ack.boot_id, ack.epoch, ack.assignment_version) == (2, "boot-b", 8, 3)
    assert ack.to_json() == golden("ack.json")
    member = Member.from_json(2, golden("member.json"))
    assert (member.boot_id, member.endpoint, member.leaving) == ("boot-b", "10.0.0.2:9000", False)
    assert member.to_json() == golden("member.json")


def test_a_register_of_the_previous_release_round_trips_byte_for_byte() -> None:
    control = ControlState.from_json(golden("register.json"))
    assert control.snapshot.version == 3 and control.snapshot.owners == (1, 2, 1, 2)
    assert control.round is not None and control.round.drain_id.target_version == 4
    assert control.round.drain_id == AssignmentDrainId(3, 4, 14362926331371675010)
    assert [d.outcome for d in control.decisions] == [RoundOutcome.COMMIT]
    assert (control.open_epoch, control.last_epoch, control.leader_token) == (8, 7, 5)
    assert control.to_json() == golden("register.json")
