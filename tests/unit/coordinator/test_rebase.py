"""Rebasing the control state on a seed from the lake: ControlStore.reset (memory and
local files), Coordinator.connect / rebase on the embedded LocalCoordinator, and the model's first
register continuing epochs after the pinned manifest's epoch."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import (
    AckRejected,
    CoordinatorConfig,
    CoordinatorEvent,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    Manifest,
    initial_manifest,
)
from laminar_kafka.coordinator.engine.model import next_step
from laminar_kafka.coordinator.engine.steps import Step, StepKind, View
from laminar_kafka.coordinator.errors import CoordinatorError
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.local.store import LocalStore
from laminar_kafka.coordinator.values import Member
from laminar_kafka.devstack.waiting import EventLog
from tests.unit.coordinator.partitions import leader_step, owned_keys

pytestmark = pytest.mark.timeout(60)

CONFIG = CoordinatorConfig(pipeline="r", hosts="memory", checkpoint_interval=1.0, round_deadline=5.0, vnode_count=8)
S = 42
START = initial_manifest({"s": {"t:0": 0, "t:1": 0}})
SEED = Manifest(S, 0, {"s": {"t:0": 500, "t:5": 70}})


# ---- a store driven by the model, as the leader drives it ----------------------------------------------


class Driver:
    """One member (node 1) of a pipeline over ``store``, stepping the pure model by hand."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.now = 1_000_000
        self.boot = f"b{store.next_seq}"
        store.register(Member(1, self.boot))

    def settle(self) -> list[Step]:
        steps = []
        for _ in range(20):
            step = leader_step(self.store, CONFIG, self.now)
            if step is None:
                return steps
            steps.append(step)
        raise AssertionError("the model does not settle")

    def commit_epoch(self, offset: int) -> Manifest:
        """Open the next epoch, ack every owned partition at ``offset``, commit it."""
        self.now += 2000
        self.settle()
        control = self.store.read_register()
        assert control is not None and control.open_epoch
        keys = owned_keys(control.snapshot.owners, 1)
        self.store.write_ack(EpochAck(1, self.boot, control.open_epoch, control.version,
                                      {"s": {k: offset for k in keys}}, (f"out-{control.open_epoch}",)))
        self.settle()
        manifest = self.store.read_manifest(control.open_epoch)
        assert manifest is not None
        return manifest


def populate(store: MemoryStore) -> Driver:
    """A pipeline with a pinned start, pinned ids and settings, and three committed epochs."""
    store.pin_initial(START)
    store.pin_topic_ids({"t": "id-t", "u": "id-u"})
    store.pin_setting("pipeline.topic", "t,u")
    store.write_vnode_load({0: 3, 1: 2})
    driver = Driver(store)
    assert [s.kind for s in driver.settle()] == [StepKind.PUBLISH]
    for offset in (10, 20, 30):
        driver.commit_epoch(offset)
    control = store.read_register()
    assert control is not None and control.last_epoch == 3
    return driver


def assert_reset_to_seed(store: MemoryStore) -> None:
    assert store.read_register() is None
    assert store.register_and_version() == (None, -1)
    assert store.children(layout.EPOCHS) == [] and store.children(layout.ROUNDS) == []
    assert store.children(layout.CHECKPOINTS) == [layout.epoch_name(0), layout.epoch_name(S)]
    assert store.read_manifest(0) == SEED and store.read_manifest(S) == SEED
    for old in (1, 2, 3):
        assert store.read_manifest(old) is None
    # pinned topic ids and settings stay (a different value does not replace them)
    assert store.pin_topic_ids({"t": "other", "u": "other"}) == {"t": "id-t", "u": "id-u"}
    assert store.pin_setting("pipeline.topic", None) == "t,u"
    assert store.pin_setting("pipeline.topic", "x") == "t,u"
    view, version = store.read_view(0)
    assert view.control is None and version == -1 and view.latest_manifest == SEED
    assert dict(view.vnode_load) == {0: 3, 1: 2}


