"""Epoch acks: whether one is valid for the open epoch (:func:`classify_ack`), and the manifest
the valid ones make (:func:`merge_manifest`). Pure; used by :func:`laminar_kafka.coordinator.engine.model.next_step`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from laminar_kafka.coordinator.codec import parse_partition_key
from laminar_kafka.coordinator.errors import CodecError, RoutingError
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import partitions_by_vnode

__all__ = ["AckVerdict", "classify_ack", "merge_manifest", "unowned_cursor"]


@dataclass(frozen=True)
class AckVerdict:
    """``reason`` is "" for a valid ack. ``reportable``: the ack comes from the live, current boot of
    an owner (identity checks passed) but its content is invalid, so its node must be told."""

    ack: EpochAck
    reason: str
    reportable: bool = False


def unowned_cursor(ack: EpochAck, snapshot: AssignmentSnapshot) -> str:
    """Why a cursor of ``ack`` names a partition its node does not own in ``snapshot`` ("" if none).

    Each ``topic:partition`` key of ``ack.cursors[source]`` routes to a vnode by
    :func:`laminar_kafka.coordinator.vnodes.routing.partition_vnode` with that source identity; its owner must be
    ``ack.node_id``. A key that is not ``topic:partition`` (canonical decimal partition) is invalid too.
    """
    for source, partitions in sorted(ack.cursors.items()):
        tps: list[tuple[str, int]] = []
        for key in partitions:
            try:
                tps.append(parse_partition_key(key))
            except CodecError as exc:
                return f"cursor key {key!r} of {source!r} is not topic:partition ({exc.message})"
        try:
            groups = partitions_by_vnode(source, tps, snapshot.vnode_count)
        except RoutingError as exc:
            return f"cursors of {source!r} cannot be routed: {exc.message}"
        for vnode, members in groups.items():
            if snapshot.owners[vnode] != ack.node_id:
                topic, partition = members[0]
                return f"cursor {topic}:{partition} is not owned by node {ack.node_id} at version {snapshot.version}"
    return ""


def classify_ack(
    ack: EpochAck, control: ControlState, members: Mapping[int, Member], previous: Manifest | None
) -> AckVerdict:
    """Why ``ack`` is invalid for the open epoch of ``control`` ("" when it is valid).

    Identity first (epoch, version, owner, recorded and live boot id: not reportable, the sender is
    not the live owner), then content (every cursor owned at the epoch's version, none below
    ``previous``: reportable).
    """
    if control.open_epoch == 0 or ack.epoch != control.open_epoch:
        return AckVerdict(ack, "not the open epoch")
    if ack.assignment_version != control.version:
        return AckVerdict(ack, f"version {ack.assignment_version} is not the epoch's {control.version}")
    if ack.node_id not in control.snapshot.nodes():
        return AckVerdict(ack, "not an owner at the epoch's version")
    if control.boot_of(ack.node_id) != ack.boot_id:
        return AckVerdict(ack, "boot id is not the one recorded at the epoch's version")
    member = members.get(ack.node_id)
    if member is None or member.boot_id != ack.boot_id:
        return AckVerdict(ack, "boot id is not the member's live boot id")
    foreign = unowned_cursor(ack, control.snapshot)
    if foreign:
        return AckVerdict(ack, foreign, reportable=True)
    if previous is not None:
        for source, partitions in ack.cursors.items():
            before = previous.cursors.get(source, {})
            for tp, offset in partitions.items():
                if offset < before.get(tp, 0):
                    reason = f"cursor {source}/{tp} = {offset} regresses below {before[tp]}"
                    return AckVerdict(ack, reason, reportable=True)
    return AckVerdict(ack, "")


def merge_manifest(
    epoch: int, version: int, previous: Manifest | None, acks: Sequence[EpochAck]
) -> Manifest:
    """Previous cursors overlaid with each ack's cursors; outputs = union of the acks' outputs."""
    cursors: dict[str, dict[str, int]] = {}
    if previous is not None:
        cursors = {source: dict(parts) for source, parts in previous.cursors.items()}
    outputs: set[str] = set()
    for ack in sorted(acks, key=lambda a: a.node_id):
        for source, parts in ack.cursors.items():
            cursors.setdefault(source, {}).update(parts)
        outputs.update(ack.outputs)
    return Manifest(
        epoch=epoch,
        assignment_version=version,
        cursors=cursors,
        outputs=tuple(sorted(outputs)),
        acked_by=tuple(sorted((a.node_id, a.boot_id) for a in acks)),
    )
