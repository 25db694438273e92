"""The ZooKeeper store's observer reads (what ``laminar-kafka status`` reads) over a stand-in client
holding nodes in a dict: the subtree's existence, members (none before the folder exists), the leader
(the lowest election candidate), and a manifest with its node's modification time, strict about a
chunk set that does not match its header. The same reads against a real server:
tests/integration/coordinator/test_zk_status.py."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.events import CoordinatorMetrics
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.store import StoredManifest
from laminar_kafka.coordinator.values import Manifest, Member
from laminar_kafka.coordinator.zk.store import ZooKeeperStore

CONFIG = CoordinatorConfig(pipeline="seen", root="/r")
BASE = "/r/seen"


class Nodes:
    """``get``, ``get_async``, ``get_children`` and ``exists`` over ``{path: (data, mtime_ms)}``."""

    def __init__(self, nodes: dict[str, tuple[bytes, int]]) -> None:
        self.nodes = nodes

    def exists(self, path: str) -> Any:
        return SimpleNamespace(mtime=self.nodes[path][1]) if path in self.nodes else None

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.nodes:
            raise NoNodeError(path)
        data, mtime = self.nodes[path]
        return data, SimpleNamespace(mtime=mtime, version=0)

    def get_async(self, path: str) -> Any:
        client = self
        return SimpleNamespace(get=lambda timeout=None: client.get(path))

    def get_children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return [p[len(path) + 1:] for p in self.nodes if p.startswith(path + "/") and "/" not in p[len(path) + 1:]]


def store_over(nodes: dict[str, tuple[bytes, int]]) -> ZooKeeperStore:
    return ZooKeeperStore(Nodes({BASE: (b"", 0), **nodes}), CONFIG, CoordinatorMetrics())  # type: ignore[arg-type]


def path(relative: str) -> str:
    return f"{BASE}/{relative}"


def test_a_pipeline_exists_when_its_subtree_does() -> None:
    assert store_over({}).exists()
    assert not ZooKeeperStore(Nodes({}), CONFIG, CoordinatorMetrics()).exists()  # type: ignore[arg-type]


def test_members_and_leader_before_the_folders_exist_are_none() -> None:
    store = store_over({})
    assert store.read_members() == {} and store.read_leader() is None


def test_the_leader_is_the_lowest_candidate_and_members_are_read_by_node() -> None:
    store = store_over({
        path(layout.MEMBERS): (b"", 0),
        path(layout.member_path(2)): (Member(2, "b2").to_json(), 0),
        path(layout.member_path(1)): (Member(1, "b1").to_json(), 0),
        path(layout.LEADER): (b"", 0),
        path(layout.candidate_path("candidate-0000000007")): (layout.candidate_data(1, "b1"), 0),
        path(layout.candidate_path("candidate-0000000003")): (layout.candidate_data(2, "b2"), 0),
    })
    assert store.read_members() == {1: Member(1, "b1"), 2: Member(2, "b2")}
    assert store.read_leader() == 2


def test_a_malformed_lowest_candidate_reads_as_no_leader() -> None:
    store = store_over({
        path(layout.LEADER): (b"", 0),
        path(layout.candidate_path("candidate-0000000001")): (b"{not json", 0),
    })
    assert store.read_leader() is None


def test_a_stored_manifest_carries_its_node_s_modification_time() -> None:
    manifest = Manifest(epoch=4, assignment_version=1, cursors={"s": {"t:0": 3}})
    store = store_over({path(layout.checkpoint_path(4)): (manifest.to_json(), 1_700_000_000_250)})
    assert store.read_stored_manifest(4) == StoredManifest(manifest, 1_700_000_000.25)
    assert store.read_stored_manifest(5) is None


def test_a_truncated_chunk_set_is_an_error_for_an_observer_and_absent_for_a_node() -> None:
    header = layout.ChunkHeader(chunks=3, size=10, xxh3=1).to_json()  # its chunks were never written
    store = store_over({path(layout.checkpoint_path(4)): (header, 0)})
    with pytest.raises(layout.ChunkPending, match="3 of 3 chunks missing"):
        store.read_stored_manifest(4)
    assert store.read_manifest(4) is None


def test_a_manifest_under_another_epoch_s_name_is_an_error() -> None:
    manifest = Manifest(epoch=9, assignment_version=1, cursors={})
    store = store_over({path(layout.checkpoint_path(4)): (manifest.to_json(), 0)})
    with pytest.raises(CoordinatorError, match="holds manifest 9"):
        store.read_stored_manifest(4)