def continue_after_the_seed(driver: Driver) -> None:
    """The first register continues at S, the next epoch is S + 1, merged from the seed's cursors."""
    steps = driver.settle()
    assert [s.kind for s in steps] == [StepKind.PUBLISH]
    control = driver.store.read_register()
    assert control is not None and control.last_epoch == S and control.manifest_epoch == S
    assert control.version == 1 and control.open_epoch == 0
    manifest = driver.commit_epoch(600)
    assert manifest.epoch == S + 1
    owned = owned_keys(control.snapshot.owners, 1)
    assert manifest.cursors["s"] == {**SEED.cursors["s"], **{k: 600 for k in owned}}


def test_memory_store_reset_to_a_seed() -> None:
    store = MemoryStore()
    driver = populate(store)
    members_before = dict(store.members)
    store.reset(SEED)
    assert_reset_to_seed(store)
    assert store.members == members_before  # members stay (their sessions are their own)
    store.reset(SEED)  # idempotent
    assert_reset_to_seed(store)
    continue_after_the_seed(driver)


def test_memory_store_reset_in_the_middle_of_a_round_and_an_open_epoch() -> None:
    store = MemoryStore()
    driver = populate(store)
    store.register(Member(2, "b-two"))  # a join: a round starts; an epoch opens
    driver.now += 2000
    driver.settle()
    control = store.read_register()
    assert control is not None and (control.round is not None or control.open_epoch)
    store.unregister(2)
    store.reset(SEED)
    assert_reset_to_seed(store)


def test_memory_store_reset_to_epoch_zero_writes_only_the_pinned_slot() -> None:
    store = MemoryStore()
    populate(store)
    zero = initial_manifest({"s": {"t:0": 3}})
    store.reset(zero)
    assert store.children(layout.CHECKPOINTS) == [layout.epoch_name(0)]
    assert store.read_manifest(0) == zero and store.read_register() is None


def local_store(directory: Path) -> LocalStore:
    store = LocalStore(directory)
    store.recover()
    return store


def manifest_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("manifest-*.json"))


def test_local_store_reset_to_a_seed_and_reopen(tmp_path: Path) -> None:
    store = local_store(tmp_path)
    populate(store)
    assert (tmp_path / "state.json").exists() and len(manifest_files(tmp_path)) == 4
    store.reset(SEED)
    assert_reset_to_seed(store)
    assert not (tmp_path / "state.json").exists()
    assert manifest_files(tmp_path) == [f"manifest-{0:020d}.json", f"manifest-{S:020d}.json"]
    assert not list(tmp_path.glob("*.tmp"))

    reopened = local_store(tmp_path)  # a new process on the same directory
    assert reopened.read_register() is None
    assert reopened.read_manifest(0) == SEED and reopened.read_manifest(S) == SEED
    assert reopened.read_manifest(3) is None
    assert reopened.pin_topic_ids({"t": "z"}) == {"t": "id-t"}
    assert reopened.pin_setting("pipeline.topic", None) == "t,u"
    view, _ = reopened.read_view(0)
    assert view.control is None and view.latest_manifest == SEED
    continue_after_the_seed(Driver(reopened))

    again = local_store(tmp_path)  # and the epochs after the seed survive a reopen too
    control = again.read_register()
    assert control is not None and control.last_epoch == S + 1
    assert again.read_manifest(S + 1) is not None and again.read_manifest(0) == SEED


def test_local_store_reset_twice_is_the_same(tmp_path: Path) -> None:
    store = local_store(tmp_path)
    populate(store)
    store.reset(SEED)
    store.reset(SEED)
    assert manifest_files(tmp_path) == [f"manifest-{0:020d}.json", f"manifest-{S:020d}.json"]
    assert local_store(tmp_path).read_manifest(0) == SEED


# ---- the model's first register -------------------------------------------------------------------------


def first_register(latest: Manifest | None) -> Step:
    view = View(control=None, members={1: Member(1, "b1"), 2: Member(2, "b2")}, now_ms=5000, latest_manifest=latest)
    step = next_step(view, CONFIG, token=7)
    assert step is not None and step.kind is StepKind.PUBLISH and step.intents == ()
    return step


def test_the_first_register_continues_after_a_seeds_epoch() -> None:
    control = first_register(SEED).control
    assert control.last_epoch == S and control.manifest_epoch == S
    assert control.open_epoch == 0 and control.version == 1 and control.leader_token == 7
    assert control.snapshot.nodes() == {1, 2} and control.last_commit_ms == 5000


