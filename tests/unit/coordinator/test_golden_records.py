"""Records written by the release before the strict codecs (commit 2d1a153, files in ``golden/``)
still decode, to exactly the values they hold, and encode back to the same bytes; the manifest
only gains its ``format_version``. A pipeline's durable state survives the upgrade (a rolling
upgrade mixes both releases on one ZooKeeper subtree)."""
from __future__ import annotations

import json
from pathlib import Path

from laminar_kafka.coordinator.base import EpochAck, Manifest, Member, RoundOutcome
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.vnodes.rounds import AssignmentDrainId

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_a_manifest_of_the_previous_release_decodes_and_only_gains_its_format_version() -> None:
    manifest = Manifest.from_json(golden("manifest.json"))
    assert (manifest.epoch, manifest.assignment_version) == (7, 3)
    assert manifest.cursors == {"src": {"orders:0": 120, "orders:1": 0}}
    assert manifest.outputs == ("staged/a.parquet",)
    assert manifest.acked_by == ((1, "boot-a"), (2, "boot-b"))
    assert json.loads(manifest.to_json()) == {**json.loads(golden("manifest.json")), "format_version": 1}


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
