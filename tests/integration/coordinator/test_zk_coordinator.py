"""ZooKeeperCoordinator against the session's real standalone ZooKeeper (a chroot per test)."""
from __future__ import annotations

import json
import threading
import time
from typing import Callable

import pytest
from kazoo.client import KazooClient

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    RoundDecided,
    RoundOutcome,
    RoundStarted,
    SessionState,
    SessionStateChanged,
)
from laminar_kafka.coordinator.engine.leader_loop import now_ms
from laminar_kafka.coordinator.engine.model import RoundState, Step, _decide, next_step
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import (
    SimulatedNode,
    config,
    coordinators,
    expire_session,
    leader_of,
    make_chroot,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_three_nodes_join_commit_epochs_run_a_round_and_one_leaves(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    # These read a manifest some epochs after it committed: keep them all (the helpers' 3 races GC).
    cfg = config(hosts, manifests_to_keep=1000)
    with coordinators(cfg, [1, 2], ) as (coords, nodes):
        first = nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.nodes() == {1, 2})
        committed = nodes[1].wait_for(EpochCommitted, lambda e: e.manifest.assignment_version == first.snapshot.version)
        assert {n for n, _ in committed.manifest.acked_by} == {1, 2}
        assert set(committed.manifest.outputs) == {f"n1-e{committed.manifest.epoch}", f"n2-e{committed.manifest.epoch}"}

        third = ZooKeeperCoordinator(cfg, 3)
        node3 = SimulatedNode(third)
        mark = len(nodes[0].events)
        third.start(timeout=20)
        try:
            started = nodes[0].wait_for(RoundStarted, after=mark)
            decided = nodes[0].wait_for(RoundDecided, lambda e: e.drain_id == started.drain_id)
            assert decided.outcome is RoundOutcome.COMMIT
            cut = coords[0].manifest(decided.manifest_epoch)
            assert cut.assignment_version == started.drain_id.predecessor_version
            changed = node3.wait_for(AssignmentChanged, lambda e: 3 in e.snapshot.nodes())
            assert changed.snapshot.version == started.drain_id.target_version
            assert changed.manifest_epoch == decided.manifest_epoch
            assert list(changed.snapshot.owners) == list(started.target_owners)
            later = node3.wait_for(EpochCommitted, lambda e: e.manifest.assignment_version == changed.snapshot.version)
            assert {n for n, _ in later.manifest.acked_by} == {1, 2, 3}

            third.request_leave()
            gone = nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.version > changed.snapshot.version
                                     and 3 not in e.snapshot.nodes())
            leave_round = [e for e in nodes[0].events if isinstance(e, RoundDecided)][-1]
            assert leave_round.outcome is RoundOutcome.COMMIT and gone.manifest_epoch == leave_round.manifest_epoch
            assert leader_of(coords + [third]).metrics.rounds_committed >= 2
            assert sorted(m.node_id for m in third.members()) == [1, 2, 3]
        finally:
            node3.close()
            third.stop()
        for node in nodes:
            assert node.errors == []


def test_a_zombie_ack_is_rejected(zookeeper: ZooKeeperHandle, unique: Callable[[str], str]) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts)
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2})
        leader = leader_of(coords)
        follower = coords[1] if leader is coords[0] else coords[0]
        fnode = nodes[coords.index(follower)]
        opened = fnode.wait_for(EpochOpened)
        old_boot = follower.boot_id
        expire_session(hosts, follower)  # the server really ends the follower's session
        fnode.wait_for(SessionStateChanged, lambda e: e.state is SessionState.LOST)
        with pytest.raises(FencedError):  # a node acks only on a session it holds
            follower.ack_epoch(EpochAck(follower.node_id, old_boot, opened.epoch, opened.assignment_version, {}))
        assert follower.metrics.stale_acks_rejected == 1
        fnode.auto = False
        mark = len(fnode.events)
        follower.rejoin()
        assert follower.boot_id != old_boot

        back = fnode.wait_for(AssignmentChanged, lambda e: follower.node_id in e.snapshot.nodes(), after=mark)
        epoch = fnode.wait_for(EpochOpened, lambda e: e.assignment_version == back.snapshot.version, after=mark)
        # The zombie's ack reaches ZooKeeper anyway (written by hand with the old boot id).
        raw = KazooClient(hosts=hosts, timeout=5.0)
        raw.start(timeout=10)
        try:
            zombie = EpochAck(follower.node_id, old_boot, epoch.epoch, epoch.assignment_version,
                              {"s": {"t:0": 0}}, ("zombie-output",))
            raw.create(follower.store.path(layout.ack_path(epoch.epoch, follower.node_id, old_boot)), zombie.to_json())
        finally:
            raw.stop()
            raw.close()
        fnode.ack(epoch)
        committed = fnode.wait_for(EpochCommitted, lambda e: e.manifest.epoch == epoch.epoch)
        assert "zombie-output" not in committed.manifest.outputs
        assert (follower.node_id, old_boot) not in committed.manifest.acked_by
        assert (follower.node_id, follower.boot_id) in committed.manifest.acked_by
        # the leader counts the rejection once its commit step is applied: the commit may be seen first
        wait_until(lambda: leader.metrics.stale_acks_rejected >= 1)
        assert leader.metrics.stale_acks_rejected == 1


