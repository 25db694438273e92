"""`status` reads the control state through the coordinator's store (its observer's reads), never
ZooKeeper paths or files of its own: a store with ZooKeeper's semantics, and an embedded node's state
directory through the LocalStore (Kafka replaced)."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.ops import status
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.local.store import LocalStore
from laminar_kafka.coordinator.values import Member
from tests.unit.coordinator.partitions import PARTITIONS, SOURCE, TOPIC, commit_first_epoch

CONFIG = CoordinatorConfig(pipeline="s", hosts="memory", checkpoint_interval=1.0, round_deadline=5.0, vnode_count=8)


def test_the_view_of_a_shared_store_is_its_members_leader_register_and_last_manifest() -> None:
    store = MemoryStore()
    control = commit_first_epoch(store, CONFIG, Member(3, "b3"))
    store.register(Member(1, "b1"))  # joins later: not the leader, listed first
    view = status._control_view(store)
    assert view.members == (Member(1, "b1"), Member(3, "b3")) and view.leader == 3
    assert view.snapshot == control.snapshot and view.round_info is None
    assert view.manifest == store.read_manifest(1) and view.manifest_written_at is None


def test_a_store_without_a_register_has_members_but_no_assignment_nor_manifest() -> None:
    store = MemoryStore()
    store.register(Member(1, "b1"))
    view = status._control_view(store)
    assert view == status.ControlView((Member(1, "b1"),), 1, None, None, None)


def test_an_embedded_state_directory_is_read_through_the_local_store(tmp_path: Path) -> None:
    writer = LocalStore(tmp_path)
    writer.recover()
    control = commit_first_epoch(writer, CONFIG, Member(1, "b1"))
    view = status._read_state_dir(str(tmp_path))
    assert view.members == (Member(1, "b1"),) and view.leader == 1  # one process: the owner is the member
    assert view.snapshot == control.snapshot and view.round_info is None
    assert view.manifest == writer.read_manifest(1)
    assert view.manifest_written_at == writer.manifest_path(1).stat().st_mtime


def test_collect_status_of_an_embedded_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = LocalStore(tmp_path)
    writer.recover()
    commit_first_epoch(writer, CONFIG, Member(1, "b1"), offset=5)
    monkeypatch.setattr(status, "read_kafka", lambda kafka, topics, timeout: {(TOPIC, p): 9 for p in PARTITIONS})
    observed = status.collect_status(topics=[TOPIC], zk=None, state_dir=str(tmp_path), pipeline="s",
                                     source_identity=SOURCE, bootstrap="localhost:9092")
    assert observed.last_epoch == 1 and observed.assignment_version == 1 and observed.leader == 1
    assert [(n.node_id, n.live, n.vnodes, len(n.partitions)) for n in observed.nodes] == [(1, True, 8, len(PARTITIONS))]
    assert {p.durable_cursor for p in observed.partitions} == {5} and observed.total_durable_lag == 4 * len(PARTITIONS)
    with pytest.raises(UsageError, match="holds no embedded pipeline state"):
        status.collect_status(topics=[TOPIC], zk=None, state_dir=str(tmp_path / "none"), pipeline="s",
                              source_identity=SOURCE, bootstrap="localhost:9092")