@pytest.mark.parametrize("latest", [None, START], ids=["no-pin", "pinned-start"])
def test_the_first_register_of_a_new_pipeline_starts_at_epoch_zero(latest: Manifest | None) -> None:
    control = first_register(latest).control
    assert control.last_epoch == 0 and control.manifest_epoch == 0
    assert control.snapshot.nodes() == {1, 2}


def test_no_first_register_without_an_eligible_member() -> None:
    view = View(control=None, members={1: Member(1, "b1", leaving=True)}, now_ms=0, latest_manifest=SEED)
    assert next_step(view, CONFIG, token=1) is None


# ---- LocalCoordinator: connect, rebase, start -------------------------------------------------------------


class Recorder(EventLog[CoordinatorEvent]):
    def __init__(self, coordinator: LocalCoordinator) -> None:
        super().__init__()
        coordinator.subscribe(self.append)


def local_config(interval: float = 0.02) -> CoordinatorConfig:
    return CoordinatorConfig(pipeline="l", checkpoint_interval=interval, vnode_count=4, manifests_to_keep=2)


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[Path]:
    """A state directory whose pipeline committed a few epochs, its node stopped."""
    c = LocalCoordinator(local_config(), tmp_path)
    events = Recorder(c)
    c.start(timeout=10)
    try:
        c.pin_start(initial_manifest({"s": {"t:0": 0, "t:1": 0}}))
        c.pin_topic_ids({"t": "id-t"})
        for _ in range(3):
            opened = events.wait_for(EpochOpened, lambda e: e.epoch > (c.latest_manifest() or START).epoch)
            keys = [f"t:{p}" for p in range(2)]
            c.ack_epoch(EpochAck(c.node_id, c.boot_id, opened.epoch, opened.assignment_version,
                                 {"s": {k: opened.epoch for k in keys}}, (f"o{opened.epoch}",)))
            events.wait_for(EpochCommitted, lambda e, n=opened.epoch: e.manifest.epoch == n)
    finally:
        c.stop()
    yield tmp_path


def record_steps(c: LocalCoordinator) -> list[Step]:
    """Every step the leader applies from now on."""
    applied: list[Step] = []
    store = c.store
    apply = store.apply

    def recording(term, step, version):  # type: ignore[no-untyped-def]
        apply(term, step, version)
        applied.append(step)

    store.apply = recording  # type: ignore[method-assign]
    return applied


def test_connect_rebase_start_continues_after_the_seed(stopped: Path) -> None:
    c = LocalCoordinator(local_config(), stopped)
    c.connect(timeout=10)
    c.connect(timeout=10)  # idempotent
    try:
        before = c.latest_manifest()
        assert before is not None and before.epoch >= 3 and before.outputs
        assert c.manifest(0).epoch == 0
        seed = Manifest(before.epoch + 10, 0, {"s": {"t:0": 100, "t:1": 200}})
        with c.reconcile_lock():
            c.rebase(seed)
        assert c.latest_manifest() == seed and c.manifest(0) == seed
        assert c.pin_topic_ids({"t": "other"}) == {"t": "id-t"}
        applied = record_steps(c)
        events = Recorder(c)
        c.start(timeout=10)
        first = applied[0]
        assert first.kind is StepKind.PUBLISH
        assert first.control.last_epoch == seed.epoch and first.control.manifest_epoch == seed.epoch
        assert c.manifest(seed.epoch) == seed

        opened = events.wait_for(EpochOpened)
        assert opened.epoch == seed.epoch + 1
        c.ack_epoch(EpochAck(c.node_id, c.boot_id, opened.epoch, opened.assignment_version,
                             {"s": {"t:0": 99, "t:1": 200}}, ()))  # below the seed's t:0: rejected
        rejected = events.wait_for(AckRejected)
        assert "regresses below 100" in rejected.reason
        c.ack_epoch(EpochAck(c.node_id, c.boot_id, opened.epoch, opened.assignment_version,
                             {"s": {"t:0": 101, "t:1": 200}}, ("o",)))
        committed = events.wait_for(EpochCommitted).manifest
        assert committed.epoch == seed.epoch + 1 and committed.cursors == {"s": {"t:0": 101, "t:1": 200}}
    finally:
        c.stop()

    reopened = LocalCoordinator(local_config(), stopped)  # the rebased state survives a restart
    reopened.connect(timeout=10)
    try:
        latest = reopened.latest_manifest()
        assert latest is not None and latest.epoch >= seed.epoch + 1 and reopened.manifest(0) == seed
    finally:
        reopened.stop()