def test_two_contenders_race_a_decision_and_only_one_wins(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=30.0)
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.nodes() == {1, 2})
        for node in nodes:
            node.auto_ready = False
        third = ZooKeeperCoordinator(cfg, 3)
        mark = len(nodes[0].events)
        third.start(timeout=20)
        try:
            started = nodes[0].wait_for(RoundStarted, after=mark)
            leader = leader_of(coords + [third])
            lead = leader.leadership
            assert lead is not None
            view, version = leader.store.read_view(now_ms())
            late = view.__class__(**{**view.__dict__, "now_ms": started.deadline_unix_ms + 1})
            abort = next_step(late, cfg, lead.token)
            assert abort is not None and abort.decision is not None and abort.decision.outcome is RoundOutcome.ABORT
            assert view.control is not None and isinstance(view.control.round, RoundState)
            commit_control, decide = _decide(view.control, RoundOutcome.COMMIT, 0, view.members, lead.token)
            commit = Step("decide", commit_control, (decide,))
            results: list[str] = []
            barrier = threading.Barrier(2)

            def contend(step: object) -> None:
                barrier.wait()
                try:
                    leader.execute(lead, step, version)  # type: ignore[arg-type]
                    results.append(step.decision.outcome.value)  # type: ignore[attr-defined]
                except FencedError:
                    results.append("rejected")

            threads = [threading.Thread(target=contend, args=(s,)) for s in (abort, commit)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert sorted(results)[1] == "rejected" or sorted(results)[0] == "rejected"
            assert results.count("rejected") == 1
            winner = next(r for r in results if r != "rejected")
            raw, _ = leader.client.get(leader.store.path(layout.decision_path(started.drain_id.target_version)))
            assert json.loads(raw)["outcome"] == winner
            decided = nodes[0].wait_for(RoundDecided, lambda e: e.drain_id == started.drain_id)
            assert decided.outcome.value == winner
            assert leader.metrics.fenced_writes_rejected >= 1
        finally:
            third.stop()


def test_a_round_aborts_at_its_deadline(zookeeper: ZooKeeperHandle, unique: Callable[[str], str]) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, round_deadline=1.5)
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        before = nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.nodes() == {1, 2})
        for node in nodes:
            node.auto_ready = False
        third = ZooKeeperCoordinator(cfg, 3)
        mark = len(nodes[0].events)
        third.start(timeout=20)
        try:
            started = nodes[0].wait_for(RoundStarted, after=mark)
            decided = nodes[0].wait_for(RoundDecided, lambda e: e.drain_id == started.drain_id, timeout=10)
            assert decided.outcome is RoundOutcome.ABORT
            assert time.time() * 1000 >= started.deadline_unix_ms
            after = nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.version == started.drain_id.target_version)
            assert after.snapshot.owners == before.snapshot.owners
            assert leader_of(coords + [third]).metrics.rounds_aborted >= 1
        finally:
            third.stop()


def test_a_dead_node_is_shed_without_a_drain(zookeeper: ZooKeeperHandle, unique: Callable[[str], str]) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    # These read a manifest some epochs after it committed: keep them all (the helpers' 3 races GC).
    cfg = config(hosts, manifests_to_keep=1000)
    with coordinators(cfg, [1, 2, 3]) as (coords, nodes):
        nodes[0].wait_for(AssignmentChanged, lambda e: e.snapshot.nodes() == {1, 2, 3})
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2, 3})
        leader = leader_of(coords)
        victim = next(c for c in coords if c is not leader)
        rounds_before = len([e for e in nodes[0].events if isinstance(e, RoundStarted)])
        lnode = nodes[coords.index(leader)]
        mark = len(lnode.events)
        expire_session(hosts, victim)
        shed = lnode.wait_for(AssignmentChanged, lambda e: victim.node_id not in e.snapshot.nodes(), after=mark)
        latest = leader.manifest(shed.manifest_epoch)
        assert latest.epoch == shed.manifest_epoch > 0
        assert len([e for e in nodes[0].events if isinstance(e, RoundStarted)]) == rounds_before  # no drain
        assert leader.metrics.nodes_shed == 1
        after = nodes[coords.index(leader)].wait_for(
            EpochCommitted, lambda e: e.manifest.assignment_version == shed.snapshot.version)
        assert victim.node_id not in {n for n, _ in after.manifest.acked_by}


