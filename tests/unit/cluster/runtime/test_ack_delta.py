"""Acks that carry what changed: the merged manifest is the one full acks would give, and a node
stops when a committed manifest does not hold what its ack stood for."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_kafka.cluster.errors import RuntimeFailure
from laminar_kafka.cluster.runtime.state import ack_cursors, changed_cursors
from laminar_kafka.coordinator.base import EpochCommitted, EpochOpened, Manifest
from laminar_kafka.coordinator.engine.acks import merge_manifest
from laminar_kafka.coordinator.values import EpochAck
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from tests.unit.cluster.fakes import wait_for
from tests.unit.cluster.runtime.test_runtime_vnode import Cluster, key


def test_changed_cursors_keeps_what_moved_or_is_new() -> None:
    base = {"t:0": 5, "t:1": 7}
    assert changed_cursors({"t:0": 5, "t:1": 8, "t:2": 0}, base) == {"t:1": 8, "t:2": 0}
    assert changed_cursors({"t:0": 5}, base) == {}
    assert changed_cursors({"t:0": 5}, {}) == {"t:0": 5}


PARTITIONS = [f"t:{p}" for p in range(24)]


@settings(max_examples=200, deadline=None)
@given(
    previous=st.dictionaries(st.sampled_from(PARTITIONS), st.integers(0, 50)),
    moves=st.dictionaries(st.sampled_from(PARTITIONS), st.integers(0, 20)),
    owners=st.lists(st.sampled_from([1, 2, 3]), min_size=8, max_size=8),
)
def test_acks_of_what_changed_merge_into_the_manifest_full_acks_give(
    previous: dict[str, int], moves: dict[str, int], owners: list[int]
) -> None:
    """Every node acks epoch E over manifest E-1 either with every owned cursor or with those that
    moved since E-1: the manifests are equal (cursors only move forward; a new partition is new)."""
    snapshot = AssignmentSnapshot.initial(8).next(1, owners)
    before = Manifest(3, 1, {"src": previous})
    now = {**previous, **{k: previous.get(k, 0) + step for k, step in moves.items()}}
    full, delta = [], []
    for node in sorted(snapshot.nodes()):
        cursors = ack_cursors(now, "src", snapshot, node)
        full.append(EpochAck(node, f"b{node}", 4, 1, {"src": cursors}))
        delta.append(EpochAck(node, f"b{node}", 4, 1, {"src": changed_cursors(cursors, previous)}))
    assert merge_manifest(4, 1, before, delta) == merge_manifest(4, 1, before, full)
    assert sum(len(a.cursors["src"]) for a in delta) == sum(1 for k, v in now.items() if previous.get(k) != v)


async def test_a_node_stops_when_the_committed_manifest_lacks_what_its_ack_stood_for(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, {0, 1})
    await cluster.start()
    await cluster.commit(4, 1)
    acks = len(cluster.coordinator.acks)
    cluster.coordinator.emit(EpochOpened(5, 1))
    await wait_for(lambda: len(cluster.coordinator.acks) > acks)
    ack = cluster.coordinator.acks[-1]
    assert ack.cursors["src"] == {}  # nothing moved since manifest 4
    # A leader that merged over another base (a control state changed under the node) would commit
    # a manifest without the node's cursor of t:0; the node must not go on from it.
    latest = cluster.coordinator.manifests[4]
    wrong = replace(latest, epoch=5, cursors={"src": {**latest.cursors["src"], key(0): 1}},
                    acked_by=((1, ack.boot_id),))
    cluster.coordinator.manifests[5] = wrong
    cluster.coordinator.emit(EpochCommitted(wrong))
    assert cluster.task is not None
    with pytest.raises(RuntimeFailure, match=r"manifest 5 committed this node's ack but holds t:0 = 1"):
        await asyncio.wait_for(cluster.task, 5)
