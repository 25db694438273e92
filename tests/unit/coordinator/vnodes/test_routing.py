from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.coordinator.codec import PARTITION_MAX
from laminar_kafka.coordinator.errors import RoutingError
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.routing import (
    owned_partitions,
    partition_vnode,
    partitions_by_vnode,
    vnode_loads,
)

GOLDEN = [106, 108, 234, 55, 225, 196, 217, 62]

identities = st.text(min_size=1, max_size=20)
topics = st.text(min_size=1, max_size=20)
partitions = st.integers(min_value=0, max_value=PARTITION_MAX)
vnode_counts = st.integers(min_value=1, max_value=4096)


def reference_route(source: str, topic: str, partition: int, vnode_count: int) -> int:
    """Independent spelling of the ABI v1 layout, byte by byte."""
    src = source.encode("utf-8")
    top = topic.encode("utf-8")
    data = bytearray(b"laminardb.kafka.partition-route.v1")
    data += b"\x00"
    data += len(src).to_bytes(8, "little") + src
    data += len(top).to_bytes(8, "little") + top
    data += partition.to_bytes(4, "little")
    return xxhash.xxh3_64(bytes(data)).intdigest() % vnode_count


def test_golden_vector() -> None:
    assert [partition_vnode("orders_source", "orders.v1", p, 256) for p in range(8)] == GOLDEN


def test_golden_vector_through_grouping() -> None:
    groups = partitions_by_vnode("orders_source", [("orders.v1", p) for p in range(8)], 256)
    for p, vnode in enumerate(GOLDEN):
        assert ("orders.v1", p) in groups[vnode]


def _variant(prefix: bytes, length_fmt: str, partition_fmt: str) -> list[int]:
    src, top = b"orders_source", b"orders.v1"
    return [
        xxhash.xxh3_64_intdigest(
            prefix
            + struct.pack(length_fmt, len(src)) + src
            + struct.pack(length_fmt, len(top)) + top
            + struct.pack(partition_fmt, p)
        )
        % 256
        for p in range(8)
    ]


def test_layout_is_pinned() -> None:
    tag = b"laminardb.kafka.partition-route.v1"
    assert _variant(tag + b"\0", "<Q", "<I") == GOLDEN
    # Every near-miss spelling of the layout gives a different vector, so the documented one is the ABI.
    assert _variant(tag, "<Q", "<I") != GOLDEN
    assert _variant(tag + b"\0", "<I", "<I") != GOLDEN
    assert _variant(tag + b"\0", "<Q", "<Q") != GOLDEN
    assert _variant(tag + b"\0", ">Q", ">I") != GOLDEN


@given(identities, topics, partitions, vnode_counts)
def test_matches_reference_layout_and_is_in_range(source: str, topic: str, partition: int, n: int) -> None:
    vnode = partition_vnode(source, topic, partition, n)
    assert 0 <= vnode < n
    assert vnode == reference_route(source, topic, partition, n)
    assert vnode == partition_vnode(source, topic, partition, n)


def test_lengths_are_utf8_byte_lengths() -> None:
    assert partition_vnode("srcé", "tö", 3, 1 << 20) == reference_route("srcé", "tö", 3, 1 << 20)
    # Moving one character across the source/topic boundary changes the route (length prefix works).
    assert partition_vnode("ab", "c", 0, 1 << 30) != partition_vnode("a", "bc", 0, 1 << 30)


def test_one_vnode_routes_everything_to_zero() -> None:
    assert {partition_vnode("s", "t", p, 1) for p in range(50)} == {0}


@pytest.mark.parametrize(
    ("source", "topic", "partition", "vnodes"),
    [
        ("s", "t", -1, 256),
        ("s", "t", PARTITION_MAX + 1, 256),
        ("s", "t", True, 256),
        ("s", "t", 1.0, 256),
        ("s", "t", 0, 0),
        ("s", "t", 0, -3),
        ("s", "t", 0, True),
        ("", "t", 0, 256),
        ("s", "", 0, 256),
        (b"s", "t", 0, 256),
        ("s", None, 0, 256),
        ("\ud800", "t", 0, 256),
    ],
)
def test_invalid_inputs_are_rejected(source: object, topic: object, partition: object, vnodes: object) -> None:
    with pytest.raises(RoutingError):
        partition_vnode(source, topic, partition, vnodes)  # type: ignore[arg-type]


def test_boundary_partitions_are_accepted() -> None:
    assert 0 <= partition_vnode("s", "t", 0, 7) < 7
    assert 0 <= partition_vnode("s", "t", PARTITION_MAX, 7) < 7


tp_lists = st.lists(st.tuples(st.sampled_from(["a", "b.v1", "ç"]), st.integers(0, 200)), max_size=60)


@given(tp_lists, st.integers(1, 64))
def test_grouping_is_a_partition_and_order_independent(tps: list[tuple[str, int]], n: int) -> None:
    groups = partitions_by_vnode("src", tps, n)
    flat = [tp for members in groups.values() for tp in members]
    assert sorted(flat) == sorted(set(tps))
    assert len(flat) == len(set(flat))
    for vnode, members in groups.items():
        assert members
        assert list(members) == sorted(members)
        for topic, partition in members:
            assert partition_vnode("src", topic, partition, n) == vnode
    assert list(groups) == sorted(groups)
    assert partitions_by_vnode("src", list(reversed(tps)), n) == groups
    assert vnode_loads("src", tps, n) == {v: len(m) for v, m in groups.items()}


@settings(max_examples=60)
@given(
    tp_lists,
    st.integers(1, 32).flatmap(
        lambda n: st.lists(st.integers(0, 4), min_size=n, max_size=n)
    ),
)
def test_every_partition_has_exactly_one_owner(tps: list[tuple[str, int]], owners: list[int]) -> None:
    n = len(owners)
    snapshot = AssignmentSnapshot(1, tuple(owners), (1,) * n)
    candidates = snapshot.nodes() | {UNASSIGNED}
    owned = {node: owned_partitions("src", tps, snapshot, node) for node in candidates}
    seen: set[tuple[str, int]] = set()
    for node, parts in owned.items():
        assert not (seen & parts)
        seen |= parts
        for topic, partition in parts:
            assert snapshot.owners[partition_vnode("src", topic, partition, n)] == node
    assert seen == set(tps)
    assert owned_partitions("src", tps, snapshot, 99) == frozenset()


def test_grouping_rejects_bad_partition_inside_iterable() -> None:
    with pytest.raises(RoutingError):
        partitions_by_vnode("src", [("t", 0), ("t", -5)], 16)
    with pytest.raises(RoutingError):
        partitions_by_vnode("src", [], 0)