@pytest.mark.timeout(180)
def test_large_manifests_are_chunked_and_old_ones_collected(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    # manifests stored whole (manifest_deltas=False), the format the chunk counts below are of
    cfg = config(hosts, checkpoint_interval=0.05, manifests_to_keep=2, manifest_deltas=False)
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        coordinator, node = coords[0], nodes[0]
        for round_no in range(6):
            opened = node.wait_for(EpochOpened, lambda e, round_no=round_no: e.epoch == round_no + 1)
            # Epochs 1 and 2 each ack ~750 KB of distinct partitions (acks over 512 KB are chunked too);
            # manifest 2 merges both: ~1.5 MB, written as chunks over several transactions.
            span = range(20_000 * round_no, 20_000 * (round_no + 1)) if round_no < 2 else range(10)
            cursors = {"s": {f"topic-with-a-long-name:{p}": 1_000_000 + round_no for p in span}}
            coordinator.ack_epoch(EpochAck(1, coordinator.boot_id, opened.epoch, opened.assignment_version, cursors))
            # about 1 s here; a CI run once waited 15 s in vain for epoch 2 (a stale cached read of
            # its chunked ack, fixed in ZooKeeperStore._cached_reads): a bound for a hang, not for speed
            node.wait_for(EpochCommitted, lambda e, opened=opened: e.manifest.epoch == opened.epoch, timeout=45)
            if round_no < 2:
                path = coordinator.store.path(layout.checkpoint_path(opened.epoch))
                chunks = coordinator.client.get_children(path)
                assert len(chunks) == (2, 3)[round_no] and sorted(chunks)[0] == "chunk-0000"
                written = node.wait_for(EpochCommitted, lambda e, opened=opened: e.manifest.epoch == opened.epoch).manifest
                coordinator.store.forget_manifests()  # read it back from ZooKeeper, not the cache
                assert coordinator.manifest(opened.epoch) == written
                assert len(written.cursors["s"]) == 20_000 * (round_no + 1)
        kept = sorted(int(n) for n in coordinator.client.get_children(coordinator.store.path(layout.CHECKPOINTS)))
        # GC keeps 2K manifests (K, and K more for the bases of deltas, whatever this leader writes),
        # every K/2 commits: at most 2K+1 remain, and the oldest are gone
        assert 1 not in kept and 3 in kept and kept[-1] == 6
        assert len(coordinator.client.get_children(coordinator.store.path(layout.EPOCHS))) <= 4


@pytest.mark.timeout(120)
def test_manifests_are_stored_as_deltas_over_a_full_one_and_read_back_whole(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    """1,000 partitions acked once, then a few per epoch: ZooKeeper holds a full manifest at least
    every K epochs and deltas of a few cursors between; each reads back whole, from ZooKeeper, and
    garbage collection never takes the base of a manifest it keeps."""
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    keep = 3
    cfg = config(hosts, checkpoint_interval=0.05, manifests_to_keep=keep)
    everything = {f"orders:{p}": 100 for p in range(1_000)}
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        coordinator, node = coords[0], nodes[0]
        written: dict[int, object] = {}
        stored: dict[int, bytes] = {}
        for epoch in range(1, 11):
            opened = node.wait_for(EpochOpened, lambda e, epoch=epoch: e.epoch == epoch)
            cursors = everything if epoch == 1 else {f"orders:{epoch}": 100 + epoch}  # acks carry what moved
            coordinator.ack_epoch(EpochAck(1, coordinator.boot_id, epoch, opened.assignment_version, {"s": cursors}))
            written[epoch] = node.wait_for(EpochCommitted, lambda e, epoch=epoch: e.manifest.epoch == epoch, timeout=30).manifest
            stored[epoch] = coordinator.client.get(coordinator.store.path(layout.checkpoint_path(epoch)))[0]
        formats = {e: json.loads(raw).get("format_version") for e, raw in stored.items()}
        # full when there is no base or the base is K epochs old; a delta over the newest full one between
        assert formats == {1: 1, 2: 2, 3: 2, 4: 1, 5: 2, 6: 2, 7: 1, 8: 2, 9: 2, 10: 1}
        assert {e: json.loads(raw)["base_epoch"] for e, raw in stored.items() if formats[e] == 2} == \
            {2: 1, 3: 1, 5: 4, 6: 4, 8: 7, 9: 7}
        assert max(len(stored[e]) for e in formats if formats[e] == 2) < 600 < 15_000 < len(stored[7])
        coordinator.store.forget_manifests()  # read back from ZooKeeper: deltas over their bases
        kept = sorted(int(n) for n in coordinator.client.get_children(coordinator.store.path(layout.CHECKPOINTS)))
        for epoch in range(8, 11):
            assert epoch in kept and coordinator.manifest(epoch) == written[epoch]
        assert coordinator.manifest(9).cursors["s"] == {**everything, **{f"orders:{e}": 100 + e for e in range(2, 10)}}
        assert 7 in kept  # the base of 8 and 9, older than the last K
        assert kept[0] > 10 - 2 * keep - 1  # the K manifests more than K are all that is left


@pytest.mark.timeout(60)
def test_a_manifest_delta_whose_base_was_deleted_by_hand_is_refused_not_read_as_a_smaller_manifest(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    """A state fault: the full manifest a delta is written over deleted (by hand, a partial restore).
    Reading the latest manifest fails loudly; it never returns the delta's few cursors as the whole."""
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=0.05, manifests_to_keep=5)
    everything = {f"orders:{p}": 100 for p in range(200)}
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        coordinator, node = coords[0], nodes[0]
        for epoch, cursors in ((1, everything), (2, {"orders:7": 107})):
            opened = node.wait_for(EpochOpened, lambda e, epoch=epoch: e.epoch == epoch)
            coordinator.ack_epoch(EpochAck(1, coordinator.boot_id, epoch, opened.assignment_version, {"s": cursors}))
            node.wait_for(EpochCommitted, lambda e, epoch=epoch: e.manifest.epoch == epoch, timeout=30)
        stored = coordinator.client.get(coordinator.store.path(layout.checkpoint_path(2)))[0]
        assert json.loads(stored)["base_epoch"] == 1
        coordinator.client.delete(coordinator.store.path(layout.checkpoint_path(1)), recursive=True)
        coordinator.store.forget_manifests()
        with pytest.raises(CoordinatorError, match="manifest 2 does not exist"):
            coordinator.latest_manifest()
        with pytest.raises(CoordinatorError, match="manifest 2 does not exist"):
            coordinator.manifest(2)


@pytest.mark.timeout(120)
def test_a_quiet_pipeline_waits_the_quiet_interval_and_another_node_s_ask_brings_the_next_epoch(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    """Epochs that move nothing: after three the leader waits the quiet interval; an ask written by
    another process's coordinator (through ZooKeeper: the leader's watch) opens the next at once."""
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    quiet_s = 3.0
    cfg = config(hosts, checkpoint_interval=0.1, quiet_checkpoint_interval=quiet_s, manifests_to_keep=100)
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        coordinator, node = coords[0], nodes[0]
        opened_at: dict[int, float] = {}

        def ack(epoch: int) -> None:
            opened = node.wait_for(EpochOpened, lambda e: e.epoch == epoch, timeout=4 * quiet_s)
            opened_at[epoch] = time.monotonic()
            coordinator.ack_epoch(EpochAck(1, coordinator.boot_id, epoch, opened.assignment_version, {"s": {}}))
            node.wait_for(EpochCommitted, lambda e: e.manifest.epoch == epoch, timeout=30)

        for epoch in range(1, 7):  # no cursor moves
            ack(epoch)
        assert opened_at[6] - opened_at[5] >= quiet_s * 0.9  # the quiet interval
        assert opened_at[3] - opened_at[2] < quiet_s / 2  # the ordinary one, while counting

        other = ZooKeeperCoordinator(cfg, 2, endpoint="127.0.0.1:9002")
        other.connect(timeout=20)  # connected, not a member: it only asks
        try:
            asked = time.monotonic()
            other.request_epoch(6)
            ack(7)
            assert opened_at[7] - asked < quiet_s / 2
            assert int(other.client.get(other.store.path(layout.EPOCH_WANTED))[0]) == 6
            other.request_epoch(5)  # an older ask never lowers the stored one
            assert int(other.client.get(other.store.path(layout.EPOCH_WANTED))[0]) == 6
        finally:
            other.stop()
