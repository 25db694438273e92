"""Partition routing, compatible with LaminarDB's Kafka partition routing ABI v1.

A Kafka partition belongs to exactly one vnode::

    vnode = xxh3_64(encoding) % vnode_count          # xxh3_64 with seed 0, as an unsigned 64-bit int

    encoding = b"laminardb.kafka.partition-route.v1\\0"   # 35 bytes: the tag and one NUL byte
             + u64le(len(source_bytes)) + source_bytes    # source identity, UTF-8; length in bytes
             + u64le(len(topic_bytes))  + topic_bytes     # topic name, UTF-8; length in bytes
             + u32le(partition)                           # 0 <= partition <= 2**31 - 1

Golden vector (pinned by the tests): source ``orders_source``, topic ``orders.v1``, partitions 0..7,
256 vnodes -> ``[106, 108, 234, 55, 225, 196, 217, 62]``.

The route depends only on its inputs, never on the cluster's membership, so every node computes the
same map. This module does no I/O.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

from laminar_kafka.coordinator.codec import PARTITION_MAX, is_int
from laminar_kafka.coordinator.errors import RoutingError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot, NodeId

__all__ = [
    "ROUTE_DOMAIN",
    "TopicPartitionId",
    "partition_vnode",
    "partitions_by_vnode",
    "vnode_loads",
    "owned_partitions",
]

ROUTE_DOMAIN: bytes = b"laminardb.kafka.partition-route.v1\0"

#: one partition of a partitioned log as ``(name, partition)``: a Kafka topic's, a Redis stream
#: family's. The project's one name for it, re-exported by ``laminar_kafka.connector``
#: (confluent-kafka's ``TopicPartition`` is the client's own class, with an offset and an error)
TopicPartitionId = tuple[str, int]


def _check_vnode_count(vnode_count: int) -> None:
    if not is_int(vnode_count) or vnode_count < 1:
        raise RoutingError(f"vnode_count {vnode_count!r} must be an int >= 1")


def _length_prefixed(value: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise RoutingError(f"{what} must be a str, got {type(value).__name__}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RoutingError(f"{what} {value!r} is not valid Unicode", cause=exc) from exc
    return struct.pack("<Q", len(data)) + data


def _route_prefix(source_identity: str, topic: str) -> bytes:
    if not isinstance(source_identity, str) or not source_identity:
        raise RoutingError("source_identity must be a non-empty str")
    if not isinstance(topic, str) or not topic:
        raise RoutingError("topic must be a non-empty str")
    return ROUTE_DOMAIN + _length_prefixed(source_identity, "source_identity") + _length_prefixed(
        topic, "topic"
    )


def _route(prefix: bytes, partition: int, vnode_count: int) -> int:
    if not is_int(partition) or not 0 <= partition <= PARTITION_MAX:
        raise RoutingError(f"partition {partition!r} must be an int in 0..{PARTITION_MAX}")
    return xxhash.xxh3_64_intdigest(prefix + struct.pack("<I", partition)) % vnode_count


def partition_vnode(source_identity: str, topic: str, partition: int, vnode_count: int) -> int:
    """The vnode of ``topic[partition]`` for ``source_identity``; always in ``0..vnode_count-1``.

    Raises :class:`RoutingError` for an empty identity or topic, a partition outside
    ``0..2**31-1``, or ``vnode_count < 1``.
    """
    _check_vnode_count(vnode_count)
    return _route(_route_prefix(source_identity, topic), partition, vnode_count)


def partitions_by_vnode(
    source_identity: str, topic_partitions: Iterable[TopicPartitionId], vnode_count: int
) -> dict[int, tuple[TopicPartitionId, ...]]:
    """Group partitions by vnode: ``{vnode: ((topic, partition), ...)}``.

    Only vnodes that carry at least one partition appear. Duplicate inputs count once; each tuple is
    sorted, and the dict is ordered by vnode, so the result is independent of input order.
    """
    _check_vnode_count(vnode_count)
    prefixes: dict[str, bytes] = {}
    groups: dict[int, set[TopicPartitionId]] = {}
    for topic, partition in topic_partitions:
        prefix = prefixes.get(topic)
        if prefix is None:
            prefix = prefixes[topic] = _route_prefix(source_identity, topic)
        vnode = _route(prefix, partition, vnode_count)
        groups.setdefault(vnode, set()).add((topic, partition))
    return {vnode: tuple(sorted(groups[vnode])) for vnode in sorted(groups)}


def vnode_loads(
    source_identity: str, topic_partitions: Iterable[TopicPartitionId], vnode_count: int
) -> dict[int, int]:
    """``{vnode: number of distinct partitions routed to it}`` (only loaded vnodes): placement's input."""
    return {
        vnode: len(members)
        for vnode, members in partitions_by_vnode(source_identity, topic_partitions, vnode_count).items()
    }


def owned_partitions(
    source_identity: str,
    topic_partitions: Iterable[TopicPartitionId],
    snapshot: AssignmentSnapshot,
    node_id: NodeId,
) -> frozenset[TopicPartitionId]:
    """The partitions among ``topic_partitions`` whose vnode ``node_id`` owns in ``snapshot``.

    For a fixed snapshot, the sets of distinct owners partition the input: each partition is owned by
    exactly one node id (possibly :data:`~laminar_kafka.coordinator.vnodes.registry.UNASSIGNED`).
    """
    owners = snapshot.owners
    return frozenset(
        tp
        for vnode, members in partitions_by_vnode(
            source_identity, topic_partitions, snapshot.vnode_count
        ).items()
        if owners[vnode] == node_id
        for tp in members
    )
