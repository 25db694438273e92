"""The observer's reads of the store (what ``laminar-kafka status`` reads, never writing): the live
members, the elected leader, and a manifest with its write time; on the MemoryStore (ZooKeeper's
semantics) and on the LocalStore, whose directory another process reads through ``load``."""
from __future__ import annotations

from pathlib import Path

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.local.store import LocalStore, write_durable
from laminar_kafka.coordinator.store import StoredManifest
from laminar_kafka.coordinator.values import Manifest, Member
from tests.unit.coordinator.partitions import SOURCE, commit_first_epoch

CONFIG = CoordinatorConfig(pipeline="o", hosts="memory", checkpoint_interval=1.0, round_deadline=5.0, vnode_count=8)


def test_an_empty_store_has_no_member_no_leader_and_no_manifest() -> None:
    store = MemoryStore()
    assert store.read_members() == {} and store.read_leader() is None
    assert store.read_stored_manifest(0) is None


def test_the_members_are_the_live_sessions_and_the_leader_is_the_lowest_candidate() -> None:
    store = MemoryStore()
    store.register(Member(2, "b2"))
    store.register(Member(1, "b1"))
    assert store.read_members() == {1: Member(1, "b1"), 2: Member(2, "b2")}
    assert store.read_leader() == 2  # the first to stand
    store.unregister(2)
    assert store.read_members() == {1: Member(1, "b1")} and store.read_leader() == 1
    store.unregister(1)
    assert store.read_members() == {} and store.read_leader() is None


def test_the_memory_store_keeps_no_write_time() -> None:
    store = MemoryStore()
    control = commit_first_epoch(store, CONFIG, Member(1, "b1"))
    committed = store.read_manifest(control.last_epoch)
    assert committed is not None and committed.epoch == 1
    assert store.read_stored_manifest(1) == StoredManifest(committed, None)
    assert store.read_stored_manifest(7) is None


def test_the_local_store_dates_a_manifest_by_its_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.recover()
    commit_first_epoch(store, CONFIG, Member(1, "b1"))
    stored = store.read_stored_manifest(1)
    assert stored is not None and stored.manifest == store.read_manifest(1)
    assert stored.written_at == store.manifest_path(1).stat().st_mtime
    assert store.read_stored_manifest(7) is None


def test_load_reads_another_process_s_directory_and_writes_nothing(tmp_path: Path) -> None:
    writer = LocalStore(tmp_path / "p")
    writer.recover()
    control = commit_first_epoch(writer, CONFIG, Member(1, "b1"))
    (tmp_path / "p" / "state.json.tmp").write_bytes(b"debris of a crash")
    before = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "p").iterdir()}
    reader = LocalStore(tmp_path / "p")
    reader.load()
    assert reader.read_register() == control
    assert {path.name: path.stat().st_mtime_ns for path in (tmp_path / "p").iterdir()} == before
    assert reader.read_members() == {} and reader.read_leader() is None  # they live in the writer's memory
    absent = LocalStore(tmp_path / "absent")
    absent.load()
    assert absent.read_register() is None and not (tmp_path / "absent").exists()


def test_load_adopts_a_manifest_newer_than_the_register(tmp_path: Path) -> None:
    writer = LocalStore(tmp_path)
    writer.recover()
    control = commit_first_epoch(writer, CONFIG, Member(1, "b1"))
    newer = Manifest(epoch=2, assignment_version=control.version, cursors={SOURCE: {"t:0": 9}})
    write_durable(writer.manifest_path(2), newer.to_json())  # the register write after it was lost
    reader = LocalStore(tmp_path)
    reader.load()
    loaded = reader.read_register()
    assert loaded is not None and loaded.last_epoch == 2
    stored = reader.read_stored_manifest(loaded.last_epoch)
    assert stored is not None and stored.manifest == newer