def test_rebase_before_any_start_of_a_fresh_directory(tmp_path: Path) -> None:
    c = LocalCoordinator(local_config(interval=60), tmp_path)
    c.connect(timeout=10)
    try:
        assert c.latest_manifest() is None
        c.rebase(SEED)
        assert c.latest_manifest() == SEED
        applied = record_steps(c)
        c.start(timeout=10)
        assert applied[0].control.last_epoch == S
        control = c.store.read_register()
        assert control is not None and control.last_epoch == S and control.open_epoch == 0
        assert c.latest_manifest() == SEED and c.manifest(S) == SEED
    finally:
        c.stop()


def test_a_connected_node_that_stops_releases_the_directory(tmp_path: Path) -> None:
    c = LocalCoordinator(local_config(interval=60), tmp_path)
    c.connect(timeout=10)
    c.stop()
    other = LocalCoordinator(local_config(interval=60), tmp_path)
    other.start(timeout=10)  # the directory lock was released
    other.stop()


@pytest.mark.parametrize("bad", [Manifest(5, 0, {}, outputs=("x",)), Manifest(5, 0, {}, acked_by=((1, "b"),))])
def test_rebase_takes_only_an_initial_manifest(tmp_path: Path, bad: Manifest) -> None:
    c = LocalCoordinator(local_config(interval=60), tmp_path)
    c.connect(timeout=10)
    try:
        with pytest.raises(CoordinatorError, match="no outputs and no acks"):
            c.rebase(bad)
        assert c.latest_manifest() is None  # nothing written
    finally:
        c.stop()


# ---- a crash between the rebase and the lake's seal (see the report) -------------------------------------


def test_a_crash_between_rebase_and_seal_reconciles_again_without_refusing(tmp_path: Path) -> None:
    import pyarrow.fs as pafs

    from laminar_kafka.cluster.lake.parquet.records import write_record
    from laminar_kafka.cluster.lake.parquet.tree import ParquetTree
    from laminar_kafka.cluster.lake.reconcile import Action, OnLakeBehind
    from laminar_kafka.cluster.lake.record import LakeRecord
    from laminar_kafka.cluster.lake.startup import StartFacts, reconcile_with_lake

    fs, root = pafs.LocalFileSystem(), str(tmp_path / "out")
    write_record(fs, root, LakeRecord("l", 5, 1, {"s": {"t:0": 50}}, {"t": "id"}))  # the state dir was lost

    class Crash(BaseException):
        pass

    def node() -> tuple[LocalCoordinator, ParquetTree]:
        c = LocalCoordinator(local_config(interval=60), tmp_path / "state")

        def record_of(epoch: int) -> LakeRecord | None:  # as laminar_kafka.cluster.runtime.epochs.EpochRecords
            try:
                m = c.manifest(epoch)
            except CoordinatorError:
                return None
            return LakeRecord("l", epoch, m.assignment_version, m.cursors, {"t": "id"}, ())

        tree = ParquetTree(fs, root, record_of=record_of)
        c.connect(timeout=10)
        return c, tree

    def reconcile(c: LocalCoordinator, tree: ParquetTree):  # type: ignore[no-untyped-def]
        facts = StartFacts("l", 1, ["t"], {"t": "id"}, OnLakeBehind.FAIL, members_timeout_s=1)
        return reconcile_with_lake(c, tree, facts, lambda m: tree.publish(m.epoch, m.outputs, lambda e: None, 1))

    c, tree = node()

    def crash(*_args: object) -> None:
        raise Crash()

    tree.seal = crash  # type: ignore[method-assign]
    try:
        with pytest.raises(Crash):
            reconcile(c, tree)
    finally:
        c.stop()
    c, tree = node()
    try:
        assert reconcile(c, tree).action in (Action.CONTINUE, Action.RESEED)
    finally:
        c.stop()
