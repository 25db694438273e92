"""Owner maps of one source: routing its partitions to vnodes and checking a map assigns them (pure).

Routing is ABI v1 of :mod:`laminar_kafka.coordinator.vnodes.routing` (:func:`route_partitions`). An
owner map (a snapshot's or a pending target's ``owners``, one entry per vnode) is valid for a source
if it assigns every vnode that routes one of its partitions, or no vnode at all: an all-unassigned
map (version 0 before the first publication, or no live member) legitimately gives nobody anything.
A map that assigns some vnodes and leaves a routed one unassigned is rejected
(:func:`require_assigned`: :class:`~laminar_kafka.connector.errors.UnassignedVnodeError`).
No I/O; used by :mod:`laminar_kafka.connector.ownership`.
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from laminar_kafka.connector.errors import UnassignedVnodeError
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId, partition_vnode

__all__ = ["require_assigned", "route_partitions", "unassigned_vnodes"]


def route_partitions(
    source_identity: str, partitions: frozenset[TopicPartitionId] | set[TopicPartitionId] | list[TopicPartitionId], vnode_count: int
) -> Mapping[TopicPartitionId, int]:
    """``{tp: vnode}`` for every partition (routing ABI v1 of :mod:`laminar_kafka.coordinator.vnodes.routing`)."""
    return MappingProxyType(
        {tp: partition_vnode(source_identity, tp[0], tp[1], vnode_count) for tp in sorted(partitions)}
    )


def unassigned_vnodes(routes: Mapping[TopicPartitionId, int], owners: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The vnodes of ``routes`` that ``owners`` leaves unassigned while it assigns some vnode.

    Empty for a map that assigns every routed vnode, and for a map that assigns no vnode at all
    (nothing published yet, or no live member: legitimately nobody reads).
    """
    if all(owner == UNASSIGNED for owner in owners):
        return ()
    return tuple(sorted({vnode for vnode in routes.values() if owners[vnode] == UNASSIGNED}))


def require_assigned(routes: Mapping[TopicPartitionId, int], snapshot: AssignmentSnapshot) -> None:
    """Raise :class:`UnassignedVnodeError` if ``snapshot``'s owner map leaves a vnode of ``routes``
    unassigned while it assigns others (:func:`unassigned_vnodes`); return otherwise."""
    vnodes = unassigned_vnodes(routes, snapshot.owners)
    if vnodes:
        raise UnassignedVnodeError(
            f"assignment version {snapshot.version} leaves {len(vnodes)} vnode(s) that route "
            f"partitions of this source unassigned while other vnodes have owners: {list(vnodes)[:16]}",
            version=snapshot.version, vnodes=vnodes,
        )
